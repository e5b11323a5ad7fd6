"""Processing time: what a run reads as "now" when it plans a batch (the batch's time, which
processing-time timers and TTLs compare with) and when it asks whether a timer is due.

Runs read the system clock; a test hands a run :class:`ops.testing.ManualClock` instead and
moves it by hand, so a timer set for ten minutes fires without ten minutes of waiting.

>>> SYSTEM_CLOCK.now() > 1.7e9
True
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of processing time."""

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...


class SystemClock:
    """The machine's wall clock (``time.time``)."""

    def now(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()
