"""The query-manager server: HTTP to subscribe, list, snapshot and unsubscribe, and a
server-sent-events stream of pushes per client handle; plus the live page and its chart library.

Every request names its user by token (``Authorization: Bearer <token>``, or ``?token=`` for
the browser's EventSource): missing -> 401, unknown -> 403, and a user only ever sees and
releases their own handles.

Streams: every event has an ``id:``, the batch it brings the client to. A client reconnecting
with ``Last-Event-ID`` (the header EventSource sends itself, or ``?last_event_id=``) gets exactly
the pushes it missed, or a ``snapshot`` event when they are no longer available. A client whose
stream disconnects keeps its handle for a grace period (to reconnect), then it is released; a
client whose queue fills up (it reads slower than pushes arrive) is dropped with that reason,
and nobody else is held up by it.

Limits (constructor arguments): request bodies over ``max_body_bytes`` -> 413 (counted while
reading, so a large body is never held whole; the rest of it is read and thrown away, within
bounds, so that clients sending their whole body before reading get the 413: see
:mod:`analytics.bodies`); more than ``max_handles_per_user`` handles ->
429; error messages quote at most 80 characters of what the client sent.

Metrics for Prometheus: ``GET /metrics`` (no token; counts only), see :mod:`.metrics`.

Unused handles expire: a handle with no stream open on it for ``idle_handle_seconds`` (counted
from its creation or from its last stream's end) is released, freeing the user's slot and its
share of the subscription. Any later request on it gets a 404 that says it expired, and after
how long unused (unlike a handle that never existed).

The handles' lifecycle is :mod:`analytics.handles`'s; request bodies are read by
:mod:`analytics.bodies` and errors answered through :mod:`analytics.replies`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .bodies import BodyReader
from .errors import AnalyticsError, quoted
from .handles import END, EVENT_SEP, ClientHandle, Handles, Push
from .manager import QueryManager, Resume
from .metrics import Census, ServerMetrics
from .replies import error

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")
#: uPlot, fetched by .ci/install (npm) into this folder; the page works without it (no chart).
VENDOR = Path(__file__).with_name("static") / "vendor"
#: How often a server looks for new changelog commits by default. On a local disk a poll with no
#: commit is one ``open`` that fails (about 10 µs, whatever the table's size), so often: a commit
#: waits 2.5 ms on average to be seen. On an object store it is one request per target (billed,
#: and a round trip of its own), so twenty times a second.
LOCAL_POLL_SECONDS = 0.005
OBJECT_STORE_POLL_SECONDS = 0.05
VENDOR_FILES = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}


class QueryServer:
    """Wraps a :class:`QueryManager` for HTTP clients; :meth:`app` is the ASGI app.

    ``poll_seconds``: how often the changelogs are checked for new commits; by default
    :data:`LOCAL_POLL_SECONDS` with the warehouse on a local disk and
    :data:`OBJECT_STORE_POLL_SECONDS` on an object store;
    ``queue_size``: pushes a client may have waiting before it is dropped as slow;
    ``grace_seconds``: how long a disconnected client's handle is kept for it to reconnect;
    ``retry_ms``: how soon an EventSource that lost its stream tries again (sent on connect);
    ``idle_handle_seconds``: how long a handle may go without an open stream before it expires
    (default five minutes: ample for a client to open its stream after subscribing, while a
    client that subscribes and goes away frees its slot of ``max_handles_per_user`` soon).
    """

    def __init__(self, manager: QueryManager, tokens: Mapping[str, str], *,
                 poll_seconds: float | None = None, queue_size: int = 256, grace_seconds: float = 5.0,
                 max_body_bytes: int = 64 * 1024, max_handles_per_user: int = 100,
                 retry_ms: int = 1000, idle_handle_seconds: float = 300.0):
        self.manager = manager
        self.tokens = dict(tokens)
        if poll_seconds is None:
            poll_seconds = OBJECT_STORE_POLL_SECONDS if manager.on_object_store else LOCAL_POLL_SECONDS
        self.poll_seconds = poll_seconds
        self.max_handles_per_user = max_handles_per_user
        self.retry_ms = retry_ms
        self._subscribing: dict[str, int] = {}  # user -> subscribe calls in flight
        self._poller: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics = ServerMetrics(self._census)
        # the handles' lifecycle (queues, drops, grace, expiry) and the bodies' limit are
        # collaborators' jobs; the server answers HTTP and runs the poller
        self.handles = Handles(manager, self.metrics, queue_size=queue_size,
                               grace_seconds=grace_seconds, idle_handle_seconds=idle_handle_seconds)
        self.bodies = BodyReader(max_body_bytes, refused=self.metrics.refused_body)

    @property
    def clients(self) -> dict[str, ClientHandle]:
        """The handles held for clients, by client id."""
        return self.handles.clients

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/", self.page), Route("/static/vendor/{name}", self.vendor),
            Route("/analytics", self.list_analytics),
            Route("/subscriptions", self.subscriptions, methods=["GET", "POST"]),
            Route("/subscriptions/{client}", self.unsubscribe, methods=["DELETE"]),
            Route("/subscriptions/{client}/snapshot", self.snapshot),
            Route("/subscriptions/{client}/deltas", self.deltas),
            Route("/stream/{client}", self.stream),
            Route("/metrics", self.scrape),
        ], lifespan=self._lifespan)

    def _census(self) -> Census:
        """What the server holds now, for a metrics scrape."""
        held = [c for c in self.clients.values() if not c.dropped]
        return Census(handles=len(held), streams_open=sum(c.connected for c in held),
                      subscriptions=self.manager.subscription_count(),
                      published={t: self.manager.published(t) for t in self.manager.targets()})

    # -- lifecycle: one poller turns new commits into pushes --------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self._poller = asyncio.create_task(self._poll())
        try:
            yield
        finally:
            self._poller.cancel()
            await asyncio.to_thread(self.manager.flush)

    def end_streams(self) -> None:
        """End every open stream (from any thread), e.g. before stopping the server: the ASGI
        server waits for open responses, and an event stream does not end by itself. Clients
        keep their handles and reconnect (with their Last-Event-ID) to this or a new server."""
        if self._loop is None or self._loop.is_closed():
            return  # never served, or stopped already: no stream is open
        try:
            self._loop.call_soon_threadsafe(self.handles.end_streams)
        except RuntimeError:  # the server stopped (its loop closed) since the check above
            pass

    async def _poll(self) -> None:
        while True:
            try:
                out = await asyncio.to_thread(self.manager.publish_new)
                self.handles.broadcast(out)
                for client_id, reason in self.manager.take_ended().items():
                    self.handles.drop(client_id, reason)
                self.handles.sweep_unused()
            except Exception:  # keep serving; the next tick retries from the last published batch
                log.exception("publishing deltas failed")
            await asyncio.sleep(self.poll_seconds)

    # -- auth -------------------------------------------------------------------------------
    def _user(self, request: Request) -> str | Response:
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else request.query_params.get("token")
        if not token:
            return error("missing token", 401)
        if token not in self.tokens:
            return error("unknown token", 403)
        return self.tokens[token]

    def _caller(self, request: Request,
                owned: bool = False) -> tuple[str, ClientHandle | None] | Response:
        """The request's user (and, with ``owned``, the client handle in its path), or the error
        to answer: 401/403 for the token, 404 when the handle is not this user's."""
        user = self._user(request)
        if isinstance(user, Response) or not owned:
            return user if isinstance(user, Response) else (user, None)
        client = self.handles.owned(request.path_params["client"], user)
        return client if isinstance(client, Response) else (user, client)

    # -- routes -----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE.read_text())

    async def vendor(self, request: Request) -> Response:
        """uPlot's script and style sheet, from the folder .ci/install fills (404 if not)."""
        name = request.path_params["name"]
        path = VENDOR / name
        if name not in VENDOR_FILES or not path.is_file():
            return error(f"{quoted(name)} is not here: .ci/install fetches uPlot with npm", 404)
        return FileResponse(path, media_type=VENDOR_FILES[name])

    async def scrape(self, request: Request) -> Response:
        """Prometheus's text format of :mod:`.metrics` (no token: counts only, nothing of any
        user's subscriptions or data; keep the server on a private address, as by default)."""
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

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
        body = await self.bodies.json_object(request)
        if isinstance(body, Response):
            return body
        full = self._over_handle_limit(user)
        if full:
            return full
        self._subscribing[user] = self._subscribing.get(user, 0) + 1
        try:
            return await self._subscribe(user, body)
        finally:
            self._subscribing[user] -= 1

    async def _subscribe(self, user: str, body: dict[str, Any]) -> Response:
        try:
            if "sql" in body:  # a push query: SELECT … FROM <state table> … EMIT CHANGES
                handle = await asyncio.to_thread(self.manager.subscribe_query, str(body["sql"]),
                                                 user)
            else:
                analytic, target = body.get("analytic"), body.get("target")
                if not isinstance(analytic, str) or not isinstance(target, str):
                    raise AnalyticsError(f"a subscription names its analytic and target as "
                                         f"strings; got analytic={quoted(analytic)}, "
                                         f"target={quoted(target)}")
                handle = await asyncio.to_thread(self.manager.subscribe, analytic,
                                                 body.get("params", {}), target, user)
        except AnalyticsError as exc:
            return error(str(exc), 400)
        self.handles.add(handle.client, user)
        self.metrics.subscribed()
        return JSONResponse({"client": handle.client, "subscription": handle.subscription.id,
                             "batch_id": handle.batch_id, "rows": handle.rows,
                             "keys": list(self.manager.table_keys(handle.subscription.target))})

    def _over_handle_limit(self, user: str) -> Response | None:
        """429 when ``user`` holds ``max_handles_per_user`` handles (counting subscribe calls
        still running, so concurrent requests cannot pass the limit together)."""
        held = self.handles.held(user)
        if held + self._subscribing.get(user, 0) >= self.max_handles_per_user:
            self.handles.sweep_unused(throttle=False)  # expiries due free slots now, not at the next pass
            held = self.handles.held(user)
        if held + self._subscribing.get(user, 0) < self.max_handles_per_user:
            return None
        return error(f"too many subscription handles: this user holds {held}, the limit is "
                      f"{self.max_handles_per_user} (max_handles_per_user); release some "
                      "(DELETE /subscriptions/<client>) first", 429)

    async def unsubscribe(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        self.handles.release(request.path_params["client"], "unsubscribed")
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
        after = _batch_param(request.query_params.get("after", "0"))
        if after is None:
            return error("after must be a batch id (an integer)", 400)
        subscription = self.manager.handle(request.path_params["client"])
        if subscription is None:
            return error("no such subscription handle", 404)
        stored = await asyncio.to_thread(self.manager.deltas_since, subscription.id, after)
        return JSONResponse({"deltas": [{"batch_id": b, "rows": rows} for b, rows in stored]})

    # -- the stream -------------------------------------------------------------------------
    async def stream(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        _, client = caller
        assert client is not None  # owned=True: _caller answered 404 for a handle it did not find
        client_id = request.path_params["client"]
        if client.dropped:
            del self.clients[client_id]  # the reason is delivered once; the handle is gone
            return error(client.dropped, 410)
        text = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        after = None if text is None else _batch_param(text)
        if text is not None and after is None:
            return error(f"Last-Event-ID must be an event id (a batch id), got {quoted(text)}", 400)
        if client.release:
            client.release.cancel()  # reconnected within the grace period
        client.open_stream()
        try:
            resume = None if after is None else await asyncio.to_thread(
                self.manager.resume, client_id, after)
        except AnalyticsError as exc:  # released meanwhile
            client.close_stream()
            return error(str(exc), 404)
        return EventSourceResponse(self._events(client_id, client, after, resume), ping=15,
                                   sep=EVENT_SEP)

    async def _events(self, client_id: str, client: ClientHandle, after: int | None,
                      resume: Resume | None) -> AsyncIterator[ServerSentEvent | bytes]:
        """The client's events: what it missed (or a snapshot), then its queue; every event's id
        is a batch, and none goes out twice (a push both resumed and queued is skipped)."""
        last = -1 if after is None else after
        try:
            yield ServerSentEvent(comment="connected", retry=self.retry_ms, sep=EVENT_SEP)
            for push in _resumed(resume):
                yield _event(push)
                self.metrics.delivered(push.kind)
                last = push.batch_id
            while True:
                push = await client.queue.get()
                if push is END:
                    return
                if push is None:
                    break
                if push.batch_id > last:
                    yield _event(push)
                    self.metrics.delivered(push.kind)
                    last = push.batch_id
            yield ServerSentEvent(json.dumps({"reason": client.dropped}), event="dropped",
                                  id=str(last) if last >= 0 else None, sep=EVENT_SEP)
        finally:
            self.handles.stream_ended(client_id, client)


def _resumed(resume: Resume | None) -> list[Push]:
    if resume is None:
        return []
    if resume.snapshot is not None:
        return [Push.rows("snapshot", *resume.snapshot)]
    return [Push.rows("delta", b, rows) for b, rows in resume.deltas or []]


def _event(push: Push) -> bytes:
    return push.event


def _batch_param(text: str) -> int | None:
    """A batch id given as text (``None`` when it is not a non-negative integer)."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 19 else None


def serve(server: QueryServer, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run ``server`` with uvicorn (loopback by default) until interrupted."""
    import uvicorn  # only a served process needs the ASGI server: import it here, not at startup

    uvicorn.run(server.app(), host=host, port=port, log_level="warning")
