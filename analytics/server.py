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
reading, so a large body is never held whole); more than ``max_handles_per_user`` handles ->
429; error messages quote at most 80 characters of what the client sent.

Metrics for Prometheus: ``GET /metrics`` (no token; counts only), see :mod:`.metrics`.

Unused handles expire: a handle with no stream open on it for ``idle_handle_seconds`` (counted
from its creation or from its last stream's end) is released, freeing the user's slot and its
share of the subscription. Any later request on it gets a 404 that says it expired, and after
how long unused (unlike a handle that never existed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .errors import AnalyticsError, quoted
from .manager import QueryManager, Resume
from .metrics import Census, ServerMetrics

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")
#: uPlot, fetched by .ci/install (npm) into this folder; the page works without it (no chart).
VENDOR = Path(__file__).with_name("static") / "vendor"
VENDOR_FILES = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}
_SEP = "\n"  # event lines end in a plain newline (what line-reading clients expect)
#: The longest error message sent: messages quote input already cut short, this is a backstop.
MAX_ERROR_CHARS = 400
#: Handles the server let go of (expired, or not reconnected) remembered for their 404 message,
#: the oldest forgotten first: bounded, so clients that vanish cannot grow the server's memory.
GONE_REMEMBERED = 10_000


@dataclass(frozen=True)
class _Push:
    """One event for a client: its kind, id (a batch) and JSON data, serialised once for all
    the clients of a subscription."""

    kind: str
    batch_id: int
    data: str


_END = _Push("end", -1, "")  # queued by end_streams: the stream stops, the client stays


@dataclass
class _Client:
    user: str
    queue: asyncio.Queue
    dropped: str | None = None
    release: asyncio.TimerHandle | None = field(default=None, repr=False)
    #: when the handle last had no stream open (creation, or its last stream's end); ``None``
    #: while a stream is open
    idle_since: float | None = field(default_factory=time.monotonic)

    @property
    def connected(self) -> bool:
        return self.idle_since is None

    def open_stream(self) -> None:
        self.idle_since = None

    def close_stream(self) -> None:
        self.idle_since = time.monotonic()

    def unused_for(self, seconds: float, now: float) -> bool:
        """Whether no stream has been open on this handle for ``seconds`` up to ``now``."""
        return self.idle_since is not None and now - self.idle_since >= seconds


class QueryServer:
    """Wraps a :class:`QueryManager` for HTTP clients; :meth:`app` is the ASGI app.

    ``poll_seconds``: how often the changelogs are checked for new commits (a ``stat`` each);
    ``queue_size``: pushes a client may have waiting before it is dropped as slow;
    ``grace_seconds``: how long a disconnected client's handle is kept for it to reconnect;
    ``retry_ms``: how soon an EventSource that lost its stream tries again (sent on connect);
    ``idle_handle_seconds``: how long a handle may go without an open stream before it expires
    (default five minutes: ample for a client to open its stream after subscribing, while a
    client that subscribes and goes away frees its slot of ``max_handles_per_user`` soon).
    """

    def __init__(self, manager: QueryManager, tokens: Mapping[str, str], *,
                 poll_seconds: float = 0.025, queue_size: int = 256, grace_seconds: float = 5.0,
                 max_body_bytes: int = 64 * 1024, max_handles_per_user: int = 100,
                 retry_ms: int = 1000, idle_handle_seconds: float = 300.0):
        self.manager = manager
        self.tokens = dict(tokens)
        self.poll_seconds = poll_seconds
        self.queue_size = queue_size
        self.grace_seconds = grace_seconds
        self.max_body_bytes = max_body_bytes
        self.max_handles_per_user = max_handles_per_user
        self.retry_ms = retry_ms
        self.idle_handle_seconds = idle_handle_seconds
        self.clients: dict[str, _Client] = {}
        self._gone: OrderedDict[str, tuple[str, str]] = OrderedDict()  # client -> (user, why)
        self._last_sweep = time.monotonic()
        self._subscribing: dict[str, int] = {}  # user -> subscribe calls in flight
        self._poller: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics = ServerMetrics(self._census)

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
            self._loop.call_soon_threadsafe(self._end_streams)
        except RuntimeError:  # the server stopped (its loop closed) since the check above
            pass

    def _end_streams(self) -> None:
        for client in self.clients.values():
            if client.connected:
                client.queue.put_nowait(_END)

    async def _poll(self) -> None:
        while True:
            try:
                out = await asyncio.to_thread(self.manager.publish_new)
                self._broadcast(out)
                for client_id, reason in self.manager.take_ended().items():
                    self._drop(client_id, reason)
                self._sweep_unused()
            except Exception:  # keep serving; the next tick retries from the last published batch
                log.exception("publishing deltas failed")
            await asyncio.sleep(self.poll_seconds)

    def _broadcast(self, out: Mapping[str, list]) -> None:
        for subscription, pushes in out.items():
            events = [_Push("delta", batch_id, _json({"batch_id": batch_id, "rows": rows}))
                      for batch_id, rows in pushes]
            for client_id in self.manager.clients_of(subscription):
                self._offer(client_id, events)

    def _offer(self, client_id: str, events: list[_Push]) -> None:
        client = self.clients.get(client_id)
        for event in events:
            if client is None or client.dropped:
                return
            try:
                client.queue.put_nowait(event)
            except asyncio.QueueFull:
                self._drop(client_id, f"slow client: {self.queue_size} pushes waiting")

    def _drop(self, client_id: str, reason: str) -> None:
        client = self.clients.get(client_id)
        if client is None:
            return
        client.dropped = reason
        log.warning("dropping client %s: %s", client_id, reason)
        while not client.queue.empty():  # its stream only has the reason left to send
            client.queue.get_nowait()
        client.queue.put_nowait(None)
        self._release(client_id, "dropped")

    def _release(self, client_id: str, reason: str, why: str | None = None) -> None:
        """Give the handle back to the manager. A dropped client's entry stays (with its reason)
        until the client comes back to read it. ``reason``: one of the metrics'
        ``RELEASE_REASONS``; ``why``: the server let the handle go, and tells a later request
        on it so (not asked for by the client, unlike a DELETE)."""
        client = self.clients.get(client_id)
        if client is None:
            return
        if self.manager.handle(client_id) is not None:  # a dropped one was let go already
            self.metrics.released(reason)
        if not client.dropped:
            del self.clients[client_id]
        if why:
            self._remember_gone(client_id, client.user, why)
        with contextlib.suppress(AnalyticsError):  # already released (or ended by the manager)
            self.manager.unsubscribe(client_id, client.user)

    # -- unused handles expire --------------------------------------------------------------
    def _sweep_unused(self, throttle: bool = True) -> None:
        """Expire every handle unused for ``idle_handle_seconds``. The poller runs this every
        ``min(1 s, idle_handle_seconds / 10)``: a pass reads every handle, and an expiry is
        then late by a tenth of the idle time at most."""
        now = time.monotonic()
        if throttle and now - self._last_sweep < min(1.0, self.idle_handle_seconds / 10):
            return
        self._last_sweep = now
        for client_id in [c for c, client in self.clients.items()
                          if client.unused_for(self.idle_handle_seconds, now)]:
            self._expire(client_id)

    def _expire(self, client_id: str) -> None:
        """Release an unused handle (a dropped one's reason goes too) and remember why."""
        client = self.clients[client_id]
        if client.release:
            client.release.cancel()
        log.info("client %s had no open stream for %g s: handle expired", client_id,
                 self.idle_handle_seconds)
        client.dropped = None  # its entry goes now, with the handle
        self._release(client_id, "expired", f"expired: no stream was open on it for "
                                 f"{self.idle_handle_seconds:g} s (idle_handle_seconds)")

    def _remember_gone(self, client_id: str, user: str, why: str) -> None:
        self._gone[client_id] = (user, why)
        while len(self._gone) > GONE_REMEMBERED:
            self._gone.popitem(last=False)

    def _unknown_handle(self, client_id: str, user: str) -> Response:
        """404 for a handle ``user`` does not hold, saying why when it was theirs and the server
        let it go (so a client can tell an expired handle from a mistyped one)."""
        user_and_why = self._gone.get(client_id)
        if user_and_why and user_and_why[0] == user:
            return _error(f"subscription handle {quoted(client_id)} {user_and_why[1]}; "
                          "subscribe again", 404)
        return _error("no such subscription handle", 404)

    # -- auth -------------------------------------------------------------------------------
    def _user(self, request: Request) -> str | Response:
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else request.query_params.get("token")
        if not token:
            return _error("missing token", 401)
        if token not in self.tokens:
            return _error("unknown token", 403)
        return self.tokens[token]

    def _caller(self, request: Request, owned: bool = False) -> tuple[str, _Client | None] | Response:
        """The request's user (and, with ``owned``, the client handle in its path), or the error
        to answer: 401/403 for the token, 404 when the handle is not this user's."""
        user = self._user(request)
        if isinstance(user, Response) or not owned:
            return user if isinstance(user, Response) else (user, None)
        client_id = request.path_params["client"]
        client = self.clients.get(client_id)
        if client and client.unused_for(self.idle_handle_seconds, time.monotonic()):
            self._expire(client_id)  # due, though the poller's sweep has not come round yet
            client = None
        if client is None or client.user != user:
            return self._unknown_handle(client_id, user)
        return user, client

    # -- routes -----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE.read_text())

    async def vendor(self, request: Request) -> Response:
        """uPlot's script and style sheet, from the folder .ci/install fills (404 if not)."""
        name = request.path_params["name"]
        path = VENDOR / name
        if name not in VENDOR_FILES or not path.is_file():
            return _error(f"{quoted(name)} is not here: .ci/install fetches uPlot with npm", 404)
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
        body = await self._json_body(request)
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
            return _error(str(exc), 400)
        self.clients[handle.client] = _Client(user, asyncio.Queue(self.queue_size))
        self.metrics.subscribed()
        return JSONResponse({"client": handle.client, "subscription": handle.subscription.id,
                             "batch_id": handle.batch_id, "rows": handle.rows,
                             "keys": list(self.manager.table_keys(handle.subscription.target))})

    def _over_handle_limit(self, user: str) -> Response | None:
        """429 when ``user`` holds ``max_handles_per_user`` handles (counting subscribe calls
        still running, so concurrent requests cannot pass the limit together)."""
        held = self._held(user)
        if held + self._subscribing.get(user, 0) >= self.max_handles_per_user:
            self._sweep_unused(throttle=False)  # expiries due free slots now, not at the next pass
            held = self._held(user)
        if held + self._subscribing.get(user, 0) < self.max_handles_per_user:
            return None
        return _error(f"too many subscription handles: this user holds {held}, the limit is "
                      f"{self.max_handles_per_user} (max_handles_per_user); release some "
                      "(DELETE /subscriptions/<client>) first", 429)

    def _held(self, user: str) -> int:
        return sum(1 for c in self.clients.values() if c.user == user and not c.dropped)

    async def _json_body(self, request: Request) -> dict[str, Any] | Response:
        """The request's JSON object, or the error to answer (413 over ``max_body_bytes``)."""
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            return _error(f"the request body is not JSON ({exc}): {quoted(raw[:100])}", 400)
        if not isinstance(body, dict):
            return _error(f"the request body must be a JSON object, got {quoted(body)}", 400)
        return body

    async def _body(self, request: Request) -> bytes | Response:
        """The body, read only while it stays within ``max_body_bytes``: the declared
        Content-Length is checked first, and a chunked body is counted as it arrives."""
        too_big = _error(f"request body too large: the limit is {self.max_body_bytes} bytes "
                         "(max_body_bytes)", 413)
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return _error(f"bad Content-Length {quoted(declared)}", 400)
            if int(declared) > self.max_body_bytes:
                return too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                return too_big
            chunks.append(chunk)
        return b"".join(chunks)

    async def unsubscribe(self, request: Request) -> Response:
        caller = self._caller(request, owned=True)
        if isinstance(caller, Response):
            return caller
        self._release(request.path_params["client"], "unsubscribed")
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
            return _error("after must be a batch id (an integer)", 400)
        subscription = self.manager.handle(request.path_params["client"])
        if subscription is None:
            return _error("no such subscription handle", 404)
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
            return _error(client.dropped, 410)
        text = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        after = None if text is None else _batch_param(text)
        if text is not None and after is None:
            return _error(f"Last-Event-ID must be an event id (a batch id), got {quoted(text)}", 400)
        if client.release:
            client.release.cancel()  # reconnected within the grace period
        client.open_stream()
        try:
            resume = None if after is None else await asyncio.to_thread(
                self.manager.resume, client_id, after)
        except AnalyticsError as exc:  # released meanwhile
            client.close_stream()
            return _error(str(exc), 404)
        return EventSourceResponse(self._events(client_id, client, after, resume), ping=15,
                                   sep=_SEP)

    async def _events(self, client_id: str, client: _Client, after: int | None,
                      resume: Resume | None) -> AsyncIterator[ServerSentEvent]:
        """The client's events: what it missed (or a snapshot), then its queue; every event's id
        is a batch, and none goes out twice (a push both resumed and queued is skipped)."""
        last = -1 if after is None else after
        try:
            yield ServerSentEvent(comment="connected", retry=self.retry_ms, sep=_SEP)
            for push in _resumed(resume):
                yield _event(push)
                self.metrics.delivered(push.kind)
                last = push.batch_id
            while True:
                push = await client.queue.get()
                if push is _END:
                    return
                if push is None:
                    break
                if push.batch_id > last:
                    yield _event(push)
                    self.metrics.delivered(push.kind)
                    last = push.batch_id
            yield ServerSentEvent(_json({"reason": client.dropped}), event="dropped",
                                  id=str(last) if last >= 0 else None, sep=_SEP)
        finally:
            client.close_stream()
            loop = asyncio.get_running_loop()
            client.release = loop.call_later(self.grace_seconds, self._release_if_gone, client_id)

    def _release_if_gone(self, client_id: str) -> None:
        client = self.clients.get(client_id)
        if client is not None and not client.connected and not client.dropped:
            log.info("client %s disconnected; handle released", client_id)
            self._release(client_id, "not_reconnected",
                          f"was released: its stream ended and none reopened within "
                                     f"{self.grace_seconds:g} s (grace_seconds)")


def _resumed(resume: Resume | None) -> list[_Push]:
    if resume is None:
        return []
    if resume.snapshot is not None:
        batch_id, rows = resume.snapshot
        return [_Push("snapshot", batch_id, _json({"batch_id": batch_id, "rows": rows}))]
    return [_Push("delta", b, _json({"batch_id": b, "rows": rows})) for b, rows in resume.deltas or []]


def _event(push: _Push) -> ServerSentEvent:
    return ServerSentEvent(push.data, event=push.kind, id=str(push.batch_id), sep=_SEP)


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def _batch_param(text: str) -> int | None:
    """A batch id given as text (``None`` when it is not a non-negative integer)."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 19 else None


def _error(message: str, status: int) -> JSONResponse:
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "…"
    return JSONResponse({"error": message}, status_code=status)


def serve(server: QueryServer, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run ``server`` with uvicorn (loopback by default) until interrupted."""
    import uvicorn  # only a served process needs the ASGI server: import it here, not at startup

    uvicorn.run(server.app(), host=host, port=port, log_level="warning")
