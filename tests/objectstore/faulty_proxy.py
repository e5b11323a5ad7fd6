"""An HTTP proxy in front of the test S3 server that fails on demand, as a real store does:
``down()`` stops listening (clients get "connection refused"), ``throttle(every)`` answers
every n-th request with S3's ``503 SlowDown``, ``require_key(key_id)`` refuses requests signed
with another access key as S3 does (``403 InvalidAccessKeyId``), ``up()`` passes everything
through again. ``seen`` lists the requests passed through (method and path with its query),
for tests that count what an operation asks of the store.

Clients are pointed at it with ``AWS_ENDPOINT_URL=proxy.endpoint``; the data stays in the
server behind it, so a run that failed through the proxy is recovered against the server.
"""

from __future__ import annotations

import http.client
import itertools
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from ops.devservers.process import free_port

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate"}
_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")
_UNKNOWN_KEY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>'
                b"<Message>The AWS Access Key Id you provided does not exist in our records."
                b"</Message></Error>")


class FaultyProxy:
    """Forwards to ``upstream`` (``http://host:port``) from ``127.0.0.1:<port>``."""

    def __init__(self, upstream: str):
        where = urlparse(upstream)
        self.upstream = (where.hostname, where.port)
        self.port = free_port()
        self.requests = 0
        self.seen: list[tuple[str, str]] = []  # (method, path?query) of each request passed through
        self.throttled = 0
        self._every = 0
        self._key_id: str | None = None
        self.refused = 0
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # clients' connections, cut when going down
        self._server: ThreadingHTTPServer | None = None
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen and pass every request through."""
        self._every = 0
        self._key_id = None
        if self._server is None:
            self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
            self._server.daemon_threads = True
            threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        """Stop listening: the endpoint is gone (connections refused, open ones cut)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            for connection in self._open:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already
            self._open.clear()

    def throttle(self, every: int) -> None:
        """Answer every ``every``-th request with ``503 SlowDown`` (the rest pass)."""
        self.up()
        self._every = every

    def require_key(self, key_id: str) -> None:
        """Refuse every request not signed with access key ``key_id`` (SigV4's ``Credential=``),
        with ``403 InvalidAccessKeyId``, as S3 answers wrong credentials."""
        self.up()
        self._key_id = key_id

    def _signed_by_another_key(self, authorization: str) -> bool:
        if self._key_id is None or f"Credential={self._key_id}/" in authorization:
            return False
        with self._lock:
            self.refused += 1
        return True

    def _should_throttle(self) -> bool:
        with self._lock:
            self.requests += 1
            if self._every and next(self._count) % self._every == 0:
                self.throttled += 1
                return True
            return False

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._open.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._open.discard(self.connection)
                super().finish()

            def _forward(self) -> None:
                body = self._body()
                if proxy._signed_by_another_key(self.headers.get("Authorization", "")):
                    self._reply(403, {"Content-Type": "application/xml"}, _UNKNOWN_KEY)
                    return
                if proxy._should_throttle():
                    self._reply(503, {"Content-Type": "application/xml"}, _SLOW_DOWN)
                    return
                with proxy._lock:
                    proxy.seen.append((self.command, self.path))
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Content-Length"] = str(len(body))
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                # a HEAD's Content-Length is the object's size: keep it; else it is the body's
                dropped = _HOP_BY_HOP if self.command == "HEAD" else _HOP_BY_HOP | {"content-length"}
                self._reply(answer.status, {k: v for k, v in answer.getheaders()
                                            if k.lower() not in dropped}, data)
                upstream.close()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status: int, headers: dict, data: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if not any(key.lower() == "content-length" for key in headers):
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
