"""Fault injection: kill the process at a named protocol step, so tests can crash at every step.

Set ``LAKESTREAM_CRASH_AT=<step>`` (or ``<step>:<n>`` to crash on the n-th time the step is
reached). The process sends itself SIGKILL: no ``finally`` blocks, no flushing, like a power cut.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_reached: Counter[str] = Counter()


def fault_point(step: str) -> None:
    """Mark protocol step ``step``; dies here if the environment asks for it."""
    wanted = os.environ.get("LAKESTREAM_CRASH_AT")
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != step:
        return
    _reached[step] += 1
    if _reached[step] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
