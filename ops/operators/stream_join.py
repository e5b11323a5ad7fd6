"""Stream–stream joins within a time bound (ksqlDB's ``a JOIN b WITHIN … ON a.k = b.k``).

A left record at time ``lt`` and a right record of the same key at ``rt`` join when
``lt - before <= rt <= lt + after`` (``WITHIN n`` is ``before = after = n``). Each record is
kept in the operator's state under its key, and joins every record of the other side it meets
there: a pair is emitted as soon as its second record arrives, whichever side that is
(``inner``).

Each side has its own stream time, the largest event time seen on it, as ksqlDB's two window
stores each observe their own (records are processed in event-time order within a batch, a
left record first on a tie, as Kafka Streams picks the input with the earliest record). A
record is kept until *its own side's* time passes its time + ``before`` + ``after`` +
``grace``, so a record of the other side, however late for its own side, still pairs with it
until then: one side running ahead does not end the other's records. A record arriving after
its side has passed it so is late: it pairs with what the other side keeps, is not kept, and
is counted. ``left`` emits a left record that matched nothing, with the right side's columns
null, once it is no longer kept (at once for a late one): no later record can then pair with
it, so a null row is never followed by a pair. ``outer`` does the same for right records too.
The stream times are kept under ``CLOCK`` (``l``, ``r``, and ``time``, the larger, which is
all a checkpoint written before the sides had their own holds: both sides start from it).
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
        # a checkpoint from before each side kept its own time: both start from the shared one
        times = {side: clock.get(side, clock["time"]) for side in ("l", "r")}
        records = self._records(scope, frame)
        keys = list(dict.fromkeys(key for key, *_ in records))
        kept = {key: value or {"l": [], "r": []} for key, value in zip(keys, store.get_values(keys))}
        late, rows = 0, list[dict]()
        for key, side, ms, row in records:
            times[side] = ms if times[side] is None else max(times[side], ms)
            pairs = self._meet(kept[key], side, ms, row, times)
            is_late = ms + self._expiry_ms < times[side]
            if is_late:
                late += 1
            else:
                kept[key][side].append([ms, row, bool(pairs)])
            if is_late and not pairs and self._shown(side):
                pairs = [self._alone(side, row)]
            rows += ({self.on: key, **pair} for pair in pairs)
        rows += self._expire(store, kept, times)
        for key, value in kept.items():
            store.set(key, value)
        if late:
            log.warning("%s.%s batch %d: %d late record(s) not kept", scope.pipeline, self.name,
                        scope.batch_id, late)
        known = [t for t in times.values() if t is not None]
        store.set(CLOCK, {"time": max(known) if known else None, "late": clock["late"] + late,
                          **times})
        names = [self.on, *(out for _, out in (*self.left.columns, *self.right.columns))]
        # the event times are timestamps whatever else was declared (kept as text in state)
        event_times = {out: "timestamp" for spec in (self.left, self.right)
                       for column, out in spec.columns if column == spec.time}
        return typed(pd.DataFrame(rows, columns=names), {**event_times, **dict(self.kinds)})

    def _shown(self, side: str) -> bool:
        """Whether ``side``'s records are emitted alone when they match nothing."""
        return self.how == "outer" or (self.how == "left" and side == "l")

    def _alone(self, side: str, row: dict) -> dict:
        """``row`` of ``side`` with the other side's columns null."""
        nulls = self.right if side == "l" else self.left
        return {**{out: None for _, out in nulls.columns}, **row}

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

    def _meet(self, kept: dict, side: str, ms: int, row: dict,
              times: dict[str, int | None]) -> list[dict]:
        """The pairs ``row`` makes with the other side's records that side still keeps (one
        its own time has passed, though not yet dropped at the batch's end, is out of reach)."""
        pairs, other = [], "r" if side == "l" else "l"
        reached = times[other]
        for entry in kept[other]:
            if reached is not None and entry[0] + self._expiry_ms < reached:
                continue
            left_ms, right_ms = (ms, entry[0]) if side == "l" else (entry[0], ms)
            if left_ms - self.before_ms <= right_ms <= left_ms + self.after_ms:
                entry[2] = True
                pairs.append({**row, **entry[1]} if side == "l" else {**entry[1], **row})
        return pairs

    def _expire(self, store: Any, kept: dict, times: dict[str, int | None]) -> list[dict]:
        """Drop the records their own side's time has passed (every key's, not only the
        batch's), and the rows a left or outer join emits for those that never matched."""
        if times["l"] is None and times["r"] is None:
            return []
        others = [key for key in store.held_keys() if key != CLOCK and key not in kept]
        kept.update(zip(others, store.get_values(others)))
        emitted = []
        for key in list(kept):
            for side in ("l", "r"):
                reached, stays = times[side], []
                for entry in kept[key][side]:
                    if reached is None or entry[0] + self._expiry_ms >= reached:
                        stays.append(entry)
                    elif self._shown(side) and not entry[2]:
                        emitted.append({self.on: key, **self._alone(side, entry[1])})
                kept[key][side] = stays
            if not kept[key]["l"] and not kept[key]["r"]:
                store.delete(key)
                del kept[key]
        return emitted
