"""What window and session aggregations share: the operator shape, the stream-time clock, and
conversions between event times and epoch milliseconds.

Stream time is the largest event time seen so far, in input order, across every key and batch.
Whether a record is late depends on the stream time *before* it, so an operator that sees only
some keys (a task in distributed mode) cannot work it out alone: there the runtime measures it
over the whole batch first (:func:`running_max_before`, chunk by chunk in input order), hands
each row its stream time in :data:`STREAM_TIME_COLUMN` and the time after the batch in
``scope.stream_time``, and keeps the clock itself. On the driver the operator keeps its clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from state import OperatorState

from ..columns import WATERMARK_COLUMN
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import Agg
from .base import Operator, StateDeclaration
from .grouped import without_nulls

log = logging.getLogger(__name__)

START, END = "window_start", "window_end"
CLOCK = "__clock__"  # the operator's own state key for its stream time and late count
#: Distributed mode: each row's stream time before it (epoch ms), measured by the runtime.
STREAM_TIME_COLUMN = "__stream_time"
NO_TIME = np.iinfo(np.int64).min  # stream time before any event
LATE_COUNT = "late"  # what a task reports in ``scope.counts``: records dropped as late


@dataclass(frozen=True)
class EventTimeAggregate(Operator):
    """What window and session aggregations share: keys, aggregates, emission mode, and a clock
    (stream time, open windows, late count) kept in the operator's state."""

    name: str
    keys: tuple[str, ...]
    window: Any
    aggs: tuple[tuple[str, Agg], ...]
    emit: str = "changes"
    #: hides windows whose values fail it (ksqlDB's HAVING), as ``GroupAggregate``'s does
    having: Callable[[pd.DataFrame], Any] | None = None
    #: ``changes`` mode: a change per input row, not per window per batch (see GroupAggregate)
    per_record: bool = False
    #: a column whose largest value in a batch stream time has surely reached after it (a FINAL
    #: tumbling table's ``window_end``: its window was emitted once the upstream's stream time
    #: passed it, and every later row starts there or after). It moves stream time at the end
    #: of the batch only, never a row's lateness. A window over an upstream FINAL window's
    #: bounds also reads its ``_watermark`` column (see :meth:`progressed`), which is ahead of
    #: ``window_end`` when the upstream's stream time passed ends no window it emitted: then it
    #: closes in the batch whose stream time passes its end, as Spark's chained windows do.
    progress: str | None = None

    @property
    def one_change_per_key(self) -> bool:
        return not self.per_record

    def __post_init__(self) -> None:
        if self.emit not in ("changes", "final"):
            raise PipelineDefinitionError(f"emit must be 'changes' or 'final', not {self.emit!r}")
        if self.per_record and self.emit == "final":
            raise PipelineDefinitionError("per-record emission goes with emit='changes': 'final' "
                                          "emits each window once")

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys + (START,)

    def declares(self) -> StateDeclaration:
        return StateDeclaration.keyed(self.keys, self.name, shared=(CLOCK,))

    def state_shape(self) -> dict[str, Any]:
        return {"aggregates": {name: agg.spec for name, agg in self.aggs},
                "window": self.window.spec}

    def timed(self, frame: pd.DataFrame, where: str = "") -> pd.DataFrame:
        """The rows this operator aggregates, the only ones that move stream time: those with
        an event time (sessions also need the key)."""
        if self.window.time not in frame.columns:
            raise OperatorError(f"{where or self.name}: no event time column "
                                f"{self.window.time!r} in the data")
        return without_nulls(frame, [self.window.time])

    def event_ms(self, frame: pd.DataFrame) -> np.ndarray:
        """Each row's event time (epoch ms), :data:`NO_TIME` for rows :meth:`timed` leaves out."""
        ms = np.full(len(frame), NO_TIME, dtype="int64")
        timed = self.timed(frame)
        if len(timed):
            ms[frame.index.get_indexer(timed.index)] = epoch_ms(timed[self.window.time])
        return ms

    def owner(self, state_key: Any) -> Any:
        """The key (as :meth:`state_key` makes it) whose rows change ``state_key``'s state."""
        return state_key

    def clock(self, scope: BatchScope) -> tuple[OperatorState, dict[str, Any]]:
        """The operator's state and its clock (stream time and late count so far)."""
        store = scope.store.operator(self.name, initial=None)
        return store, store.get(CLOCK) or {"time": None, "late": 0}

    def stream_times(self, scope: BatchScope, events: pd.DataFrame, ms: np.ndarray,
                     clock: dict[str, Any]) -> tuple[np.ndarray, int | None]:
        """Stream time before each of ``events`` (whose event times are ``ms``, epoch ms) and
        after the batch."""
        if self.name in scope.stream_time:  # measured by the runtime over the whole batch
            return (events[STREAM_TIME_COLUMN].to_numpy(dtype="int64"),
                    scope.stream_time[self.name])
        before, after = running_max_before(ms, clock["time"])
        return before, self.progressed(events, after)

    def progressed(self, frame: pd.DataFrame, time: int | None) -> int | None:
        """Stream time ``time`` moved to the largest :attr:`progress` value in ``frame``, and to
        its largest :data:`WATERMARK_COLUMN` when the time column is an upstream FINAL
        window's bound (no later row of it has a smaller one)."""
        columns = [self.progress] if self.progress is not None else []
        if self.window.time in (START, END):
            columns.append(WATERMARK_COLUMN)
        reached = [frame[c].dropna() for c in columns if c in frame.columns]
        reached = [values for values in reached if not values.empty]
        if not reached:
            return time
        latest = max(int(epoch_ms(values).max()) for values in reached)
        return latest if time is None else max(time, latest)

    def open_keys(self, store: OperatorState) -> list:
        """The keys of the operator's open windows (or sessions): all it holds but its clock."""
        return [key for key in store.held_keys() if key != CLOCK]

    def tick(self, scope: BatchScope, store: OperatorState, clock: dict[str, Any],
             time: int | None, late: int) -> None:
        """Record the batch's stream time and late records (the runtime does, when it measured
        stream time for the whole batch)."""
        if late:
            log.warning("%s.%s batch %d: %d late record(s) dropped", scope.pipeline, self.name,
                        scope.batch_id, late)
        if self.name in scope.stream_time:
            scope.counts[LATE_COUNT] = scope.counts.get(LATE_COUNT, 0) + late
        else:
            store.set(CLOCK, {"time": time, "late": clock["late"] + late})


