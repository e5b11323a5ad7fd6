"""Session windows: a key's records closer than a gap form one session (ksqlDB's SESSION)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from state import OperatorState

from ..columns import CHANGE_COLUMN, OLD_COLUMN
from ..context import BatchScope
from ..errors import PipelineDefinitionError
from .aggregates import to_python
from .event_time import END, START, EventTimeAggregate, epoch_ms, timestamps, to_ms
from .grouped import nullable_array, without_nulls


@dataclass(frozen=True)
class Session:
    """Session windows on ``time``: a key's records closer than ``gap`` form one session."""

    time: str
    gap: pd.Timedelta
    grace: pd.Timedelta

    def __post_init__(self) -> None:
        if self.gap <= pd.Timedelta(0) or self.grace < pd.Timedelta(0):
            raise PipelineDefinitionError("a session gap must be positive and grace not negative")


def session(time: str, gap: str, grace: str = "0s") -> Session:
    """Sessions on column ``time`` that close after ``gap`` of inactivity (plus ``grace``)."""
    return Session(time, pd.Timedelta(gap), pd.Timedelta(grace))


@dataclass(frozen=True)
class SessionAggregate(EventTimeAggregate):
    """Aggregates per key and session. A record within ``gap`` of a key's open sessions joins
    them (merging sessions it bridges); otherwise it opens a session ``[ts, ts]``, unless that
    would already be closed (``ts + gap + grace <= stream time``): then it is late, dropped and
    counted. A session closes when ``end + gap + grace <= stream time``. ``window_start`` and
    ``window_end`` are the first and last event times (both inclusive, as in ksqlDB). In
    ``changes`` mode a merge deletes the rows of the sessions it absorbed. Records are folded one
    by one (sessions are inherently sequential), so this operator is not vectorized.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(agg.kind == "udf" for _, agg in self.aggs):
            raise PipelineDefinitionError("user aggregates cannot merge sessions; use the built-in ones")
        if self.having is not None or self.per_record:
            raise PipelineDefinitionError("HAVING and per-record emission are not supported with "
                                          "session windows")

    def state_key(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(values)  # a key's sessions are kept under the tuple of its key columns

    def timed(self, frame: pd.DataFrame, where: str = "") -> pd.DataFrame:
        return without_nulls(super().timed(frame, where), self.keys)  # a session needs its key

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        store, clock = self.clock(scope)
        frame = self.timed(frame, scope.where(self.name))
        ms = epoch_ms(frame[self.window.time])
        before, time = self.stream_times(scope, frame, ms, clock)
        keys = [tuple(to_python(v) for v in row) for row in frame[list(self.keys)].itertuples(index=False)]
        unique = list(dict.fromkeys(keys))
        sessions = dict(zip(unique, store.get_values(unique)))
        gap, grace = to_ms(self.window.gap), to_ms(self.window.grace)
        late, changes = 0, []
        for key, ts, now, row in zip(keys, ms.tolist(), before.tolist(), frame.to_dict("records")):
            if sessions[key] is None:
                sessions[key] = []
            # sessions closed by stream time (even if not yet emitted) take no more records, so
            # the outcome does not depend on where batches were cut
            touching = [s for s in sessions[key] if s[0] - gap <= ts <= s[1] + gap
                        and s[1] + gap + grace > now]
            if not touching and ts + gap + grace <= now:
                late += 1
                continue
            acc = None
            for old in sorted(touching):
                acc = old[2] if acc is None else self._merge(acc, old[2])
                sessions[key].remove(old)
                changes.append(("delete", key, old))
            merged = [min([ts] + [s[0] for s in touching]), max([ts] + [s[1] for s in touching]),
                      self._add(acc, row)]
            sessions[key].append(merged)
            changes.append(("upsert", key, merged))
        finals = self._close(store, sessions, time, gap + grace)
        for key, value in sessions.items():
            store.set(key, value) if value else store.delete(key)
        self.tick(scope, store, clock, time, late)
        rows = self._rows(changes) if self.emit == "changes" else finals
        columns = [*self.keys, START, END, *(n for n, _ in self.aggs), CHANGE_COLUMN, OLD_COLUMN]
        out = pd.DataFrame(rows, columns=columns)
        for name, agg in self.aggs:  # nullable dtypes, as the other aggregations emit
            out[name] = nullable_array(agg, out[name].tolist())
        return timestamps(out)

    def _add(self, acc: dict | None, row: dict) -> dict:
        acc = acc or {}
        out = {}
        for name, agg in self.aggs:
            value = row.get(agg.column) if agg.column else None
            missing = agg.column is not None and (value is None or value != value)
            part = agg.record_partial(value, missing)
            out[name] = agg.combine(acc.get(name), part)
        return out

    def _merge(self, left: dict, right: dict) -> dict:
        # an accumulator folds into another like a batch partial does
        return {name: agg.combine(left.get(name), right.get(name)) if right.get(name) is not None
                else left.get(name) for name, agg in self.aggs}

    def _values(self, acc: dict) -> dict:
        return {name: agg.result(acc.get(name)) for name, agg in self.aggs}

    def _rows(self, changes: list) -> list[dict]:
        """Net changes of the batch: sessions absorbed by a later merge show as deletes only,
        each carrying the old session's start and end (ksqlDB's tombstone), before the rows of
        the sessions that replace them."""
        final: dict[tuple, tuple] = {}
        for change, key, sess in changes:
            final[(key, sess[0])] = (change, key, sess)
        rows = []
        for change, key, sess in sorted(final.values(), key=lambda item: item[0] != "delete"):
            values = self._values(sess[2]) if change == "upsert" else {n: None for n, _ in self.aggs}
            rows.append({**dict(zip(self.keys, key)), START: sess[0], END: sess[1], **values,
                         CHANGE_COLUMN: "update" if change == "upsert" else "delete",
                         OLD_COLUMN: None})
        return rows

    def _close(self, store: OperatorState, sessions: dict, time: int | None,
               wait: int) -> list[dict]:
        """Final rows of the sessions stream time closed (any key's, not only the batch's);
        they leave ``sessions``, which then holds every key the batch changed."""
        rows = []
        for key in sorted(set(self.open_keys(store)) | set(sessions)):
            held = sessions.get(key)
            if held is None:
                held = sessions[key] = store.get(key) or []
            for sess in sorted(held):
                if time is not None and sess[1] + wait <= time:
                    held.remove(sess)
                    rows.append({**dict(zip(self.keys, key)), START: sess[0], END: sess[1],
                                 **self._values(sess[2]), CHANGE_COLUMN: "insert", OLD_COLUMN: None})
        return rows

