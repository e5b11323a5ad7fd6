"""Fault injection: stop at a named protocol step, so tests can crash at every step.

Two ways, one set of steps:

- ``LAKESTREAM_CRASH_AT=<step>`` (or ``<step>:<n>``, the n-th time the step is reached): the
  process sends itself SIGKILL, no ``finally`` blocks, no flushing, like a power cut. The
  project's crash tests run pipelines in a child process this way.
- :func:`crash_at` (in-process, for ``ops.testing``): the step raises :class:`InjectedCrash`, so
  the run stops there and the next run recovers. Unlike a power cut, ``finally`` blocks and
  ``on_error`` hooks run, and writes already handed to a writer thread may still finish.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

_reached: Counter[str] = Counter()
_armed: dict[str, int] = {}  # step -> crash on its n-th arrival, for crash_at
_lock = threading.Lock()  # steps are reached from the writer threads too


class InjectedCrash(BaseException):
    """Raised at a step armed by :func:`crash_at`. A ``BaseException``, so user code's ``except
    Exception`` does not swallow it, as it could not swallow a real crash."""


def fault_point(step: str) -> None:
    """Mark protocol step ``step``; dies (or raises) here if a test asks for it."""
    wanted = os.environ.get("LAKESTREAM_CRASH_AT")
    if wanted:
        name, _, nth = wanted.partition(":")
        if name == step and _arrive(step) >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
    if step in _armed and _arrive(step) == _armed[step]:
        raise InjectedCrash(f"injected crash at {step!r}")


def _arrive(step: str) -> int:
    with _lock:
        _reached[step] += 1
        return _reached[step]


@contextmanager
def crash_at(step: str, nth: int = 1) -> Iterator[None]:
    """Within the block, raise :class:`InjectedCrash` the ``nth`` time ``step`` is reached.

    >>> with crash_at("after_plan"):
    ...     fault_point("after_plan")
    Traceback (most recent call last):
    state.faults.InjectedCrash: injected crash at 'after_plan'
    """
    with _lock:
        _reached.pop(step, None)
        _armed[step] = nth
    try:
        yield
    finally:
        with _lock:
            _armed.pop(step, None)
            _reached.pop(step, None)
