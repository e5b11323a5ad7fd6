"""Stream–table join: enrich each event with a Delta table's value for the event's key.

The table (typically a state table another pipeline materialises) is read at the Delta version
pinned in the batch's plan, so a replayed batch is enriched exactly as the first attempt was:
"the table's current value" means its value when the batch was planned. Only the batch's keys
are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession, functions as F

from state import tables

from .errors import OperatorError, PipelineDefinitionError
from .operators import BatchScope, Operator
from .sources import delta_version

_IN_LIST_LIMIT = 2000
_HIDDEN = ("_batch_id", "_row", "_change", "_old")


@dataclass(frozen=True)
class TableJoin(Operator):
    """``how="left"`` keeps events without a match (table columns null); ``"inner"`` drops them."""

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

    def plan_inputs(self, spark: SparkSession) -> dict[str, tuple[Any, Any]]:
        version = delta_version(self.path, spark)
        if version < 0:  # as in ksqlDB, a join needs its table to exist (and fixes its columns)
            raise OperatorError(f"operator {self.name!r}: the table to join, {self.path}, does "
                                "not exist yet; create it (run the pipeline that writes it) first")
        return {self._pin: (version, version)}

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if self._pin not in scope.inputs:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}: batch "
                                f"{scope.batch_id} was planned before this join existed")
        missing = [c for c in self.on if c not in frame.columns]
        if missing:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}: join "
                                f"column(s) {missing} are not in the stream")
        version = int(scope.inputs[self._pin][1])
        matches = self._lookup(scope, frame, version)
        return frame.merge(matches, on=list(self.on), how=self.how, suffixes=("", "_table"))

    def _lookup(self, scope: BatchScope, frame: pd.DataFrame, version: int) -> pd.DataFrame:
        spark = scope.store.spark
        table = spark.read.format("delta").option("versionAsOf", version).load(self.path)
        wanted = frame[list(self.on)].drop_duplicates()
        if len(self.on) == 1 and len(wanted) <= _IN_LIST_LIMIT:
            table = table.where(F.col(self.on[0]).isin(wanted[self.on[0]].tolist()))
        else:
            table = table.join(F.broadcast(spark.createDataFrame(wanted)), list(self.on), "left_semi")
        keep = [c for c in (self.columns or table.columns) if c not in _HIDDEN and c not in self.on]
        # nullable integer/text dtypes: an event without a match must not turn longs into doubles
        return table.select(*self.on, *keep).toPandas().convert_dtypes(convert_floating=False)
