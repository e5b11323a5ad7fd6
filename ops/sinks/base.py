"""The Sink interface: where a batch's output goes, and what the runtime may ask of it.

What the runtime calls, in order: ``write(ctx, batch_id, frame)`` once per batch (in
distributed mode ``write_frame``, with a Spark DataFrame), batches in order, after the previous
batch's ``write`` returned and before the checkpoint covering the batch commits. A batch that
crashed is written again on replay with identical rows, so a ``write`` must be idempotent by
batch id: a second call for the same batch adds nothing.

``close(ctx)`` is called once when the run ends, however it ends, to release what the sink
held for it (connections, producers).

In distributed mode a :class:`FileSink` may instead have the tasks that make a batch's rows
write them as data files of its table (``file_target``), and commit those files itself
(``commit_files``): the rows then never pass through Spark's writer.

``discard_after(ctx, batch_id)`` is called during recovery after a reset to an older
checkpoint, before any batch runs, and may be called again if that recovery crashes.

A :class:`StoredSink` keeps its output in Delta tables and can be read back; the others (the
console) cannot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from state import PipelineLayout, delta_io

from ..columns import ROW_COLUMN
from ..context import RunContext

_STATISTICS_COLUMNS = 32  # Delta's delta.dataSkippingNumIndexedCols default


@dataclass(frozen=True)
class FileTarget:
    """Where distributed mode's tasks may write a batch's output rows as data files of a
    sink's Delta table, uncommitted, for the sink to commit (see :meth:`FileSink.file_target`):
    the table at ``path``, the columns its files hold (``schema``), and the object store's
    settings the tasks reach it with.

    >>> target = FileTarget("out", "/tmp/t", pa.schema([("x", pa.int64())]))
    >>> target.arrow(pd.DataFrame({"x": [1, 2]})).num_rows, target.arrow(pd.DataFrame({"x": ["1"]}))
    (2, None)
    >>> timed = FileTarget("out", "/tmp/t", pa.schema([("t", pa.timestamp("us", tz="UTC"))]))
    >>> timed.arrow(pd.DataFrame({"t": pd.to_datetime(["2026-01-01T00:00:00.000000001Z"])}))
    """

    sink: str
    path: str
    schema: pa.Schema
    storage: dict[str, str] = field(default_factory=dict, repr=False)  # credentials, maybe

    def arrow(self, rows: pd.DataFrame) -> pa.Table | None:
        """``rows`` as the table's files hold them, or ``None`` when they are not exactly its
        columns in its types (the sink's own write evolves or refuses those)."""
        if sorted(map(str, rows.columns)) != sorted(self.schema.names):
            return None
        try:
            table = pa.Table.from_pandas(rows, preserve_index=False).select(self.schema.names)
            if not all(_fits(have.type, want.type) for have, want in zip(table.schema, self.schema)):
                return None
            return table.cast(self.schema)  # a safe cast: a time it would truncate is refused
        except (pa.ArrowException, TypeError, ValueError):
            return None

    def write(self, rows: pd.DataFrame) -> str | None:
        """Write ``rows`` as one data file of the table; its add action (for
        :meth:`FileSink.commit_files`), or ``None`` when :meth:`arrow` refuses them."""
        table = self.arrow(rows)
        if table is None:
            return None
        delta_io.adopt_storage_environment(self.storage)
        # statistics on the integer columns among the first 32, as Spark's writer keeps them
        # (readers skip files by them: a reset's delete by _batch_id, say)
        counted = [f.name for f in self.schema][:_STATISTICS_COLUMNS]
        return delta_io.write_file(self.path, table, {}, statistics=[
            name for name in counted if pa.types.is_integer(self.schema.field(name).type)])


def _fits(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` goes into one of ``want`` as it is: the same type, all
    nulls, text of another width, or a time of another unit."""
    return (have == want or pa.types.is_null(have)
            or (pa.types.is_large_string(have) and pa.types.is_string(want))
            or (pa.types.is_timestamp(have) and pa.types.is_timestamp(want) and have.tz == want.tz))


class Sink(ABC):
    """Receives each batch's output frame."""

    name: str

    @abstractmethod
    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        """Write ``frame`` for ``batch_id``; a second call for the same batch adds nothing."""

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        """Distributed mode: write ``frame`` (a Spark DataFrame, rows already tagged with their
        order in ``_row``) for ``batch_id``, idempotently as :meth:`write`. This default brings
        the rows to the driver; sinks that can write from executors override it."""
        rows: pd.DataFrame = frame.toPandas()
        self.write(ctx, batch_id, rows.sort_values(ROW_COLUMN).drop(columns=[ROW_COLUMN]))

    def close(self, ctx: RunContext) -> None:  # noqa: B027 - optional
        """The run is over: release what was held for it."""

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:  # noqa: B027 - optional
        """Remove what batches after ``batch_id`` wrote (a reset abandoned them); a sink that
        cannot take output back does nothing."""


class StoredSink(Sink):
    """A sink whose output is stored in Delta tables of the warehouse and can be read back."""

    @abstractmethod
    def location(self, layout: PipelineLayout) -> str:
        """The path of the table a reader queries."""

    def tables(self, layout: PipelineLayout) -> list[str]:
        """Every table the sink writes (vacuum and describe visit them)."""
        return [self.location(layout)]

    @abstractmethod
    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """What the sink holds now, as pandas (before the first write: :meth:`empty`)."""

    @abstractmethod
    def empty(self) -> pd.DataFrame:
        """What :meth:`read` gives before the sink's first write: no rows, the columns every
        row of the sink has (the rest come with the rows, whose columns the batch decides)."""


class FileSink(Sink):
    """A sink whose batches distributed mode's tasks may write as data files themselves, for
    the sink to commit: the rows then never pass through Spark's writer or the driver."""

    @abstractmethod
    def file_target(self, ctx: RunContext) -> FileTarget | None:
        """Where the tasks making a batch's rows may write them as data files, for
        :meth:`commit_files`; ``None``: not now (the batch goes to :meth:`write_frame`)."""

    @abstractmethod
    def commit_files(self, ctx: RunContext, target: FileTarget, batch_id: int,
                     actions: list[str]) -> None:
        """Commit the files the tasks wrote to ``target`` for ``batch_id`` (their add actions),
        idempotently as :meth:`write`. Called only with a target :meth:`file_target` gave."""
