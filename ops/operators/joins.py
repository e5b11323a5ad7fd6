"""Joins. Stream–table: enrich each event with a Delta table's value for the event's key.
Table–table: join two tables' update streams on their key (see :class:`TableTableJoin`).

The table (typically a state table another pipeline materialises) is read at the Delta version
pinned in the batch's plan, so a replayed batch is enriched exactly as the first attempt was:
"the table's current value" means its value when the batch was planned. Only the batch's keys
are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from state import tables

from ..columns import CHANGE_COLUMN, OLD_COLUMN, SOURCE_COLUMN, WRITTEN_COLUMNS
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import to_python
from .base import Operator, StateDeclaration, TableOperator


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
    tagged with its source in ``_source``; all value columns null = the key was deleted).

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

    def __post_init__(self) -> None:
        if self.how not in ("inner", "left", "outer"):
            raise PipelineDefinitionError(
                f"table join how must be 'inner', 'left' or 'outer', not {self.how!r}")

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        sides = {self.left[0]: ("left", self.left[1]), self.right[0]: ("right", self.right[1])}
        if SOURCE_COLUMN not in frame.columns and not frame.empty:
            raise OperatorError(f"{scope.where(self.name)}: this operator joins a merged stream: "
                                "left_table_stream.merge(right_table_stream).join_tables(...)")
        latest = frame.drop_duplicates([SOURCE_COLUMN, *self.keys], keep="last") if len(frame) else frame
        updates: dict[Any, dict[str, Any]] = {}
        for row in latest.to_dict("records"):
            side, columns = sides[row[SOURCE_COLUMN]]
            key = tuple(to_python(row[k]) for k in self.keys)
            values = {c: to_python(row.get(c)) for c in columns}
            deleted = all(v is None or v != v for v in values.values())
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
        return pd.DataFrame(rows, columns=[*self.keys, *self.left[1], *self.right[1], CHANGE_COLUMN,
                                           OLD_COLUMN])

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
