"""The client handles a query-manager server holds, from subscribe until released: each one's
queue of pushes and whether a stream is open on it. A handle goes when its client releases
it, when it is dropped (a slow client: its queue filled up), when its stream ended and none
reopened within the grace period, when it went unused for ``idle_handle_seconds``, or when the
manager ended its subscription. Handles the server let go of are remembered (a bounded number)
so that a later request on one gets a 404 saying why."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent
from starlette.responses import Response

from .errors import AnalyticsError, quoted
from .manager import QueryManager
from .metrics import ServerMetrics
from .replies import error

log = logging.getLogger(__name__)
#: Handles the server let go of (expired, or not reconnected) remembered for their 404 message,
#: the oldest forgotten first: bounded, so clients that vanish cannot grow the server's memory.
GONE_REMEMBERED = 10_000
EVENT_SEP = "\n"  # event lines end in a plain newline (what line-reading clients expect)


@dataclass(frozen=True)
class Push:
    """One event for a client: its kind, id (a batch) and JSON data, serialised once for all
    the clients of a subscription (and encoded as a server-sent event once, :attr:`event`)."""

    kind: str
    batch_id: int
    data: str

    @functools.cached_property
    def event(self) -> bytes:
        """This push as one server-sent event, encoded on first use: each client's stream then
        sends these bytes as they are (with 200 clients of a subscription, one encoding, not
        200)."""
        return ServerSentEvent(self.data, event=self.kind, id=str(self.batch_id), sep=EVENT_SEP).encode()

    @classmethod
    def rows(cls, kind: str, batch_id: int, rows: list[dict]) -> Push:
        """A ``delta`` or ``snapshot`` event: ``rows`` as of batch ``batch_id``."""
        return cls(kind, batch_id, json.dumps({"batch_id": batch_id, "rows": rows}, default=str))


END = Push("end", -1, "")  # queued by end_streams: the stream stops, the client stays


@dataclass
class ClientHandle:
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


class Handles:
    """The handles of ``manager``'s subscriptions held for the server's clients (``clients``:
    client id -> handle), released back to the manager as the module's docstring says; the
    arguments are the server's (see :class:`~analytics.server.QueryServer`). Used from the
    server's event loop only."""

    def __init__(self, manager: QueryManager, metrics: ServerMetrics, *, queue_size: int,
                 grace_seconds: float, idle_handle_seconds: float):
        self.manager, self.metrics = manager, metrics
        self.queue_size = queue_size
        self.grace_seconds = grace_seconds
        self.idle_handle_seconds = idle_handle_seconds
        self.clients: dict[str, ClientHandle] = {}
        self._gone: OrderedDict[str, tuple[str, str]] = OrderedDict()  # client -> (user, why)
        self._last_sweep = time.monotonic()

    def add(self, client_id: str, user: str) -> None:
        """Hold a handle the manager just gave ``user``."""
        self.clients[client_id] = ClientHandle(user, asyncio.Queue(self.queue_size))

    def held(self, user: str) -> int:
        """The handles ``user`` holds (a dropped one no longer counts)."""
        return sum(1 for c in self.clients.values() if c.user == user and not c.dropped)

    def owned(self, client_id: str, user: str) -> ClientHandle | Response:
        """``user``'s handle ``client_id``, or the 404 to answer (saying why when it was theirs
        and the server let it go, so a client can tell an expired handle from a mistyped one)."""
        client = self.clients.get(client_id)
        if client and client.unused_for(self.idle_handle_seconds, time.monotonic()):
            self._expire(client_id)  # due, though the poller's sweep has not come round yet
            client = None
        if client is not None and client.user == user:
            return client
        user_and_why = self._gone.get(client_id)
        if user_and_why and user_and_why[0] == user:
            return error(f"subscription handle {quoted(client_id)} {user_and_why[1]}; "
                         "subscribe again", 404)
        return error("no such subscription handle", 404)

    # -- pushes -----------------------------------------------------------------------------
    def broadcast(self, out: Mapping[str, list]) -> None:
        """Queue each subscription's pushes (``QueryManager.publish_new``) for its clients."""
        for subscription, pushes in out.items():
            events = [Push.rows("delta", batch_id, rows) for batch_id, rows in pushes]
            for client_id in self.manager.clients_of(subscription):
                self._offer(client_id, events)

    def _offer(self, client_id: str, events: list[Push]) -> None:
        client = self.clients.get(client_id)
        for event in events:
            if client is None or client.dropped:
                return
            try:
                client.queue.put_nowait(event)
            except asyncio.QueueFull:
                self.drop(client_id, f"slow client: {self.queue_size} pushes waiting")

    def end_streams(self) -> None:
        """End every open stream; the handles stay."""
        for client in self.clients.values():
            if client.connected:
                client.queue.put_nowait(END)

    # -- letting handles go -----------------------------------------------------------------
    def drop(self, client_id: str, reason: str) -> None:
        """Release ``client_id``'s handle, its stream ending with ``reason``."""
        client = self.clients.get(client_id)
        if client is None:
            return
        client.dropped = reason
        log.warning("dropping client %s: %s", client_id, reason)
        while not client.queue.empty():  # its stream only has the reason left to send
            client.queue.get_nowait()
        client.queue.put_nowait(None)
        self.release(client_id, "dropped")

    def release(self, client_id: str, reason: str, why: str | None = None) -> None:
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
            self._gone[client_id] = (client.user, why)
            while len(self._gone) > GONE_REMEMBERED:
                self._gone.popitem(last=False)
        with contextlib.suppress(AnalyticsError):  # already released (or ended by the manager)
            self.manager.unsubscribe(client_id, client.user)

    def stream_ended(self, client_id: str, client: ClientHandle) -> None:
        """The client's stream ended: its handle is released unless a stream reopens on it
        within ``grace_seconds``."""
        client.close_stream()
        loop = asyncio.get_running_loop()
        client.release = loop.call_later(self.grace_seconds, self._release_if_gone, client_id)

    def _release_if_gone(self, client_id: str) -> None:
        client = self.clients.get(client_id)
        if client is not None and not client.connected and not client.dropped:
            log.info("client %s disconnected; handle released", client_id)
            self.release(client_id, "not_reconnected",
                         f"was released: its stream ended and none reopened within "
                         f"{self.grace_seconds:g} s (grace_seconds)")

    # -- unused handles expire --------------------------------------------------------------
    def sweep_unused(self, throttle: bool = True) -> None:
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
        self.release(client_id, "expired", f"expired: no stream was open on it for "
                                f"{self.idle_handle_seconds:g} s (idle_handle_seconds)")
