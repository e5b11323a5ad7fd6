"""Request bodies read within a size limit: the declared Content-Length is checked first, and a
chunked body is counted as it arrives, so a large body is never held whole."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .errors import quoted
from .replies import error


class BodyReader:
    """Reads request bodies of at most ``max_body_bytes``; a larger one is answered 413."""

    def __init__(self, max_body_bytes: int):
        self.max_body_bytes = max_body_bytes

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
        too_big = error(f"request body too large: the limit is {self.max_body_bytes} bytes "
                        "(max_body_bytes)", 413)
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return error(f"bad Content-Length {quoted(declared)}", 400)
            if int(declared) > self.max_body_bytes:
                return too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                return too_big
            chunks.append(chunk)
        return b"".join(chunks)
