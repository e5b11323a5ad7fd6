"""Keyed aggregation (ksqlDB's ``CREATE TABLE … AS SELECT … GROUP BY``).

``stream.group_by("title").agg(tickets_sold=sp.count("ticket_total_value"))`` keeps one
accumulator per key in managed state and emits, per batch, one change row per key whose
aggregate changed: the new values, the old ones (``_old``, JSON) and ``_change``
(``insert``/``update``/``delete``), which ``.write.to_table(name)`` materialises (see
:mod:`ops.sinks.state_table`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from ..columns import CHANGE_COLUMN, CHANGE_NO_COLUMN, OLD_COLUMN, SIGN_COLUMN
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import UNDOABLE, Agg, is_missing, to_python
from .base import TableOperator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupAggregate(TableOperator):
    """Aggregates ``aggs`` (output name -> :class:`Agg`) per value of ``keys``.

    Rows whose group key is null are dropped and counted in the log (ksqlDB drops them too).
    ``having(values) -> bool Series`` hides keys that fail it: a key that stops passing is
    deleted from the table (a tombstone), as in ksqlDB. ``retracting``: the rows are a
    table's, signed (:mod:`ops.operators.retraction`): each row's ``_sign`` adds it to its
    group or takes it back; only :data:`UNDOABLE` aggregates can, and a count that falls to 0
    stays, at 0, unless HAVING hides it.
    """

    name: str
    keys: tuple[str, ...]
    aggs: tuple[tuple[str, Agg], ...]
    having: Callable[[pd.DataFrame], Any] | None = None
    retracting: bool = False
    #: one change row per input row that touches a key, in input order, even when the value
    #: does not change (ksqlDB without its record cache), instead of one per key per batch
    per_record: bool = False

    @property
    def one_change_per_key(self) -> bool:
        return not self.per_record

    def state_shape(self) -> dict[str, Any]:
        return {"aggregates": {name: agg.spec for name, agg in self.aggs},
                "retracting": self.retracting}

    def __post_init__(self) -> None:
        if not self.keys:
            raise PipelineDefinitionError("group_by needs at least one column")
        names = [name for name, _ in self.aggs]
        clash = set(names) & set(self.keys) or {n for n in names if names.count(n) > 1}
        if clash or not names:
            raise PipelineDefinitionError(
                f"agg needs distinct output names that are not group columns; got {names}")
        undoable = sorted({agg.kind for _, agg in self.aggs} - UNDOABLE)
        if self.retracting and undoable:
            raise PipelineDefinitionError(
                f"aggregating a table needs aggregates that can take a row back (COUNT, SUM, "
                f"AVG, COLLECT_LIST); {undoable} cannot, so they apply to a stream only (as in "
                "ksqlDB)")

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if self.per_record:
            return self.changes(*self.fold_records(scope, frame), keep_unchanged=True)
        return self.changes(*self.fold(scope, frame))

    def _keyed(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows with a group key (the others are dropped and counted in the log)."""
        missing = [c for c in self.keys + tuple(c for _, a in self.aggs for c in a.reads)
                   if c not in frame.columns]
        if missing:
            raise OperatorError(f"{scope.where(self.name)}: column(s) {missing} are not in the data")
        keyed = without_nulls(frame, self.keys)
        if len(keyed) < len(frame):
            log.warning("%s.%s batch %d: %d row(s) with a null group key dropped", scope.pipeline,
                        self.name, scope.batch_id, len(frame) - len(keyed))
        return keyed

    def fold_records(self, scope: BatchScope, frame: pd.DataFrame) -> tuple[list, list[tuple]]:
        """:meth:`fold` record by record: per input row (in order), its group key and
        ``(old values or None, new values, visible)`` just before and after it."""
        keyed = self._keyed(scope, frame)
        if keyed.empty:
            return [], []
        row_keys = row_keys_of(keyed, self.keys)
        store = scope.store.operator(self.name, initial=None)
        unique = list(dict.fromkeys(row_keys))
        stored = {key: old or {"acc": {}, "visible": False}
                  for key, old in zip(unique, store.get_values(unique))}
        accs = {key: dict(state["acc"]) for key, state in stored.items()}
        signs = keyed[SIGN_COLUMN].tolist() if self.retracting else [1] * len(keyed)
        inputs = {name: agg.row_values(keyed) for name, agg in self.aggs}
        afters = []
        for position, key in enumerate(row_keys):
            acc = accs[key]
            for name, agg in self.aggs:
                column = inputs[name]
                value = None if column is None else column[position]
                missing = column is not None and agg.is_null(value)
                acc[name] = agg.combine(acc.get(name),
                                        agg.record_partial(value, missing, signs[position]))
            afters.append(self._values(dict(acc)))
        visible = self._passes(scope, row_keys, afters)  # HAVING, row by row
        shown = {key: bool(state.get("visible")) for key, state in stored.items()}
        values = {key: self._values(state["acc"]) for key, state in stored.items()}
        befores = []
        for key, after, seen in zip(row_keys, afters, visible):
            befores.append(values[key] if shown[key] else None)
            shown[key], values[key] = bool(seen), after
        store.set_values(unique, [{"acc": accs[key], "visible": shown[key]} for key in unique])
        return self._one_per_update(keyed, row_keys, list(zip(befores, afters, visible)))

    def _one_per_update(self, keyed: pd.DataFrame, row_keys: list,
                        folded: list[tuple]) -> tuple[list, list[tuple]]:
        """:meth:`fold_records`' changes with each update of a table whose old row (-1) and new
        row (+1) fall in one group as one change, from the group before the old row left to
        after the new one joined: Kafka Streams (KIP-904) sends such an update as one record,
        so ksqlDB emits one row for it (two groups: two rows, the one it left first)."""
        if not self.retracting or CHANGE_NO_COLUMN not in keyed.columns:
            return row_keys, folded
        changes, signs = keyed[CHANGE_NO_COLUMN].tolist(), keyed[SIGN_COLUMN].tolist()
        keys: list = []
        merged: list[tuple] = []
        for position, (key, (old, new, shown)) in enumerate(zip(row_keys, folded)):
            if position and changes[position] == changes[position - 1] \
                    and signs[position - 1] < 0 < signs[position] and row_keys[position - 1] == key:
                old = merged.pop()[0]  # the pair's first row: its group as it was before
                keys.pop()
            keys.append(key)
            merged.append((old, new, shown))
        return keys, merged

    def fold(self, scope: BatchScope, frame: pd.DataFrame) -> tuple[list, list[tuple]]:
        """Fold the batch into the state: the group keys it touched, and per key ``(old values
        or None, new values, visible)``."""
        keyed = self._keyed(scope, frame)
        if keyed.empty:
            return [], []
        if self.retracting:
            partials = {name: agg.signed_partial(keyed, list(self.keys), SIGN_COLUMN)
                        for name, agg in self.aggs}
        else:
            groups = keyed.groupby(list(self.keys), sort=False)
            partials = {name: agg.partial(groups) for name, agg in self.aggs}
        index = next(iter(partials.values())).index
        group_keys = index.tolist()
        # Plain lists by position: a Series lookup per key (a MultiIndex search for several
        # group columns) made this loop the slowest part of a windowed batch.
        aligned = {name: p if p.index.equals(index) else p.reindex(index) for name, p in partials.items()}
        columns = {name: p.tolist() for name, p in aligned.items()}
        store = scope.store.operator(self.name, initial=None)
        previous = store.get_values(group_keys)
        before: list[Mapping[str, Any] | None] = []
        after: list[Mapping[str, Any]] = []
        states: list[dict[str, Any]] = []
        # A key seen for the first time takes its partials as they are when every aggregate's
        # accumulator is its result (count, sum, min, max, latest): no combine() call per value.
        firsts = ({name: _without_nan(values) if aligned[name].hasnans else values
                   for name, values in columns.items()} if self._direct else None)
        for position, old in enumerate(previous):
            if old is None and firsts is not None:
                acc = {name: values[position] for name, values in firsts.items()}
                before.append(None)
                after.append(acc)
                states.append({"acc": acc, "visible": True})
                continue
            old_acc = (old or {}).get("acc", {})
            acc = {name: agg.combine(old_acc.get(name), columns[name][position])
                   for name, agg in self.aggs}
            before.append(self._values(old_acc) if old and old.get("visible") else None)
            after.append(self._values(acc))
            states.append({"acc": acc, "visible": True})
        visible = self._passes(scope, group_keys, after)
        for state, shown in zip(states, visible):
            state["visible"] = bool(shown)
        store.set_values(group_keys, states)
        return group_keys, list(zip(before, after, visible))

    @cached_property
    def _names(self) -> list[str]:
        return [name for name, _ in self.aggs]

    @cached_property
    def _direct(self) -> bool:
        """Whether every accumulator is its own result and starts as the first partial."""
        return all(agg.kind in _DIRECT_KINDS for _, agg in self.aggs)

    def _values(self, acc: Mapping[str, Any]) -> Mapping[str, Any]:
        if self._direct and list(acc) == self._names:
            return acc  # read only: the next fold builds a new accumulator
        return {name: agg.result(acc.get(name)) for name, agg in self.aggs}

    def _passes(self, scope: BatchScope, keys: list, values: list[Mapping[str, Any]]) -> list[bool]:
        if self.having is None:
            return [True] * len(keys)
        frame = pd.DataFrame(values)
        for position, column in enumerate(self.keys):
            frame[column] = [key[position] if len(self.keys) > 1 else key for key in keys]
        return having_mask(self.having, frame, scope.where(self.name))

    def changes(self, keys: list, folded: list[tuple], keep_unchanged: bool = False) -> pd.DataFrame:
        """The change rows of a :meth:`fold`: one per key whose visible value changed (with
        ``keep_unchanged``, also those whose value did not), with key columns, new values,
        ``_change`` and ``_old``."""
        kept = [(key, old, new, shown) for key, (old, new, shown) in zip(keys, folded)
                # hidden before and after, or shown and unchanged: nothing a reader could see
                if not (old is None and not shown)
                and (keep_unchanged or not (shown and old == new))]
        frame = self._rows([key for key, *_ in kept],
                           [new if shown else None for _, _, new, shown in kept])
        # object columns: with no rows they are Arrow's null type, which a distributed stage
        # unifies with another task's text (an empty list made them doubles, which it cannot)
        frame[CHANGE_COLUMN] = pd.Series(
            ["delete" if not shown else "insert" if old is None else "update"
             for _, old, _, shown in kept], index=frame.index, dtype=object)
        frame[OLD_COLUMN] = pd.Series([None if old is None else json.dumps(old, default=str)
                                       for _, old, _, _ in kept], index=frame.index, dtype=object)
        return frame

    def inserts(self, keys: list, accumulators: list[Mapping[str, Any]]) -> pd.DataFrame:
        """Change rows inserting ``keys`` with the values of their accumulators (windows that
        close and show their final values for the first time)."""
        frame = self._rows(keys, [self._values(acc) for acc in accumulators])
        frame[CHANGE_COLUMN] = "insert"
        frame[OLD_COLUMN] = None
        return frame

    def _rows(self, keys: list, values: list[Mapping[str, Any] | None]) -> pd.DataFrame:
        """Key columns and one column per aggregate (``None`` values: a deleted key)."""
        if len(self.keys) == 1:
            columns = [keys]
        else:  # tuple keys: one column per position
            columns = [list(part) for part in zip(*keys)] if keys else [[] for _ in self.keys]
        # no rows: key columns of no type (not doubles), as the other tasks' keys may be text
        frame = pd.DataFrame(dict(zip(self.keys, columns)), dtype=None if keys else object)
        for name, agg in self.aggs:  # nullable dtypes: a null value must not turn longs to doubles
            column = [None if row is None else row[name] for row in values]
            frame[name] = nullable_array(agg, column)
        return frame


