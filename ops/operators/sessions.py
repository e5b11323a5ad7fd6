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
from .grouped import having_mask, nullable_array, without_nulls


@dataclass(frozen=True)
class Session:
    """Session windows on ``time``: a key's records closer than ``gap`` form one session."""

    time: str
    gap: pd.Timedelta
    grace: pd.Timedelta

    def __post_init__(self) -> None:
        if self.gap <= pd.Timedelta(0) or self.grace < pd.Timedelta(0):
            raise PipelineDefinitionError("a session gap must be positive and grace not negative")

    @property
    def spec(self) -> str:
        """Which sessions it makes, as recorded with a checkpoint (see ``Window.spec``)."""
        return f"sessions with gaps of {self.gap // pd.Timedelta('1ms')} ms"


def session(time: str, gap: str, grace: str = "0s") -> Session:
    """Sessions on column ``time`` that close after ``gap`` of inactivity (plus ``grace``)."""
    return Session(time, pd.Timedelta(gap), pd.Timedelta(grace))


@dataclass(frozen=True)
class SessionAggregate(EventTimeAggregate):
    """Aggregates per key and session, by Kafka Streams' rule (``KStreamSessionWindowAggregate``
    over a session store whose retention is ``gap + grace``, as ksqlDB makes it, without the
    record cache). With ``t`` the stream time before a record at ``ts``, its merge candidates
    are the key's sessions that end no earlier than ``ts - gap``, start no later than ``ts +
    gap``, and end after ``t - gap - grace`` (the store's ``end >= t - retention + 1``); it
    joins them (merging sessions it bridges), or opens a session ``[ts, ts]``, which is late,
    dropped and counted, when it ends before ``max(t, ts) - gap - grace`` (a merged session
    never does). A session closes, and ``final`` emits it, once ``end + gap + grace < stream
    time`` (Kafka's ``end < stream time - gap - grace``). ``window_start`` and
    ``window_end`` are the first and last event times (both inclusive, as in ksqlDB). Records
    are folded one by one (sessions are inherently sequential), so this operator is not
    vectorized.

    ``changes`` mode, as ksqlDB's changelog: when a record grows or merges sessions, each shown
    session it replaces gets a tombstone (a delete carrying its old start and end) before the
    row of the session that replaces it (a session whose start and end stay is only updated).
    Per batch, or with ``per_record`` for every record. ``having`` hides sessions that fail it;
    a shown one that stops passing gets a tombstone. ``final`` emits each session once, when it
    closes, if it passes ``having``.
    """

    @property
    def one_change_per_key(self) -> bool:
        # a session that grows keeps its start: its tombstone and new row share the table key
        return self.emit == "final"

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(agg.kind == "udf" for _, agg in self.aggs):
            raise PipelineDefinitionError("user aggregates cannot merge sessions; use the built-in ones")

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
        sessions = {key: held or [] for key, held in zip(unique, store.get_values(unique))}
        gap, grace = to_ms(self.window.gap), to_ms(self.window.grace)
        late, steps = 0, []
        for key, ts, now, row in zip(keys, ms.tolist(), before.tolist(), frame.to_dict("records")):
            # Kafka Streams' rule (see the class docstring): only a session ending after
            # ``now - gap - grace`` still merges, whether or not it was emitted yet, so the
            # outcome does not depend on where batches were cut
            touching = [s for s in sessions[key] if s[0] - gap <= ts <= s[1] + gap
                        and s[1] + gap + grace > now]
            if not touching and ts + gap + grace < now:
                late += 1
                continue
            # a held [ts, ts] that no longer merges (it ends at the bound) is overwritten, as
            # Kafka's store puts the new session under the same window
            replaced = touching or [s for s in sessions[key] if s[0] == s[1] == ts]
            acc = None
            for old in sorted(touching):
                acc = old[2] if acc is None else self._merge(acc, old[2])
            for old in replaced:
                sessions[key].remove(old)
            merged = [min([ts] + [s[0] for s in touching]), max([ts] + [s[1] for s in touching]),
                      self._add(acc, row), False]  # shown: not yet
            sessions[key].append(merged)
            steps.append((key, sorted(replaced), merged))
        finals = self._close(scope, store, sessions, time, gap + grace)
        rows = self._changes(scope, steps) if self.emit == "changes" else finals
        for key, value in sessions.items():  # after the changes: they mark what is shown
            store.set(key, value) if value else store.delete(key)
        self.tick(scope, store, clock, time, late)
        columns = [*self.keys, START, END, *(n for n, _ in self.aggs), CHANGE_COLUMN, OLD_COLUMN]
        out = pd.DataFrame(rows, columns=columns)
        for name, agg in self.aggs:  # nullable dtypes, as the other aggregations emit
            out[name] = nullable_array(agg, out[name].tolist())
        return timestamps(out)

    def _add(self, acc: dict | None, row: dict) -> dict:
        acc = acc or {}
        out = {}
        for name, agg in self.aggs:
            value = agg.value_in(row)
            missing = agg.column is not None and agg.is_null(value)
            part = agg.record_partial(value, missing)
            out[name] = agg.combine(acc.get(name), part)
        return out

    def _merge(self, left: dict, right: dict) -> dict:
        # an accumulator folds into another like a batch partial does
        return {name: agg.combine(left.get(name), right.get(name)) if right.get(name) is not None
                else left.get(name) for name, agg in self.aggs}

    def _values(self, acc: dict) -> dict:
        return {name: agg.result(acc.get(name)) for name, agg in self.aggs}

    def _changes(self, scope: BatchScope, steps: list[tuple]) -> list[dict]:
        """The change rows of a batch's steps (key, sessions a record replaced, the session it
        made): one per record with ``per_record``, else the batch's net changes, where only
        what was shown before the batch gets tombstones and only the sessions the batch ends
        with get rows."""
        steps = [(key, replaced, [made]) for key, replaced, made in steps] if self.per_record \
            else _net(steps)
        passing = iter(self._passes(scope, [(key, made) for key, _, made_all in steps
                                            for made in made_all]))
        rows = []
        for key, replaced, made_all in steps:
            kept = {(made[0], made[1]) for made in made_all}
            shown_before = {(old[0], old[1]) for old in replaced if _shown(old)}
            rows += [self._row(key, old, "delete") for old in replaced
                     if _shown(old) and (old[0], old[1]) not in kept]
            for made in made_all:
                made[3] = next(passing)
                if made[3]:
                    rows.append(self._row(key, made, "update"))
                elif (made[0], made[1]) in shown_before:  # it stopped passing HAVING
                    rows.append(self._row(key, made, "delete"))
        return rows

    def _row(self, key: tuple, sess: list, change: str) -> dict:
        values = self._values(sess[2]) if change != "delete" else {n: None for n, _ in self.aggs}
        return {**dict(zip(self.keys, key)), START: sess[0], END: sess[1], **values,
                CHANGE_COLUMN: change, OLD_COLUMN: None}

    def _passes(self, scope: BatchScope, sessions: list[tuple[tuple, list]]) -> list[bool]:
        """Whether each (key, session) passes ``having`` (all do without one)."""
        if self.having is None or not sessions:
            return [True] * len(sessions)
        frame = pd.DataFrame([{**dict(zip(self.keys, key)), START: sess[0], END: sess[1],
                               **self._values(sess[2])} for key, sess in sessions])
        frame = timestamps(frame.assign(**{name: nullable_array(agg, frame[name].tolist())
                                           for name, agg in self.aggs}))
        return having_mask(self.having, frame, scope.where(self.name))

    def _close(self, scope: BatchScope, store: OperatorState, sessions: dict, time: int | None,
               wait: int) -> list[dict]:
        """Final rows of the sessions stream time closed (any key's, not only the batch's) that
        pass ``having``; they leave ``sessions``, which then holds every key the batch changed."""
        closed = []
        for key in sorted(set(self.open_keys(store)) | set(sessions)):
            held = sessions.get(key)
            if held is None:
                held = sessions[key] = store.get(key) or []
            for sess in sorted(held):
                if time is not None and sess[1] + wait < time:  # ksqlDB: end < time - wait
                    held.remove(sess)
                    closed.append((key, sess))
        passing = self._passes(scope, closed) if self.emit == "final" else [False] * len(closed)
        return [self._row(key, sess, "insert") for (key, sess), shown in zip(closed, passing) if shown]


def _shown(sess: list) -> bool:
    """Whether a kept session's row is in the table (state written before HAVING was
    possible has no flag: every session was shown)."""
    return bool(sess[3]) if len(sess) > 3 else True


def _net(steps: list[tuple]) -> list[tuple]:
    """A batch's steps as one per key: the sessions it held before the batch that the batch
    replaced, and the sessions the batch made that it still holds (in the order made)."""
    made_ids = {id(made) for _, _, made in steps}
    by_key: dict[tuple, tuple[list, list]] = {}
    replaced_ids = {id(old) for _, replaced, _ in steps for old in replaced}
    for key, replaced, made in steps:
        before, after = by_key.setdefault(key, ([], []))
        before += [old for old in replaced if id(old) not in made_ids]
        if id(made) not in replaced_ids:
            after.append(made)
    return [(key, sorted(before), after) for key, (before, after) in by_key.items()]
