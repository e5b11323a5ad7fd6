"""The query-manager server: HTTP to subscribe, list, snapshot and unsubscribe, and a
server-sent-events stream of deltas per client handle; plus the live-table page.

Every request names its user by token (``Authorization: Bearer <token>``, or ``?token=`` for
the browser's EventSource): missing -> 401, unknown -> 403, and a user only ever sees and
releases their own handles. A client whose stream disconnects keeps its handle for a short
grace period (to reconnect), then it is released; a client whose queue fills up (it reads
slower than batches arrive) is dropped with that reason rather than letting memory grow.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .manager import QueryManager
from .registry import AnalyticsError

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")


@dataclass
class _Client:
    user: str
    queue: asyncio.Queue
    connected: bool = False
    dropped: str | None = None
    release: asyncio.TimerHandle | None = field(default=None, repr=False)


class QueryServer:
    """Wraps a :class:`QueryManager` for HTTP clients; :meth:`app` is the ASGI app."""

    def __init__(self, manager: QueryManager, tokens: Mapping[str, str], *, poll_seconds: float = 1.0,
                 queue_size: int = 256, grace_seconds: float = 5.0):
        self.manager = manager
        self.tokens = dict(tokens)
        self.poll_seconds = poll_seconds
        self.queue_size = queue_size
        self.grace_seconds = grace_seconds
        self.clients: dict[str, _Client] = {}
        self._poller: asyncio.Task | None = None

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/", self.page), Route("/analytics", self.list_analytics),
            Route("/subscriptions", self.subscriptions, methods=["GET", "POST"]),
            Route("/subscriptions/{client}", self.unsubscribe, methods=["DELETE"]),
            Route("/subscriptions/{client}/snapshot", self.snapshot),
            Route("/subscriptions/{client}/deltas", self.deltas),
            Route("/stream/{client}", self.stream),
        ], lifespan=self._lifespan)

    # -- lifecycle: one poller turns new batches into pushes --------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._poller = asyncio.create_task(self._poll())
        try:
            yield
        finally:
            self._poller.cancel()

    async def _poll(self) -> None:
        while True:
            try:
                out = await asyncio.to_thread(self.manager.publish_new)
                self._broadcast(out)
            except Exception:  # keep serving; the next tick retries from the last published batch
                log.exception("publishing deltas failed")
            await asyncio.sleep(self.poll_seconds)

    def _broadcast(self, out: Mapping[str, list]) -> None:
        for subscription, deltas in out.items():
            for client_id in self.manager.clients_of(subscription):
                client = self.clients.get(client_id)
                for batch_id, rows in deltas:
                    if client is None or client.dropped:
                        break
                    try:
                        client.queue.put_nowait({"batch_id": batch_id, "rows": rows})
                    except asyncio.QueueFull:
                        self._drop(client_id, f"slow client: {self.queue_size} deltas waiting")

    def _drop(self, client_id: str, reason: str) -> None:
        client = self.clients.get(client_id)
        if client is None:
            return
        client.dropped = reason
        log.warning("dropping client %s: %s", client_id, reason)
        self._release(client_id)

    def _release(self, client_id: str) -> None:
        """Give the handle back to the manager. A dropped client's entry stays (with its reason)
        until the client comes back to read it."""
        client = self.clients.get(client_id)
        if client is None:
            return
        if not client.dropped:
            del self.clients[client_id]
        try:
            self.manager.unsubscribe(client_id, client.user)
        except AnalyticsError:
            pass  # already released

    # -- auth -------------------------------------------------------------------------------
    def _user(self, request: Request) -> str | Response:
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else request.query_params.get("token")
        if not token:
            return JSONResponse({"error": "missing token"}, status_code=401)
        if token not in self.tokens:
            return JSONResponse({"error": "unknown token"}, status_code=403)
        return self.tokens[token]

    def _caller(self, request: Request, owned: bool = False) -> tuple[str, _Client | None] | Response:
        """The request's user (and, with ``owned``, the client handle in its path), or the error
        to answer: 401/403 for the token, 404 when the handle is not this user's."""
        user = self._user(request)
        if isinstance(user, Response) or not owned:
            return user if isinstance(user, Response) else (user, None)
        client = self.clients.get(request.path_params["client"])
        if client is None or client.user != user:
            return JSONResponse({"error": "no such subscription handle"}, status_code=404)
        return user, client

    # -- routes -----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE.read_text())

    async def list_analytics(self, request: Request) -> Response:
        caller = self._caller(request)
        if isinstance(caller, Response):
            return caller
        return JSONResponse({name: dict(a.params) for name, a in self.manager.registry.registered().items()})

    async def subscriptions(self, request: Request) -> Response:
        caller = self._caller(request)
        if isinstance(caller, Response):
            return caller
        user, _ = caller
        if request.method == "GET":
            mine = [{"client": c, "subscription": s.id, "analytic": s.analytic, "params": s.params,
                     "target": s.target} for c, s in self.manager.handles(user)]
            return JSONResponse(mine)
        try:
            body = json.loads(await request.body())
            if "sql" in body:  # a push query: SELECT … FROM <state table> … EMIT CHANGES
                handle = await asyncio.to_thread(self.manager.subscribe_query, str(body["sql"]),
                                                 user)
            else:
                handle = await asyncio.to_thread(self.manager.subscribe, body.get("analytic"),
                                                 body.get("params", {}), body.get("target"), user)
        except (AnalyticsError, json.JSONDecodeError, AttributeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        self.clients[handle.client] = _Client(user, asyncio.Queue(self.queue_size))
        return JSONResponse({"client": handle.client, "subscription": handle.subscription.id,
                             "batch_id": handle.batch_id, "rows": handle.rows,
                             "keys": list(self.manager.table_keys(handle.subscription.target))})

    async def unsubscribe(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        self._release(request.path_params["client"])
        return JSONResponse({"released": request.path_params["client"]})

    async def snapshot(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        batch_id, rows = await asyncio.to_thread(self.manager.snapshot, request.path_params["client"])
        return JSONResponse({"batch_id": batch_id, "rows": rows})

    async def deltas(self, request: Request) -> Response:
        """Stored deltas after ``?after=<batch id>``: how a client that lost its stream (or the
        server restarted) catches up before listening again."""
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        user, _ = caller
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            return JSONResponse({"error": "after must be a batch id (an integer)"}, status_code=400)
        subscription = dict(self.manager.handles(user))[request.path_params["client"]].id
        stored = await asyncio.to_thread(self.manager.deltas_since, subscription, after)
        return JSONResponse({"deltas": [{"batch_id": b, "rows": rows} for b, rows in stored]})

    async def stream(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        _, client = caller
        assert client is not None  # owned=True: _caller answered 404 for a handle it did not find
        client_id = request.path_params["client"]
        if client.dropped:
            del self.clients[client_id]  # the reason is delivered once; the handle is gone
            return JSONResponse({"error": client.dropped}, status_code=410)
        if client.release:
            client.release.cancel()  # reconnected within the grace period
        client.connected = True

        async def events() -> AsyncIterator[str]:
            try:
                yield ": connected\n\n"
                while not client.dropped:
                    try:
                        delta = await asyncio.wait_for(client.queue.get(), timeout=15)
                        yield f"event: delta\ndata: {json.dumps(delta, default=str)}\n\n"
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                yield f"event: dropped\ndata: {json.dumps({'reason': client.dropped})}\n\n"
            finally:
                client.connected = False
                loop = asyncio.get_running_loop()
                client.release = loop.call_later(self.grace_seconds, self._release_if_gone, client_id)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    def _release_if_gone(self, client_id: str) -> None:
        client = self.clients.get(client_id)
        if client is not None and not client.connected and not client.dropped:
            log.info("client %s disconnected; handle released", client_id)
            self._release(client_id)


def serve(server: QueryServer, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run ``server`` with uvicorn (loopback by default) until interrupted."""
    import uvicorn  # only a served process needs the ASGI server: import it here, not at startup

    uvicorn.run(server.app(), host=host, port=port, log_level="warning")