_DIRECT_KINDS = frozenset({"count", "sum", "min", "max", "latest", "latest_nulls"})


def having_mask(having: Callable[[pd.DataFrame], Any], frame: pd.DataFrame,
                where: str) -> list[bool]:
    """Whether each row of ``frame`` passes ``having`` (null fails); its error names ``where``."""
    try:
        return [bool(v) for v in pd.Series(having(frame)).fillna(False)]
    except Exception as exc:
        raise OperatorError(f"{where}: HAVING failed: {type(exc).__name__}: {exc}") from exc


def row_keys_of(frame: pd.DataFrame, keys: tuple[str, ...]) -> list:
    """Each row's key as Python values: the value for one key column, else the tuple."""
    return [tuple(to_python(v) for v in row) if len(keys) > 1 else to_python(row[0])
            for row in frame[list(keys)].itertuples(index=False)]


def without_nulls(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``frame`` without the rows that have a null in ``columns``; the frame itself, not a copy
    of it, when there are none (the usual case, and a copy of a large batch costs)."""
    columns = list(columns)
    return frame.dropna(subset=columns) if frame[columns].isna().to_numpy().any() else frame


def _without_nan(values: list) -> list:
    """Partials with NaN or NA (a group whose values were all null) as None, as combine()
    gives."""
    return [None if is_missing(value) else value for value in values]


# Dtypes fixed by the aggregate's kind; other kinds take the dtype their values infer.
_KIND_DTYPES = {"count": "Int64", "avg": "Float64", "collect_list": object, "collect_set": object,
                "udf": object}


def nullable_array(agg: Agg, values: list) -> pd.api.extensions.ExtensionArray:
    """``values`` as an array of the aggregate's nullable type: fixed by its kind or its input's
    declared type (:meth:`Agg.typed`), else inferred from the values (once). Values pandas
    cannot type, such as lists of unequal lengths, stay Python objects."""
    dtype = _KIND_DTYPES.get(agg.kind, agg.dtype or (None if values else object))
    try:
        return pd.array(values, dtype=dtype)
    except (TypeError, ValueError):
        if dtype is not None:
            raise
        return pd.array(values, dtype=object)
