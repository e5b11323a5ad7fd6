"""Request bodies read within a size limit: the declared Content-Length is checked first, and a
chunked body is counted as it arrives, so a large body is never held whole.

A body over the limit is answered 413 with ``Connection: close`` at once, before the rest of it
is read; the server then reads and throws away what is left of it, up to :data:`DISCARD_BYTES`
and for at most :data:`DISCARD_SECONDS`, and closes the connection. Why read what is refused:
many clients (Python's urllib and http.client among them) send the whole body before they read
any reply, and a server that closes a socket with bytes still arriving makes the kernel answer
them with a reset, which such a client sees (``ConnectionResetError``) instead of the 413.
Clients that read while they send (curl, browsers) see the 413 first and stop sending. What is
thrown away is never kept: memory holds at most the limit plus one read of the ASGI server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .errors import quoted
from .replies import error

#: How much of a refused body the server reads and throws away after answering 413: enough for
#: a client that uploads a file of some tens of MB by mistake to get the answer rather than a
#: reset, while a larger body (or an endless one) costs the server no more than this much
#: reading before it closes the connection. On loopback that is well under a second.
DISCARD_BYTES = 64 * 1024 * 1024
#: How long the server goes on throwing a refused body away: bounds what a client sending slowly
#: (or not at all, as a client waiting for ``100 Continue`` does) holds the connection for. At
#: 5 s, the whole of :data:`DISCARD_BYTES` gets through on a link of about 110 Mbit/s; on a
#: slower one the time runs out first, and such a client may see a reset.
DISCARD_SECONDS = 5.0


class BodyReader:
    """Reads request bodies of at most ``max_body_bytes``; a larger one is answered 413 (and
    the rest of it thrown away, within ``discard_bytes`` and ``discard_seconds``).

    ``refused``, when given, is told the bytes the server read of each body it refused (those
    before the refusal and those thrown away after it), once it has finished with that body."""

    def __init__(self, max_body_bytes: int, *, discard_bytes: int = DISCARD_BYTES,
                 discard_seconds: float = DISCARD_SECONDS,
                 refused: Callable[[int], None] | None = None):
        self.max_body_bytes = max_body_bytes
        self.discard_bytes = discard_bytes
        self.discard_seconds = discard_seconds
        self.refused = refused

    async def json_object(self, request: Request) -> dict[str, Any] | Response:
        """The request's JSON object, or the error to answer (413 over ``max_body_bytes``)."""
        raw = await self.read(request)
        if isinstance(raw, Response):
            return raw
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            return error(f"the request body is not JSON ({exc}): {quoted(raw[:100])}", 400)
        if not isinstance(body, dict):
            return error(f"the request body must be a JSON object, got {quoted(body)}", 400)
        return body

    async def read(self, request: Request) -> bytes | Response:
        """The body, read only while it stays within ``max_body_bytes``."""
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return error(f"bad Content-Length {quoted(declared)}", 400)
            if int(declared) > self.max_body_bytes:
                return self._refusal(read=0, unread=True)
        # the ASGI messages themselves, not request.stream(): a refusal must know whether the
        # message that crossed the limit was the body's last (then there is nothing to discard)
        chunks, size = [], 0
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk, more = message.get("body", b""), message.get("more_body", False)
            size += len(chunk)
            if size > self.max_body_bytes:
                return self._refusal(read=size, unread=more)
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)

    def _refusal(self, read: int, unread: bool) -> Response:
        """The 413 for a body of which ``read`` bytes were read (``unread``: more is coming)."""
        reply = error(f"request body too large: the limit is {self.max_body_bytes} bytes "
                      "(max_body_bytes)", 413)

        async def finish(receive: Receive) -> None:
            total = read + (await discard(receive, self.discard_bytes, self.discard_seconds)
                            if unread else 0)
            if self.refused is not None:
                self.refused(total)
        return Refusal(reply, finish)


class Refusal(Response):
    """``reply`` sent whole at once with ``Connection: close``, then ``finish`` (given the
    request's ``receive``) run before the response ends: the ASGI server closes the connection
    when it ends, and no sooner, so what ``finish`` reads of the body still arrives."""

    def __init__(self, reply: Response, finish: Callable[[Receive], Awaitable[None]]):
        super().__init__(reply.body, reply.status_code, headers={"connection": "close"},
                         media_type=reply.media_type)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        # the reply is out before the rest of the body is read: a client that reads as it sends
        # stops sending now, and one waiting for "100 Continue" gets this instead
        await send({"type": "http.response.body", "body": self.body, "more_body": True})
        await self._finish(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def discard(receive: Receive, max_bytes: int, seconds: float) -> int:
    """Read and drop the rest of a request's body until it ends, the client hangs up, at least
    ``max_bytes`` have been dropped or ``seconds`` have passed; the bytes dropped (at most one
    ASGI message over ``max_bytes``: the ASGI server hands the body over as it buffers it, in
    pieces of a few hundred KiB at the most, and stops reading the socket while one waits)."""
    dropped = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while dropped < max_bytes:
                message = await receive()
                dropped += len(message.get("body", b""))
                if not message.get("more_body", False):  # its end, or http.disconnect
                    break
    return dropped
