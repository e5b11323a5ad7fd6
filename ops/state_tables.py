"""Keyed aggregation into a state table (ksqlDB's ``CREATE TABLE … AS SELECT … GROUP BY``).

``stream.group_by("title").agg(tickets_sold=sp.count("ticket_total_value"))`` keeps one
accumulator per key in managed state and emits, per batch, one change row per key whose
aggregate changed: the new values, the old ones (``_old``, JSON) and ``_change``
(``insert``/``update``/``delete``). ``.write.to_table(name)`` keeps the table's latest value per
key in a Delta table and every change, in order, in ``<name>_changelog``; the table can be rebuilt
from the changelog.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Mapping

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import SparkSession, Window, functions as F

from state import PipelineLayout, tables

from ._context import RunContext
from .aggregates import Agg, to_python
from .errors import OperatorError, PipelineDefinitionError
from .operators import BatchScope, Operator
from .sinks import BATCH_COLUMN, ROW_COLUMN, Sink

log = logging.getLogger(__name__)

CHANGE_COLUMN = "_change"
OLD_COLUMN = "_old"


@dataclass(frozen=True)
class GroupAggregate(Operator):
    """Aggregates ``aggs`` (output name -> :class:`Agg`) per value of ``keys``.

    Rows whose group key is null are dropped and counted in the log (ksqlDB drops them too).
    ``having(values) -> bool Series`` hides keys that fail it: a key that stops passing is
    deleted from the table (a tombstone), as in ksqlDB.
    """

    name: str
    keys: tuple[str, ...]
    aggs: tuple[tuple[str, Agg], ...]
    having: Callable[[pd.DataFrame], Any] | None = None

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys

    def __post_init__(self) -> None:
        if not self.keys:
            raise PipelineDefinitionError("group_by needs at least one column")
        names = [name for name, _ in self.aggs]
        clash = set(names) & set(self.keys) or {n for n in names if names.count(n) > 1}
        if clash or not names:
            raise PipelineDefinitionError(
                f"agg needs distinct output names that are not group columns; got {names}")

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        return self.changes(*self.fold(scope, frame))

    def fold(self, scope: BatchScope, frame: pd.DataFrame) -> tuple[list, list[tuple]]:
        """Fold the batch into the state: the group keys it touched, and per key ``(old values
        or None, new values, visible)``."""
        missing = [c for c in self.keys + tuple(a.column for _, a in self.aggs if a.column)
                   if c not in frame.columns]
        if missing:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}: "
                                f"column(s) {missing} are not in the data")
        keyed = without_nulls(frame, self.keys)
        if len(keyed) < len(frame):
            log.warning("%s.%s batch %d: %d row(s) with a null group key dropped", scope.pipeline,
                        self.name, scope.batch_id, len(frame) - len(keyed))
        if keyed.empty:
            return [], []
        groups = keyed.groupby(list(self.keys), sort=False)
        partials = {name: agg.partial(groups) for name, agg in self.aggs}
        index = next(iter(partials.values())).index
        group_keys = index.tolist()
        # Plain lists by position: a Series lookup per key (a MultiIndex search for several
        # group columns) made this loop the slowest part of a windowed batch.
        columns = {name: (p if p.index.equals(index) else p.reindex(index)).tolist()
                   for name, p in partials.items()}
        store = scope.store.operator(self.name, initial=None)
        previous = store.get_values(group_keys)
        before, after, states = [], [], []
        # A key seen for the first time takes its partials as they are when every aggregate's
        # accumulator is its result (count, sum, min, max, latest): no combine() call per value.
        firsts = ({name: _without_nan(values) for name, values in columns.items()}
                  if self._direct else None)
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

    def _passes(self, scope: BatchScope, keys: list, values: list[dict]) -> list[bool]:
        if self.having is None:
            return [True] * len(keys)
        frame = pd.DataFrame(values)
        for position, column in enumerate(self.keys):
            frame[column] = [key[position] if len(self.keys) > 1 else key for key in keys]
        try:
            return [bool(v) for v in pd.Series(self.having(frame)).fillna(False)]
        except Exception as exc:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}, batch "
                                f"{scope.batch_id}: HAVING failed: {type(exc).__name__}: {exc}") from exc

    def changes(self, keys: list, folded: list[tuple]) -> pd.DataFrame:
        """The change rows of a :meth:`fold`: one per key whose visible value changed, with key
        columns, new values, ``_change`` and ``_old``."""
        kept = [(key, old, new, shown) for key, (old, new, shown) in zip(keys, folded)
                # hidden before and after, or shown and unchanged: nothing a reader could see
                if not (old is None and not shown) and not (shown and old == new)]
        frame = self._rows([key for key, *_ in kept],
                           [new if shown else None for _, _, new, shown in kept])
        frame[CHANGE_COLUMN] = ["delete" if not shown else "insert" if old is None else "update"
                                for _, old, _, shown in kept]
        frame[OLD_COLUMN] = [None if old is None else json.dumps(old, default=str)
                             for _, old, _, _ in kept]
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
        frame = pd.DataFrame(dict(zip(self.keys, columns)))
        for name, agg in self.aggs:  # nullable dtypes: a null value must not turn longs to doubles
            column = [None if row is None else row[name] for row in values]
            frame[name] = nullable_array(agg, column)
        return frame


_DIRECT_KINDS = frozenset({"count", "sum", "min", "max", "latest"})


def without_nulls(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """``frame`` without the rows that have a null in ``columns``; the frame itself, not a copy
    of it, when there are none (the usual case, and a copy of a large batch costs)."""
    columns = list(columns)
    return frame.dropna(subset=columns) if frame[columns].isna().to_numpy().any() else frame


def _without_nan(values: list) -> list:
    """Partials with NaN (a group whose values were all null) as None, as combine() gives."""
    return [None if isinstance(value, float) and value != value else value for value in values]


# Dtypes fixed by the aggregate's kind; other kinds take the dtype their values infer.
_KIND_DTYPES = {"count": "Int64", "avg": "Float64", "collect_list": object, "udf": object}


def nullable_array(agg: Agg, values: list):
    """``values`` as an array of the aggregate's nullable type: fixed by its kind, else inferred
    from the values (once). Values pandas cannot type, such as lists of unequal lengths, stay
    Python objects."""
    dtype = _KIND_DTYPES.get(agg.kind, None if values else object)
    try:
        return pd.array(values, dtype=dtype)
    except (TypeError, ValueError):
        if dtype is not None:
            raise
        return pd.array(values, dtype=object)


@dataclass(frozen=True)
class LatestByKey(Operator):
    """A table from a stream of updates (ksqlDB's ``CREATE TABLE`` over a topic): each record
    sets its key's row; a record whose value columns are all null is a tombstone and deletes
    the key. Within a batch the last record per key wins."""

    name: str
    keys: tuple[str, ...]

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        missing = [c for c in self.keys if c not in frame.columns]
        if missing:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}: key "
                                f"column(s) {missing} are not in the data")
        values = [c for c in frame.columns if c not in self.keys and not c.startswith("_")]
        latest = without_nulls(frame, self.keys).drop_duplicates(list(self.keys), keep="last")
        keys = [tuple(to_python(v) for v in row) if len(self.keys) > 1 else to_python(row[0])
                for row in latest[list(self.keys)].itertuples(index=False)]
        store = scope.store.operator(self.name, initial=None)
        previous = store.get_values(keys)
        rows = []
        for key, old, record in zip(keys, previous, latest[values].to_dict("records")):
            new = {c: to_python(v) for c, v in record.items()}
            tombstone = all(v is None or v != v for v in new.values())
            if tombstone and old is None:
                continue
            parts = key if len(self.keys) > 1 else (key,)
            change = "delete" if tombstone else ("insert" if old is None else "update")
            store.delete(key) if tombstone else store.set(key, new)
            rows.append({**dict(zip(self.keys, parts)), **({c: None for c in values} if tombstone else new),
                         CHANGE_COLUMN: change, OLD_COLUMN: None if old is None else json.dumps(old, default=str)})
        return pd.DataFrame(rows, columns=[*self.keys, *values, CHANGE_COLUMN, OLD_COLUMN])


@dataclass(frozen=True)
class GroupedStream:
    """``stream.group_by(...)``: waiting for ``.agg(...)``."""

    stream: Any
    keys: tuple[str, ...]

    def window(self, window: Any) -> "WindowedStream":
        """Aggregate per key and event-time window: ``sp.tumbling("ts", "1min")``,
        ``sp.hopping("ts", "10min", "5min", grace="30s")`` or ``sp.session("ts", "5min")``."""
        return WindowedStream(self.stream, self.keys, window)

    def agg(self, having: Callable[[pd.DataFrame], Any] | None = None, name: str | None = None,
            **aggs: Agg):
        """The state table's change stream: ``agg(total=sp.sum_("x"), n=sp.count())``."""
        _check_aggs(aggs)
        op = GroupAggregate(name=self.stream._name_for(name, "aggregate"),
                            keys=self.keys, aggs=tuple(aggs.items()), having=having)
        return self.stream.via(op)


@dataclass(frozen=True)
class WindowedStream:
    """``stream.group_by(...).window(sp.tumbling(...))``: waiting for ``.agg(...)``."""

    stream: Any
    keys: tuple[str, ...]
    window: Any

    def agg(self, emit: str = "changes", name: str | None = None, **aggs: Agg):
        """Aggregates per key and window; ``emit="final"`` emits each window once, closed."""
        from .windows import Session, SessionAggregate, WindowAggregate

        _check_aggs(aggs)
        kind = SessionAggregate if isinstance(self.window, Session) else WindowAggregate
        op = kind(name=self.stream._name_for(name, "window"), keys=self.keys,
                  window=self.window, aggs=tuple(aggs.items()), emit=emit)
        return self.stream.via(op)


def _check_aggs(aggs: Mapping[str, Any]) -> None:
    for out, agg in aggs.items():
        if not isinstance(agg, Agg):
            raise PipelineDefinitionError(
                f"agg {out}= needs an aggregate such as sp.count() or sp.sum_('x'), "
                f"not {type(agg).__name__}")


def _typed_like(spark: SparkSession, frame, path: str):
    """``frame`` with the column types of the table at ``path`` (a batch whose values are all
    null, e.g. only deletes, must not change them); ``_old`` is always text."""
    frame = frame.withColumn(OLD_COLUMN, F.col(OLD_COLUMN).cast("string"))
    if not tables.exists(spark, path):
        return frame
    types = {field.name: field.dataType for field in tables.read(spark, path).schema.fields}
    return frame.select(*(F.col(c).cast(types[c]).alias(c) if c in types else F.col(c)
                          for c in frame.columns))


@dataclass(frozen=True)
class TableSink(Sink):
    """A state table: latest value per key in ``<name>``, every change in ``<name>_changelog``.

    Both writes are idempotent per batch: the changelog append carries Delta's transaction id,
    and the upsert only applies a change from a batch at least as new as the row it replaces.
    """

    name: str
    keys: tuple[str, ...]

    def location(self, layout: PipelineLayout) -> str:
        return layout.table(self.name)

    def changelog(self, layout: PipelineLayout) -> str:
        return layout.table(f"{self.name}_changelog")

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        rows = frame.reset_index(drop=True).assign(**{BATCH_COLUMN: batch_id,
                                                      ROW_COLUMN: range(len(frame))})
        changes = _typed_like(ctx.spark, tables.to_frame(ctx.spark, rows), self.changelog(ctx.layout))
        tables.append(changes, self.changelog(ctx.layout),
                      txn=ctx.txn(f"table/{self.name}", batch_id))
        self._upsert(ctx.spark, ctx.layout, changes.drop(OLD_COLUMN, ROW_COLUMN))

    def _upsert(self, spark: SparkSession, layout: PipelineLayout, changes) -> None:
        path = self.location(layout)
        if not tables.exists(spark, path):
            tables.ensure(spark, path, changes.drop(CHANGE_COLUMN).schema)
        on = " AND ".join(f"t.`{k}` = c.`{k}`" for k in self.keys)
        newer = f"c.{BATCH_COLUMN} >= t.{BATCH_COLUMN}"
        values = {f"`{c}`": f"c.`{c}`" for c in changes.columns if c != CHANGE_COLUMN}
        (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("c"), on)
         .whenMatchedDelete(f"{newer} AND c.{CHANGE_COLUMN} = 'delete'")
         .whenMatchedUpdate(newer, values)
         .whenNotMatchedInsert(f"c.{CHANGE_COLUMN} != 'delete'", values)
         .execute())

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        tables.delete_where(ctx.spark, self.changelog(ctx.layout), F.col(BATCH_COLUMN) > batch_id)
        if tables.exists(ctx.spark, self.changelog(ctx.layout)):
            self.rebuild(ctx.spark, ctx.layout)

    def latest(self, changes):
        """The table that ``changes`` (changelog rows, as a Spark DataFrame) leave behind: the
        last change per key, deleted keys dropped, with each row's ``_batch_id``."""
        order = Window.partitionBy(*self.keys).orderBy(F.col(BATCH_COLUMN).desc(),
                                                       F.col(ROW_COLUMN).desc())
        return (changes.withColumn("_rank", F.row_number().over(order)).where("_rank = 1")
                .where(F.col(CHANGE_COLUMN) != "delete")
                .drop("_rank", CHANGE_COLUMN, OLD_COLUMN, ROW_COLUMN))

    def rebuild(self, spark: SparkSession, layout: PipelineLayout) -> int:
        """Recreate the table from its changelog (the latest change per key, deletes dropped),
        in one overwrite commit; returns the rows. Use it when the table was lost or damaged."""
        latest = self.latest(tables.read(spark, self.changelog(layout))).localCheckpoint()
        latest.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            self.location(layout))
        count = latest.count()
        log.info("rebuilt %s from its changelog: %d rows", self.location(layout), count)
        return count

    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """The table's current rows, ordered by key."""
        if not tables.exists(spark, self.location(layout)):
            return pd.DataFrame()
        return tables.read(spark, self.location(layout)).orderBy(*self.keys).toPandas()
