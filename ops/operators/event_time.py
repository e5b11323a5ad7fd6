"""What window and session aggregations share: the operator shape, the stream-time clock kept in
state, and conversions between event times and epoch milliseconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from state import OperatorState

from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import Agg
from .base import Operator, StateDeclaration

START, END = "window_start", "window_end"
CLOCK = "__clock__"  # the operator's own state key for stream time and open windows


@dataclass(frozen=True)
class EventTimeAggregate(Operator):
    """What window and session aggregations share: keys, aggregates, emission mode, and a clock
    (stream time, open windows, late count) kept in the operator's state."""

    name: str
    keys: tuple[str, ...]
    window: Any
    aggs: tuple[tuple[str, Agg], ...]
    emit: str = "changes"

    def __post_init__(self) -> None:
        if self.emit not in ("changes", "final"):
            raise PipelineDefinitionError(f"emit must be 'changes' or 'final', not {self.emit!r}")

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys + (START,)

    def declares(self) -> StateDeclaration:
        return StateDeclaration.keyed(self.keys, self.name, shared=(CLOCK,))

    def clock(self, scope: BatchScope, frame: pd.DataFrame) -> tuple[OperatorState, dict[str, Any]]:
        """The operator's state and its clock; the frame must hold the event-time column."""
        if self.window.time not in frame.columns:
            raise OperatorError(
                f"{scope.where(self.name)}: no event time column {self.window.time!r} in the data")
        store = scope.store.operator(self.name, initial=None)
        return store, store.get(CLOCK) or {"time": None, "open": [], "late": 0}


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
