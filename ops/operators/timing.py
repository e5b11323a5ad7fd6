"""Timers and state TTL of a keyed map: when a key's timer fires, when its state expires, and
the watermark that event-time deadlines are measured against.

Semantics (Spark's ``GroupState`` timeouts, one timer per key):

* Each batch has a **time**: its processing time (recorded with its plan, so a replay has the
  same), or, for an operator with an ``event_time`` column, its **watermark**: the largest
  event time the operator saw in the batches before, less its ``delay``.
* A key's timer **fires** in the first batch whose time is strictly after the deadline. A key
  with rows in that batch is called with its rows (``md.timer`` is ``None``); a key without
  is called with no rows and ``md.timer`` set to the deadline.
* A call clears the key's timer, unless the function sets one again; a timer set in a batch
  fires in a later one at the earliest.
* With a ``ttl``, a key whose last rows came more than ``ttl`` before the batch's time (event
  time: its latest event time, against the watermark) is deleted before the batch's calls
  (tombstones in ``_state``, and its timer with it): it reads as initial state again.

The runtime asks :func:`wake_at` after each checkpoint for when a batch with
no input would next fire something, and runs one such batch when a run finds no new input
and that time has passed (the sensor starts runs for it too).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from state import OperatorState, StateStore, Timers, expiry_state

from ..context import BatchScope
from .base import TimerDeclaration
from .event_time import NO_TIME, epoch_ms

log = logging.getLogger(__name__)


def timers_of(declared: TimerDeclaration, store: StateStore) -> Timers:
    return store.timers(declared.operator)


def expiry_of(declared: TimerDeclaration, store: StateStore) -> Timers | None:
    if declared.ttl_ms is None:
        return None
    return store.timers(declared.operator, expiry_state(declared.operator))


def batch_now(declared: TimerDeclaration, scope: BatchScope) -> int | None:
    """The batch's time that deadlines are compared with (see the module docstring)."""
    if declared.event_time is None:
        return scope.batch_time
    if declared.operator in scope.watermarks:  # distributed: measured by the runtime
        return scope.watermarks[declared.operator]
    return timers_of(declared, scope.store).watermark


def wake_at(declared: TimerDeclaration, store: StateStore, batch_time: int) -> int | None:
    """The earliest batch time at which a batch with no input would fire a timer or expire a
    key (epoch ms): the millisecond after the earliest processing-time deadline, since a
    deadline fires only in a batch strictly after it; a batch time already passed when
    event-time deadlines are due under the watermark. A batch is due when this is at or before
    the clock (``wake <= now``), the same rule :meth:`Timers.due` fires by."""
    queues = [timers_of(declared, store), expiry_of(declared, store)]
    deadlines = [queue.earliest() for queue in queues if queue is not None]
    earliest = min((d for d in deadlines if d is not None), default=None)
    return wake_time(declared, earliest, timers_of(declared, store).watermark, batch_time)


def wake_time(declared: TimerDeclaration, earliest: int | None, watermark: int | None,
              batch_time: int) -> int | None:
    """:func:`wake_at`, given the earliest deadline held and the watermark."""
    if earliest is None:
        return None
    if declared.event_time is None:
        return earliest + 1  # fires strictly after the deadline: a batch at it would fire nothing
    return batch_time if watermark is not None and earliest < watermark else None


def watermark_after(declared: TimerDeclaration, frame: pd.DataFrame,
                    before: int | None) -> int | None:
    """The watermark after a batch of ``frame``'s rows, from ``before``."""
    times = event_ms(declared, frame)
    times = times[times != NO_TIME]
    return moved_watermark(declared, before, int(times.max()) if len(times) else None)


def moved_watermark(declared: TimerDeclaration, before: int | None,
                    latest: int | None) -> int | None:
    """The watermark after a batch whose largest event time is ``latest`` (``None``: none)."""
    if latest is None:
        return before
    moved = latest - declared.delay_ms
    return moved if before is None else max(before, moved)


def event_ms(declared: TimerDeclaration, frame: pd.DataFrame) -> np.ndarray:
    """Each row's event time in epoch ms (rows without one: a minimum no deadline passes)."""
    ms = np.full(len(frame), NO_TIME, dtype="int64")
    if declared.event_time is None or declared.event_time not in frame.columns:
        return ms
    times = frame[declared.event_time]
    known = times.notna().to_numpy()
    if known.any():
        ms[known] = epoch_ms(times[known])
    return ms


@dataclass
class KeyClock:
    """One batch of one operator: which keys expire, which timers fire, and the deadlines the
    batch renews (see the module docstring)."""

    declared: TimerDeclaration
    scope: BatchScope

    def __post_init__(self) -> None:
        self.timers = timers_of(self.declared, self.scope.store)
        self.expiry = expiry_of(self.declared, self.scope.store)
        self.now = batch_now(self.declared, self.scope)

    def expire(self, state: OperatorState) -> list[Hashable]:
        """Delete the keys of ``state`` (and their timers) whose TTL passed; return them."""
        if self.expiry is None:
            return []
        expired = [key for key, _ in self.expiry.due(self.now)]
        state.delete_many(expired)
        self.timers.clear_many(expired)
        return expired

    def on_time(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` without its late rows: those whose event time is at or below the watermark
        the batch started with (Spark's rule before a stateful function with event-time
        timeouts). Rows without an event time stay; so does every row before the first
        watermark."""
        if self.now is None or self.declared.event_time is None or frame.empty:
            return frame
        times = event_ms(self.declared, frame)
        late = (times != NO_TIME) & (times <= self.now)
        if not late.any():
            return frame
        log.warning("%s.%s batch %d: %d row(s) at or below the watermark (%d) dropped as late",
                    self.scope.pipeline, self.declared.operator, self.scope.batch_id,
                    int(late.sum()), self.now)
        return frame[~late]

    def fire(self, present: list[Hashable]) -> list[tuple[Hashable, int]]:
        """The due timers of keys without rows in the batch, as ``(key, deadline)``; every due
        timer, and those of the keys with rows, are cleared (a call clears its key's timer)."""
        due = self.timers.due(self.now)
        self.timers.clear_many(present)
        with_rows = set(present)
        return [(key, at) for key, at in due if key not in with_rows]

    def renew(self, frame: pd.DataFrame, keys: pd.Series) -> None:
        """After the calls: TTL deadlines of the keys with rows, and (on the driver) the
        watermark."""
        declared = self.declared
        if self.expiry is not None and len(keys):
            assert declared.ttl_ms is not None
            if declared.event_time is None:
                for key in keys.unique():
                    self.expiry.set(key, self.scope.batch_time + declared.ttl_ms)
            else:
                latest = pd.Series(event_ms(declared, frame), index=keys.index).groupby(
                    keys, sort=False).max()
                floor = self.now if self.now is not None else NO_TIME
                for key, time in latest.items():
                    if max(int(time), floor) != NO_TIME:  # no event time seen at all: no clock
                        self.expiry.set(key, max(int(time), floor) + declared.ttl_ms)
        if declared.event_time is not None and declared.operator not in self.scope.watermarks:
            self.timers.advance(watermark_after(declared, frame, self.timers.watermark))
