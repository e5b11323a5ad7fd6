"""Joins. Stream–table: enrich each event with a Delta table's value for the event's key
(:class:`TableJoin`), or with a table this operator keeps from a stream of its updates
(:class:`KeptTableJoin`). Table–table: join two tables' update streams on their key (see
:class:`TableTableJoin`).

The table (typically a state table another pipeline materialises) is read at the Delta version
pinned in the batch's plan, so a replayed batch is enriched exactly as the first attempt was:
"the table's current value" means its value when the batch was planned. Only the batch's keys
are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession

from state.lake import tables

from ..columns import CHANGE_COLUMN, OLD_COLUMN, SOURCE_COLUMN, WRITTEN_COLUMNS
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import NULLABLE_DTYPES, is_missing, to_python
from .base import Operator, StateDeclaration, TableOperator
from .event_time import epoch_ms
from .grouped import row_keys_of, without_nulls


@dataclass(frozen=True)
class TableJoin(Operator):
    """``how="left"`` keeps events without a match (table columns null); ``"inner"`` drops them."""

    needs_spark = True  # looks the table up with Spark

    name: str
    path: str
    on: tuple[str, ...]
    columns: tuple[str, ...] | None = None
    how: str = "left"

    def __post_init__(self) -> None:
        if self.how not in ("left", "inner"):
            raise PipelineDefinitionError(f"join how must be 'left' or 'inner', not {self.how!r}")
        if not self.on:
            raise PipelineDefinitionError("a join needs the key column(s): on=...")

    @property
    def _pin(self) -> str:
        return f"table:{self.name}"

    def declares(self) -> StateDeclaration:
        return StateDeclaration.stateless()  # the table is read as of the plan, never written

    def plan_inputs(self, spark: SparkSession) -> dict[str, tuple[Any, Any]]:
        version = tables.latest_version(self.path, spark)
        if version < 0:  # as in ksqlDB, a join needs its table to exist (and fixes its columns)
            raise OperatorError(f"operator {self.name!r}: the table to join, {self.path}, does "
                                "not exist yet; create it (run the pipeline that writes it) first")
        return {self._pin: (version, version)}

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if self._pin not in scope.inputs:
            raise OperatorError(f"{scope.where(self.name)}: the batch was planned before this "
                                "join existed")
        missing = [c for c in self.on if c not in frame.columns]
        if missing:
            raise OperatorError(f"{scope.where(self.name)}: join column(s) {missing} are not in "
                                "the stream")
        version = int(scope.inputs[self._pin][1])
        matches = self._lookup(scope, frame, version)
        return frame.merge(matches, on=list(self.on), how=self.how, suffixes=("", "_table"))

    def _lookup(self, scope: BatchScope, frame: pd.DataFrame, version: int) -> pd.DataFrame:
        spark = scope.spark
        table = spark.read.format("delta").option("versionAsOf", version).load(self.path)
        table = tables.only_keys(spark, table, frame[list(self.on)].drop_duplicates())
        keep = [c for c in (self.columns or table.columns)
                if c not in WRITTEN_COLUMNS and c not in self.on]
        matches: pd.DataFrame = table.select(*self.on, *keep).toPandas()
        # nullable integer/text dtypes: an event without a match must not turn longs into doubles
        return matches.convert_dtypes(convert_floating=False)


@dataclass(frozen=True)
class TableTableJoin(TableOperator):
    """Join two tables on their key, fed as one merged stream of both tables' updates (each row
    tagged with its source in ``_source``): a changelog's rows (``_change``: ``delete`` deletes
    the key), or a stream of updates' (all value columns null deletes the key).

    Keeps each side's latest row per key in state and emits a change of the joined table
    whenever either side changes: ``inner`` shows a key while both sides have it, ``left`` while
    the left side has it (right columns null until the right side arrives), ``outer`` while
    either side has it (the other side's columns null).
    """

    name: str
    keys: tuple[str, ...]
    left: tuple[str, tuple[str, ...]]    # (source name, value columns)
    right: tuple[str, tuple[str, ...]]
    how: str = "inner"
    #: declared kinds (``long``, ``string``…) of value columns: the joined table's columns keep
    #: their types whatever a batch's values (a column of nulls only, an integer beside a null)
    kinds: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.how not in ("inner", "left", "outer"):
            raise PipelineDefinitionError(
                f"table join how must be 'inner', 'left' or 'outer', not {self.how!r}")

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        sides = {self.left[0]: ("left", self.left[1]), self.right[0]: ("right", self.right[1])}
        if SOURCE_COLUMN not in frame.columns and not frame.empty:
            raise OperatorError(f"{scope.where(self.name)}: this operator joins a merged stream: "
                                "left_table_stream.merge(right_table_stream).join_tables(...)")
        latest = without_nulls(frame, self.keys) if len(frame) else frame
        latest = latest.drop_duplicates([SOURCE_COLUMN, *self.keys], keep="last") if len(latest) else latest
        updates: dict[Any, dict[str, Any]] = {}
        for row in typed(latest, dict(self.kinds)).to_dict("records"):
            side, columns = sides[row[SOURCE_COLUMN]]
            key = tuple(to_python(row[k]) for k in self.keys)
            values = {c: storable(row.get(c)) for c in columns}
            change = row.get(CHANGE_COLUMN)  # a changelog's row says; an update of nulls deletes
            deleted = change == "delete" if isinstance(change, str) else \
                all(v is None for v in values.values())
            updates.setdefault(key, {})[side] = None if deleted else values
        store = scope.store.operator(self.name, initial=None)
        keys = list(updates)
        rows = []
        for key, old in zip(keys, store.get_values(keys)):
            old = old or {"left": None, "right": None}
            new = {**old, **updates[key]}
            store.set(key, new)
            before, after = self._joined(old), self._joined(new)
            if before == after:
                continue
            change = "delete" if after is None else ("insert" if before is None else "update")
            shown = after or {c: None for c in (*self.left[1], *self.right[1])}
            rows.append({**dict(zip(self.keys, key)), **shown, CHANGE_COLUMN: change,
                         OLD_COLUMN: None if before is None else json.dumps(before, default=str)})
        out = pd.DataFrame(rows, columns=[*self.keys, *self.left[1], *self.right[1], CHANGE_COLUMN,
                                          OLD_COLUMN])
        return typed(out, dict(self.kinds))

    def state_key(self, values: tuple[Any, ...]) -> Any:
        return values  # a tuple even for one key column (see apply)

    def _joined(self, sides: dict) -> dict | None:
        left, right = sides.get("left"), sides.get("right")
        shown = {"inner": left is not None and right is not None, "left": left is not None,
                 "outer": left is not None or right is not None}[self.how]
        if not shown:
            return None
        return {**(left or {c: None for c in self.left[1]}),
                **(right or {c: None for c in self.right[1]})}


@dataclass(frozen=True)
class KeptTableJoin(Operator):
    """A stream joined to a table this operator keeps from the table's updates, both fed as one
    merged stream (ksqlDB's stream–table join over a TABLE declared on a topic).

    Rows from source ``table[0]`` update the table: each is its key's new row (value columns
    ``table[1]``), a row whose values are all null deletes the key; they emit nothing. Every
    other row is emitted with the table's values for its key (in column ``on``) as they stand
    when the row is processed. Updates apply in their arrival order (a topic's offsets). When
    ``times`` names the stream's and the table's event-time columns, events are taken between
    them by time, as Kafka Streams takes the input whose next record is earlier (the table on a
    tie; a row without a time, such as a tombstone, has the time of the row before it); else a
    batch's updates all come before its events. ``how="inner"``
    drops events without a row; ``"left"`` keeps them with nulls. A table column the stream
    also has is emitted as ``renamed``'s name for it.
    """

    name: str
    on: str
    table: tuple[str, tuple[str, ...]]
    how: str = "left"
    renamed: tuple[tuple[str, str], ...] = ()
    times: tuple[str, str] | None = None
    kinds: tuple[tuple[str, str], ...] = ()  # declared kinds of the table's value columns

    def __post_init__(self) -> None:
        if self.how not in ("left", "inner"):
            raise PipelineDefinitionError(f"join how must be 'left' or 'inner', not {self.how!r}")

    def declares(self) -> StateDeclaration:
        return StateDeclaration.keyed((self.on,), self.name)

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        source, values = self.table
        if SOURCE_COLUMN not in frame.columns:
            if not frame.empty:
                raise OperatorError(f"{scope.where(self.name)}: this operator joins a merged "
                                    "stream: events.merge(table_updates).join_kept_table(...)")
            return frame
        # a batch may hold rows of one input only: the other's columns are then missing
        frame = with_columns(frame, (self.on, *values, *(self.times or ())))
        is_update = (frame[SOURCE_COLUMN] == source).to_numpy()
        updates = without_nulls(frame[is_update], (self.on,))
        events = frame[~is_update]
        store = scope.store.operator(self.name, initial=None)
        event_keys, update_keys = row_keys_of(events, (self.on,)), row_keys_of(updates, (self.on,))
        keys = list(dict.fromkeys(event_keys + update_keys))
        stored = dict(zip(keys, store.get_values(keys)))  # the table's rows before the batch
        found, table = self._found(events, event_keys, updates, update_keys, stored)
        for key in dict.fromkeys(update_keys):
            if table[key] is None:
                store.delete(key)
            else:
                store.set(key, table[key])
        return self._emitted(events, found, values)

    def _found(self, events: pd.DataFrame, keys: list, updates: pd.DataFrame, update_keys: list,
               stored: dict) -> tuple[list, dict]:
        """The table's row (a dict, or ``None``) each event (of key ``keys``) finds, in the
        events' order, and the table after the batch's updates (applied in their arrival order,
        as a topic's)."""
        rows = self._rows(updates)
        table = dict(stored)
        if self.times is None:  # the batch's updates first
            table.update(zip(update_keys, rows))
            return [table.get(key) for key in keys], table
        # Kafka Streams' choice between two inputs: the one whose next record is earlier (the
        # table on a tie); each keeps its own order. A row without a time (a tombstone) takes
        # the time of the row before it in its input.
        update_ms = _carried_ms(updates[self.times[1]])
        event_ms = _carried_ms(events[self.times[0]])
        found: list = []
        position = 0
        for key, ms in zip(keys, event_ms):
            while position < len(rows) and update_ms[position] <= ms:
                table[update_keys[position]] = rows[position]
                position += 1
            found.append(table.get(key))
        table.update(zip(update_keys[position:], rows[position:]))
        return found, table

    def _rows(self, updates: pd.DataFrame) -> list[dict | None]:
        """Each update's row, ``None`` for a deletion (all its values null)."""
        rows = []
        for record in typed(updates[list(self.table[1])], dict(self.kinds)).to_dict("records"):
            row = {c: storable(v) for c, v in record.items()}
            rows.append(None if all(v is None for v in row.values()) else row)
        return rows

    def _emitted(self, events: pd.DataFrame, found: list, values: tuple[str, ...]) -> pd.DataFrame:
        renamed = dict(self.renamed)
        table_only = [c for c in values if c not in renamed and c in events.columns]
        out = events.drop(columns=[*table_only, SOURCE_COLUMN])
        matched = [row is not None for row in found]
        for column in values:
            out[renamed.get(column, column)] = [None if row is None else row[column] for row in found]
        if self.how == "inner":
            out = out[np.asarray(matched, dtype=bool)]
        kinds = {renamed.get(c, c): kind for c, kind in self.kinds}
        return typed(out, kinds)


def with_columns(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with every one of ``columns``, those it lacked all null."""
    missing = [c for c in dict.fromkeys(columns) if c not in frame.columns]
    return frame.assign(**dict.fromkeys(missing)) if missing else frame


@dataclass(frozen=True)
class KeyColumn:
    """A map that puts each row's join key in one column, ``into``: ``key``'s value for the rows
    of ``source`` (a merged stream's rows carry their source's name in ``_source``)."""

    source: str
    key: str
    into: str

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        frame = with_columns(frame, (self.key, self.into))
        ours = frame[SOURCE_COLUMN] == self.source
        return frame.assign(**{self.into: frame[self.key].where(ours, frame[self.into])})


def _carried_ms(times: pd.Series) -> np.ndarray:
    """Event times in epoch ms, a missing one taking the time before it (the first ones: the
    earliest there is)."""
    stamps = pd.to_datetime(times, utc=True).ffill()
    ms = np.full(len(stamps), np.iinfo(np.int64).min, dtype="int64")
    known = stamps.notna().to_numpy()
    ms[known] = epoch_ms(stamps[known])
    return ms


def storable(value: Any) -> Any:
    """A row's value as its state keeps it: a Python scalar (JSON-encodable), ``None`` for
    every kind of null, a timestamp as ISO-8601 text (:func:`typed` makes it one again)."""
    if value is pd.NaT or is_missing(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return to_python(value)


def typed(frame: pd.DataFrame, kinds: dict[str, str]) -> pd.DataFrame:
    """``frame`` with the columns ``kinds`` declares (``long``, ``string``…) in their nullable
    dtypes, so a column of nulls only, or integers beside a null, keeps its declared type."""
    present = {c: kind for c, kind in kinds.items() if c in frame.columns and kind in NULLABLE_DTYPES}
    if not present:
        return frame
    return frame.assign(**{c: pd.to_datetime(frame[c], utc=True, format="ISO8601")
                           if kind == "timestamp" else frame[c].astype(NULLABLE_DTYPES[kind])
                           for c, kind in present.items()})
