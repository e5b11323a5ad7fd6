"""What a batch's stages produced, as the driver holds it until the batch is committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial, reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from state import (
    STATE_SCHEMA,
    ChangedState,
    EntryColumns,
    SparkStateRows,
    WrittenState,
    value_columns_from_json,
)

from .tasks import StateFiles


@dataclass
class StageOutput:
    """What a batch's stages produced: its output rows and changed state (lazy, persisted
    DataFrames), and counts collected from the tasks."""

    rows: DataFrame
    state: list[DataFrame] = field(default_factory=list)
    #: where the tasks wrote their changed state, when they did (see StateFiles) …
    state_files: StateFiles | None = None
    written: list[str] = field(default_factory=list)  # … and the files' add actions
    #: per sink whose files every task wrote: their add actions (see FileSink.file_target)
    sink_files: dict[str, list[str]] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    keys: int = 0
    persisted: list[DataFrame] = field(default_factory=list)
    wake_at: int | None = None  # when a batch with no input would next fire a timer

    def changed_state(self, spark: SparkSession, entries: dict[str, EntryColumns]) -> ChangedState:
        """Every stage's changed state rows: ``_state``'s columns but the checkpoint id, or
        the files the tasks wrote of them. ``entries``: the columns of each state of many rows
        per key, where its rows' ``entry`` and (a typed value's JSON) ``value`` go."""
        if self.state_files is not None:
            if self.state_files.checkpoint_id is None or self.state:  # see writes_state_files
                raise RuntimeError("a batch's changed state is both in files and in rows")
            return WrittenState(self.state_files.checkpoint_id, tuple(self.written))
        columns = StructType([f for f in STATE_SCHEMA if f.name != "checkpoint_id"])
        rows = reduce(partial(DataFrame.unionByName, allowMissingColumns=True), self.state,
                      spark.createDataFrame([], columns))
        if "entry" in rows.columns:
            rows = _entries_in_their_columns(rows, entries)
        return SparkStateRows(rows)

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame``, persisted until :meth:`release` (it is read more than once)."""
        self.persisted.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return self.persisted[-1]

    def release(self) -> None:
        for frame in self.persisted:
            frame.unpersist()


def _entries_in_their_columns(rows: DataFrame, entries: dict[str, EntryColumns]) -> DataFrame:
    """``rows`` with each entry state's ``entry`` in its entry column and its typed value
    (JSON in ``value``) in its value columns; ``value`` left to untyped states' rows."""
    typed = [name for name, columns in entries.items() if columns.fields]
    for name, columns in entries.items():
        mine = F.col("operator") == name
        rows = rows.withColumn(columns.entry, F.when(mine, F.col("entry")))
        if columns.fields:
            for column, parsed in value_columns_from_json(columns).items():
                rows = rows.withColumn(column, F.when(mine, parsed))
    if typed:
        rows = rows.withColumn("value", F.when(~F.col("operator").isin(typed), F.col("value")))
    return rows.drop("entry")
