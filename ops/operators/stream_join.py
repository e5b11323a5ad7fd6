"""Stream–stream joins within a time bound (ksqlDB's ``a JOIN b WITHIN … ON a.k = b.k``).

A left record at time ``lt`` and a right record of the same key at ``rt`` join when
``lt - before <= rt <= lt + after`` (``WITHIN n`` is ``before = after = n``). Each record is
kept in the operator's state under its key until no on-time record of the other side can
match it any more, and joins every record of the other side it meets there: a pair is emitted
as soon as its second record arrives, whichever side that is (``inner``).

Stream time is the largest event time seen, across both sides, in the order records are
processed: a batch's records in event-time order (a left record first on a tie), as Kafka
Streams picks the input with the earliest record. A record is late, dropped and counted, when
stream time before it has passed its time plus the other side's reach (``after`` for a left
record, ``before`` for a right one) plus ``grace``. A kept record expires when stream time
passes its time + ``before`` + ``after`` + ``grace``: then no on-time record of the other side
can match it. ``left`` emits a left record that expired unmatched once, with the right side's
columns null; ``outer`` does the same for right records too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..columns import SOURCE_COLUMN
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .base import Operator, StateDeclaration
from .event_time import CLOCK, epoch_ms
from .grouped import row_keys_of
from .joins import storable, typed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JoinSide:
    """One side of a stream–stream join: its source's name, the columns it contributes (as
    the output names them) and its event-time column."""

    source: str
    columns: tuple[tuple[str, str], ...]  # (column in the data, column in the output)
    time: str


@dataclass(frozen=True)
class StreamStreamJoin(Operator):
    """See the module docstring. ``on`` is the column holding the key in both sides' rows,
    emitted first in every row (an outer join's row of the right side only has it too); each
    side's ``columns`` are what else it emits."""

    name: str
    on: str
    left: JoinSide
    right: JoinSide
    before_ms: int
    after_ms: int
    grace_ms: int
    how: str = "inner"
    kinds: tuple[tuple[str, str], ...] = ()  # declared kinds of output columns

    def __post_init__(self) -> None:
        if self.how not in ("inner", "left", "outer"):
            raise PipelineDefinitionError(
                f"stream join how must be 'inner', 'left' or 'outer', not {self.how!r}")
        if min(self.before_ms, self.after_ms, self.grace_ms) < 0:
            raise PipelineDefinitionError("a join's time bounds and grace must not be negative")

    def declares(self) -> StateDeclaration:
        return StateDeclaration.keyed((self.on,), self.name, shared=(CLOCK,))

    @property
    def _expiry_ms(self) -> int:
        return self.before_ms + self.after_ms + self.grace_ms

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        store = scope.store.operator(self.name, initial=None)
        clock = store.get(CLOCK) or {"time": None, "late": 0}
        records = self._records(scope, frame)
        keys = list(dict.fromkeys(key for key, *_ in records))
        kept = {key: value or {"l": [], "r": []} for key, value in zip(keys, store.get_values(keys))}
        stream_time, late = clock["time"], 0
        pairs: list[dict] = []
        for key, side, ms, row in records:
            reach = self.after_ms if side == "l" else self.before_ms
            if stream_time is not None and ms + reach + self.grace_ms < stream_time:
                late += 1
                continue
            stream_time = ms if stream_time is None else max(stream_time, ms)
            pairs += ({self.on: key, **pair} for pair in self._meet(kept[key], side, ms, row))
        expired = self._expire(store, kept, stream_time)
        for key, value in kept.items():
            store.set(key, value)
        if late:
            log.warning("%s.%s batch %d: %d late record(s) dropped", scope.pipeline, self.name,
                        scope.batch_id, late)
        store.set(CLOCK, {"time": stream_time, "late": clock["late"] + late})
        names = [self.on, *(out for _, out in (*self.left.columns, *self.right.columns))]
        # the event times are timestamps whatever else was declared (kept as text in state)
        times = {out: "timestamp" for spec in (self.left, self.right)
                 for column, out in spec.columns if column == spec.time}
        return typed(pd.DataFrame(pairs + expired, columns=names), {**times, **dict(self.kinds)})

    def _records(self, scope: BatchScope, frame: pd.DataFrame) -> list[tuple[Any, str, int, dict]]:
        """The batch's records as (key, side, event time in ms, row), in processing order;
        records without a key or an event time cannot join and are left out."""
        if frame.empty:
            return []
        if SOURCE_COLUMN not in frame.columns:
            raise OperatorError(f"{scope.where(self.name)}: this operator joins a merged stream: "
                                "left.merge(right).join_within(...)")
        records: list[tuple[Any, str, int, dict]] = []
        for side, spec in (("l", self.left), ("r", self.right)):
            rows = frame[frame[SOURCE_COLUMN] == spec.source]
            if rows.empty:  # a batch may hold one input's rows only (and its columns only)
                continue
            rows = rows[rows[self.on].notna() & rows[spec.time].notna()]
            values = [{out: storable(v) for (_, out), v in zip(spec.columns, row)}
                      for row in rows[[c for c, _ in spec.columns]].itertuples(index=False)]
            records += zip(row_keys_of(rows, (self.on,)), [side] * len(rows),
                           epoch_ms(rows[spec.time]).tolist(), values)
        order = np.lexsort(([side == "r" for _, side, _, _ in records],
                            [ms for _, _, ms, _ in records]))
        return [records[i] for i in order]

    def _meet(self, kept: dict, side: str, ms: int, row: dict) -> list[dict]:
        """The pairs ``row`` makes with the other side's kept records; it is kept too."""
        pairs, other = [], "r" if side == "l" else "l"
        for entry in kept[other]:
            left_ms, right_ms = (ms, entry[0]) if side == "l" else (entry[0], ms)
            if left_ms - self.before_ms <= right_ms <= left_ms + self.after_ms:
                entry[2] = True
                pairs.append({**row, **entry[1]} if side == "l" else {**entry[1], **row})
        kept[side].append([ms, row, bool(pairs)])
        return pairs

    def _expire(self, store: Any, kept: dict, stream_time: int | None) -> list[dict]:
        """Drop the records no on-time record can match any more (every key's, not only the
        batch's), and the rows a left or outer join emits for those that never matched."""
        if stream_time is None:
            return []
        others = [key for key in store.held_keys() if key != CLOCK and key not in kept]
        kept.update(zip(others, store.get_values(others)))
        emitted = []
        for key in list(kept):
            for side, nulls in (("l", self.right), ("r", self.left)):
                shown = self.how == "outer" or (self.how == "left" and side == "l")
                stays = []
                for entry in kept[key][side]:
                    if entry[0] + self._expiry_ms >= stream_time:
                        stays.append(entry)
                    elif shown and not entry[2]:
                        emitted.append({self.on: key, **{out: None for _, out in nulls.columns},
                                        **entry[1]})
                kept[key][side] = stays
            if not kept[key]["l"] and not kept[key]["r"]:
                store.delete(key)
                del kept[key]
        return emitted
