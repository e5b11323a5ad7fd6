"""What a stage's tasks return to the driver: one frame of rows, each of one kind.

A task returns its output rows (``rows``: Arrow IPC cells), its changed state (``state``: the
columns of ``_state``), the ``_state`` files it wrote (``file``), the files it wrote for a sink
(``sink``), its counts (``done``) or its error (``error``). They travel as one Spark frame of
:data:`STAGE_SCHEMA` (what Arrow carries from the Python workers to the JVM, one per task), in
which each kind has columns of its own and leaves the others null (nulls cost Arrow a bit per
row). The kinds the driver collects are typed here: :class:`Done`, :class:`Failed`,
:class:`FileWritten`, :class:`SinkWritten`, read back into a :class:`Summary`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

#: a stage's output rows, ``rows`` only: Arrow IPC of up to a chunk of them per cell
ROWS_FIELDS = [StructField("payload", BinaryType(), True)]
#: a changed state row, ``state`` only: ``_state``'s columns but the checkpoint id
STATE_FIELDS = [StructField("operator", StringType(), True),
                StructField("key", StringType(), True),
                StructField("value", StringType(), True),
                StructField("deleted", BooleanType(), True),
                StructField("key_group", IntegerType(), True),
                # an entry state's row: its entry (stored in the state's entry column)
                StructField("entry", StringType(), True)]
STATE_COLUMNS = [f.name for f in STATE_FIELDS]

STAGE_SCHEMA = StructType([
    StructField("kind", StringType(), False),  # rows | state | file | sink | done | error
    *ROWS_FIELDS,
    *STATE_FIELDS,
    StructField("action", StringType(), True),  # file, sink: a data file's add action
    StructField("sink", StringType(), True),  # sink: the sink's name
    StructField("schema", BinaryType(), True),  # done: the Arrow schema of the output rows
    StructField("rows_in", LongType(), True),  # done: what the group saw and made
    StructField("rows_out", LongType(), True),
    StructField("keys", LongType(), True),
    StructField("late", LongType(), True),  # records dropped as late
    StructField("message", StringType(), True),  # error: message and traceback …
    StructField("failed_in", StringType(), True),  # … the operator that raised it …
    StructField("first_rows", StringType(), True),  # … and the first rows it was given
])

#: the kinds the driver collects (the others it reads as Spark frames)
COLLECTED = ("done", "error", "file", "sink")


@dataclass(frozen=True)
class Done:
    """A task's counts, and the schema of its output rows (``None``: no columns)."""

    kind: ClassVar[str] = "done"
    rows_in: int
    rows_out: int
    keys: int
    late: int
    schema: bytes | None


@dataclass(frozen=True)
class Failed:
    """A task's error: its message (with the executor's traceback), and the operator that
    raised it with the first rows it was given, when an operator did."""

    kind: ClassVar[str] = "error"
    message: str
    failed_in: str | None = None
    first_rows: str | None = None


@dataclass(frozen=True)
class FileWritten:
    """A ``_state`` data file a task wrote (uncommitted: see StateFiles)."""

    kind: ClassVar[str] = "file"
    action: str


@dataclass(frozen=True)
class SinkWritten:
    """A data file a task wrote for sink ``sink``; ``None``: the table would not take the
    task's rows as they are, and the sink writes the batch itself."""

    kind: ClassVar[str] = "sink"
    sink: str
    action: str | None


Result = Done | Failed | FileWritten | SinkWritten


def results_frame(results: list[Result]) -> pd.DataFrame:
    """``results`` as rows of a task's frame (typed later, with the rest: see :func:`typed`)."""
    records = [{"kind": result.kind, **dataclasses.asdict(result)} for result in results]
    return pd.DataFrame(records) if records else pd.DataFrame({"kind": []})


@dataclass
class Summary:
    """The collected rows of a stage's tasks, by kind."""

    done: list[Done] = field(default_factory=list)
    errors: list[Failed] = field(default_factory=list)
    files: list[FileWritten] = field(default_factory=list)
    sinks: list[SinkWritten] = field(default_factory=list)

    @classmethod
    def of(cls, rows: list[Any]) -> Summary:
        """The summary of collected Spark rows (of the :data:`COLLECTED` kinds)."""
        summary = cls()
        for row in rows:
            kind = row["kind"]
            if kind == "done":
                summary.done.append(Done(row["rows_in"], row["rows_out"], row["keys"], row["late"],
                                         row["schema"]))
            elif kind == "error":
                summary.errors.append(Failed(row["message"], row["failed_in"], row["first_rows"]))
            elif kind == "file":
                summary.files.append(FileWritten(row["action"]))
            elif kind == "sink":
                summary.sinks.append(SinkWritten(row["sink"], row["action"]))
        return summary


_PANDAS_TYPES = {"long": "Int64", "int": "Int32", "boolean": "boolean"}


def typed(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with every column of STAGE_SCHEMA, typed so that Arrow takes missing values
    as nulls (a column of NaN would not become binary or text)."""
    results = results.reindex(columns=STAGE_SCHEMA.names)
    for spark_field in STAGE_SCHEMA:
        column = results[spark_field.name]
        kind = _PANDAS_TYPES.get(spark_field.dataType.simpleString())
        results[spark_field.name] = (column.astype(kind) if kind
                                     else column.astype(object).where(column.notna(), None))
    return results