def running_max_before(ms: np.ndarray, since: int | None) -> tuple[np.ndarray, int | None]:
    """The largest of ``since`` and the values before each of ``ms`` (:data:`NO_TIME` when
    there are none), and the largest of all (``None`` when there are none).

    >>> before, after = running_max_before(np.array([5, 3, 9]), since=4)
    >>> before.tolist(), after
    ([4, 5, 5], 9)
    """
    start = NO_TIME if since is None else since
    if not len(ms):
        return np.asarray(ms, dtype="int64"), since
    running = np.maximum.accumulate(np.maximum(ms, start))
    after = int(running[-1])
    return np.concatenate([[start], running[:-1]]), None if after == NO_TIME else after


def to_ms(delta: pd.Timedelta) -> int:
    return int(delta / pd.Timedelta(milliseconds=1))


def epoch_ms(times: pd.Series) -> np.ndarray:
    """Event times as epoch milliseconds (naive times are UTC). Datetime columns convert
    directly: ``pd.to_datetime`` on them first scanned the values to decide about caching."""
    if not (pd.api.types.is_datetime64_dtype(times) or isinstance(times.dtype, pd.DatetimeTZDtype)):
        times = pd.to_datetime(times, utc=True)
    return times.dt.as_unit("ns").array.asi8 // 1_000_000


def timestamps(out: pd.DataFrame) -> pd.DataFrame:
    for column in (START, END):
        out[column] = pd.to_datetime(out[column].astype("Int64"), unit="ms", utc=True)
    return out.reset_index(drop=True)
