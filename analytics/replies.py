"""The query-manager server's error replies: a JSON ``{"error": …}`` with its status, the
message cut short (messages quote what the client sent already cut short; this is a
backstop)."""

from __future__ import annotations

from starlette.responses import JSONResponse

#: The longest error message sent.
MAX_ERROR_CHARS = 400


def error(message: str, status: int) -> JSONResponse:
    """The reply ``{"error": message}`` with HTTP ``status``."""
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "…"
    return JSONResponse({"error": message}, status_code=status)
