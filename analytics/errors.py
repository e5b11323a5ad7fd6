"""The analytics package's errors, and how a message quotes what a client sent."""

from __future__ import annotations

from typing import Any

from state.errors import StreamError

#: The most of a client's input an error message quotes: a 20 MB request is not echoed back.
QUOTE_LIMIT = 80


class AnalyticsError(StreamError):
    """An analytics request is wrong (unknown analytic, bad parameters, unknown handle)."""


class LimitError(AnalyticsError):
    """A client went past a limit the server sets (the message names the limit)."""


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``value``'s ``repr``, cut to ``limit`` characters (saying how long it was).

    >>> print(quoted("cpu"), quoted(["s1"]))
    'cpu' ['s1']
    >>> quoted("x" * 200)[-16:]
    'xxx… (202 chars)'
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"
