"""``stream.with_watermark("ts", "10s")``: Spark's ``withWatermark``, a mark in the stream saying
which column is its event time and how far the watermark trails the largest one seen.

The mark moves no rows and keeps no state: an event-time operator after it
(``transform_with_state(..., time_mode="event_time")``) takes the column and delay as its own
clock, measures its watermark from the rows it is given (the largest event time of the
batches before, less the delay) and keeps it in its checkpoint. A processor that names its
output's ``event_time`` column marks the stream after it the same way, with the same delay,
so a second processor chained to the first has an event time too (as Spark carries the
watermark through ``eventTimeColumnName``).

>>> mark = EventTimeWatermark("watermark", "ts", 2_000)
>>> mark.apply(None, pd.DataFrame({"ts": [1]}))["ts"].tolist()
[1]
>>> last_watermark((mark,)).delay_ms
2000
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..context import BatchScope
from ..errors import OperatorError
from .base import Operator, StateDeclaration


@dataclass(frozen=True)
class EventTimeWatermark(Operator):
    """The stream's event time is ``column``; its watermark trails it by ``delay_ms``."""

    name: str
    column: str
    delay_ms: int

    def declares(self) -> StateDeclaration:
        return StateDeclaration.stateless()

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if self.column not in frame.columns and len(frame.columns):
            raise OperatorError(f"with_watermark {self.name!r}: no event time column "
                                f"{self.column!r} in the rows {list(frame.columns)}")
        return frame


def last_watermark(operators: Sequence[Operator]) -> EventTimeWatermark | None:
    """The watermark mark nearest before the end of ``operators`` (``None``: none)."""
    marks = [op for op in operators if isinstance(op, EventTimeWatermark)]
    return marks[-1] if marks else None
