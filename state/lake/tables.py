"""The few Delta Lake operations the state engine needs, in one place."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .. import delta_io
from ..errors import CheckpointConflict, ConfigError
from . import direct
from .warmup import note_append


def exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds a Delta table (told by delta-rs without a Spark job where it
    serves the path, and without a request to an object store for a table it holds)."""
    found = delta_io.exists(path)  # None: not delta-rs's to tell
    return DeltaTable.isDeltaTable(spark, path) if found is None else found


def ensure(spark: SparkSession, path: str, schema: StructType, *,
           properties: dict[str, str] | None = None) -> None:
    """Create an empty Delta table at ``path`` unless one is there (safe when two runs race)."""
    if exists(spark, path):
        return
    if delta_io.create(path, delta_io.Creation(
            tuple(schema.jsonValue()["fields"]), (), tuple((properties or {}).items()))):
        return
    try:
        _appender(spark.createDataFrame([], schema), (), properties).save(path)
    except Exception as exc:
        if not _lost_creation_race(exc):  # another writer created it first: that is fine
            raise


def read(spark: SparkSession, path: str) -> DataFrame:
    """The latest version of the table at ``path``."""
    return spark.read.format("delta").load(path)


@dataclass(frozen=True)
class TableSummary:
    """A table's row count, its columns, and its newest rows (oldest first)."""

    rows: int
    schema: StructType
    newest: pd.DataFrame


def summary(spark: SparkSession, path: str, newest: int = 10) -> TableSummary | None:
    """The :class:`TableSummary` of the table at ``path`` (``None``: no table): from its log's
    file statistics and its newest files through delta-rs where that serves the table (no
    Spark job, however large it is); else Spark counts it and takes ``newest`` rows."""
    found = delta_io.summary(path, newest)
    if found is not None:
        return TableSummary(found.rows, StructType.fromJson(found.schema),
                            found.newest.to_pandas())
    if not exists(spark, path):
        return None
    frame = read(spark, path)
    return TableSummary(frame.count(), frame.schema, frame.limit(newest).toPandas())


def column_frame(spark: SparkSession, path: str, columns: list[str]) -> pd.DataFrame:
    """Only ``columns`` of every row of the table at ``path``, as pandas (no rows when there is
    no table): by delta-rs, reading those columns alone, where it serves the table; else
    Spark."""
    found = delta_io.column_rows(path, columns)
    if found is not None:
        return found.to_pandas()
    if not exists(spark, path):
        return pd.DataFrame({name: [] for name in columns})
    return read(spark, path).select(*columns).toPandas()


def count_between(spark: SparkSession, path: str, column: str, lowest: int,
                  highest: int | None = None) -> int:
    """How many rows of the table at ``path`` have integer ``column`` in ``lowest..highest``
    (no upper bound for ``None``; 0 when there is no table): by delta-rs, reading only that
    column of the files whose statistics allow such rows, where it serves the table; else
    Spark."""
    counted = delta_io.count_between(path, column, lowest, highest)
    if counted is not None:
        return counted
    if not exists(spark, path):
        return 0
    within = F.col(column) >= lowest
    if highest is not None:
        within &= F.col(column) <= highest
    return read(spark, path).where(within).count()


# Up to this many keys a read filters with IN (pushed down to Parquet); beyond, a semi-join.
_IN_LIST_LIMIT = 2000


def only_keys(spark: SparkSession, rows: DataFrame, wanted: pd.DataFrame) -> DataFrame:
    """``rows`` whose values in ``wanted``'s columns match one of its rows: an IN filter for a
    few single-column keys (pushed down to Parquet), else a broadcast semi-join."""
    columns = list(wanted.columns)
    if len(columns) == 1 and len(wanted) <= _IN_LIST_LIMIT:
        return rows.where(F.col(columns[0]).isin(wanted[columns[0]].tolist()))
    return rows.join(F.broadcast(spark.createDataFrame(wanted)), columns, "left_semi")


_ONE_FILE_ROWS = 200_000
_STAGE_MIN_ROWS = 50_000  # below this, the file round trip saves nothing


def literal_frame(spark: SparkSession, columns: list[tuple[str, str]], rows: list[tuple]) -> DataFrame:
    """A small table of ``rows`` (not empty) with ``columns`` (name, Spark type), made in the
    JVM from literals: no Python worker and no job, unlike a frame made from Python data, so a
    join by broadcast with it leaves the other side's rows where they are."""
    return spark.range(1).select(F.inline(F.array(*[
        F.struct(*[F.lit(value).cast(kind).alias(name) for (name, kind), value in zip(columns, row)])
        for row in rows])))


def to_frame(spark: SparkSession, rows: pd.DataFrame, schema: StructType | None = None) -> DataFrame:
    """A Spark DataFrame from pandas rows (through Arrow), with an exact schema when given.

    Small frames become one partition, so a commit writes one file rather than one per core.
    """
    frame = spark.createDataFrame(rows, schema=schema) if schema else spark.createDataFrame(rows)
    return frame.coalesce(1) if len(rows) <= _ONE_FILE_ROWS else frame


def append_rows(spark: SparkSession, rows: pd.DataFrame, path: str, *, staging: str | None = None,
                txn: tuple[str, int] | None = None, schema: StructType | None = None,
                user_metadata: str | None = None, again_soon: bool = True,
                merge_schema: bool = False) -> direct.Outcome | None:
    """Append pandas ``rows`` to ``path`` in one commit (see :func:`append`, also for
    ``merge_schema``); returns what a commit written by this process did, or ``None`` when the
    append went through Spark.

    An append that only adds files is committed here, without Spark (:mod:`state.lake.direct`):
    a few hundredths of a second instead of a few tenths. Else,
    rows of plain columns (numbers, booleans, strings, UTC timestamps) bound for a local table
    travel through a Parquet file written by pyarrow under ``staging``: Spark's own
    pandas-to-row conversion cost about 2.5 s per million rows, reading the file back a fraction
    of that. Anything else takes :func:`to_frame` (with ``schema`` when given).
    """
    done = direct.append(rows, path, txn=txn, user_metadata=user_metadata, create=new_table(schema))
    if done is not None:
        return done
    staged = _stage(rows, staging) if staging else None
    try:
        frame = spark.read.parquet(staged) if staged else to_frame(spark, rows, schema)
        append(frame, path, txn=txn, user_metadata=user_metadata, again_soon=again_soon,
               merge_schema=merge_schema)
    finally:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
    return None


def new_table(schema: StructType | None = None, partition_by: tuple[str, ...] = (),
              properties: dict[str, str] | None = None) -> direct.NewTable:
    """How a direct append creates a missing table, as Spark's first append would have: with
    ``schema``'s columns (else the rows' own), every column nullable (Spark's creation makes
    them so too), partitioned by ``partition_by``, with table ``properties``."""
    fields = None if schema is None else tuple(
        {**field, "nullable": True} for field in schema.jsonValue()["fields"])
    return direct.NewTable(partition_by, tuple((properties or {}).items()), fields)


def clear_staging(staging: str) -> None:
    """Remove files a killed process left under ``staging``."""
    local = local_path(staging)
    if local:
        shutil.rmtree(local, ignore_errors=True)


def _stage(rows: pd.DataFrame, staging: str) -> str | None:
    """A folder holding ``rows`` as one Parquet file, or ``None`` when they do not qualify."""
    local = local_path(staging)
    if local is None or len(rows) < _STAGE_MIN_ROWS:
        return None  # not worth a file round trip, or executors could not read the folder
    try:
        table = pa.Table.from_pandas(rows, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if not all(_plain_type(field.type) for field in table.schema):
        return None
    folder = os.path.join(local, uuid.uuid4().hex)
    os.makedirs(folder)
    # microseconds: Spark reads no nanosecond Parquet timestamps
    pq.write_table(table, os.path.join(folder, "part-0.parquet"), coerce_timestamps="us",
                   allow_truncated_timestamps=True)
    return folder


def _plain_type(kind: pa.DataType) -> bool:
    """Types whose Parquet form Spark reads back as createDataFrame would have typed them."""
    if pa.types.is_timestamp(kind):
        return kind.tz is not None  # a naive one would come back as TIMESTAMP_NTZ
    return (pa.types.is_signed_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def append(frame: DataFrame, path: str, *, txn: tuple[str, int] | None = None,
           partition_by: tuple[str, ...] = (), user_metadata: str | None = None,
           properties: dict[str, str] | None = None, again_soon: bool = True,
           merge_schema: bool = False) -> None:
    """Append ``frame`` to ``path`` in one commit.

    With ``txn=(app_id, version)`` the write is idempotent: Delta skips it when the table has
    already seen ``version`` (or a later one) for ``app_id``. That is how a replayed batch writes
    nothing new. ``again_soon``: the next batch is likely to append again, so a run's warm-up
    may prepare the table's next idempotent append (see :mod:`state.lake.warmup`). ``properties``:
    table properties, for when this append creates the table (Delta ignores them otherwise).
    ``merge_schema``: columns ``frame`` has and the table lacks are added to the table.
    """
    writer = _appender(frame, partition_by, properties)
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    if user_metadata is not None:
        writer = writer.option("userMetadata", user_metadata)
    try:
        writer.save(path)
    except Exception as exc:
        if _lost_creation_race(exc):
            writer.save(path)  # the table exists now; the idempotency id still guards the retry
            return
        if "Concurrent" in type(exc).__name__ or "DELTA_CONCURRENT" in str(exc)[:300]:
            raise CheckpointConflict(
                f"concurrent write to {path} with the same idempotency id {txn}: another run of "
                "this pipeline is active; this run stopped. Run one instance at a time.") from exc
        raise
    if txn is not None and again_soon:
        note_append(path)


def _appender(frame: DataFrame, partition_by: tuple[str, ...],
              properties: dict[str, str] | None) -> DataFrameWriter:
    """A Delta append of ``frame``; partitioning and properties apply if it creates the table."""
    writer = frame.write.format("delta").mode("append")
    for key, value in (properties or {}).items():
        writer = writer.option(key, value)
    return writer.partitionBy(*partition_by) if partition_by else writer


def delete_where(spark: SparkSession, path: str, condition: Column) -> None:
    """Delete the rows matching ``condition`` in one commit (nothing when there is no table)."""
    if exists(spark, path):
        DeltaTable.forPath(spark, path).delete(condition)


def _lost_creation_race(exc: Exception) -> bool:
    """Two writers created the same empty table at once; Delta lets one win."""
    return "ProtocolChanged" in type(exc).__name__ or "DELTA_PROTOCOL_CHANGED" in str(exc)[:300]


def recent_metadata(spark: SparkSession, path: str, commits: int = 10) -> list[str]:
    """``userMetadata`` of the last ``commits`` commits, newest first (cheap: reads the log only,
    by delta-rs without a Spark job where it serves the path).

    An idempotent append that Delta skipped leaves no commit, so finding one's own metadata here
    proves the write happened without reading the table back.
    """
    found = delta_io.recent_metadata(path, commits)  # None: not delta-rs's to tell
    if found is not None:
        return found
    rows = DeltaTable.forPath(spark, path).history(commits).select("userMetadata").collect()
    return [row["userMetadata"] for row in rows if row["userMetadata"]]


def local_path(path: str) -> str | None:
    """The file-system path of a local path or ``file:`` URI; ``None`` for other URIs."""
    return delta_io.local_path(path)


def history_version(spark: SparkSession, path: str) -> int:
    """Latest version of the existing Delta table at ``path``, from its history."""
    version = delta_io.latest_version(path)  # None: not delta-rs's to tell
    if version is not None:
        return version
    return int(DeltaTable.forPath(spark, path).history(1).select("version").collect()[0][0])


def held_version(path: str, spark: SparkSession | None = None) -> int:
    """The version of the Delta table at ``path`` as this process holds it (after its own
    commit, that commit's), without asking an object store where delta-rs serves the path;
    else :func:`latest_version`."""
    version = delta_io.held_version(path)  # None: not delta-rs's to tell
    return latest_version(path, spark) if version is None else version


def latest_version(path: str, spark: SparkSession | None = None) -> int:
    """Latest version of the Delta table at ``path``; -1 when there is none yet.

    A table on the local file system or an object store is read by delta-rs, so sensors need
    no JVM; other URIs need ``spark``.
    """
    version = delta_io.latest_version(path)  # None: not delta-rs's to tell
    if version is not None:
        return version
    if spark is None:
        raise ConfigError(f"probing {path} needs a Spark session (it is not a local path)")
    return history_version(spark, path) if exists(spark, path) else -1


def columns(path: str) -> tuple[str, ...] | None:
    """The column names of the Delta table at ``path`` as of its latest commit, read by
    delta-rs (no Spark); ``None`` when there is no such table or delta-rs does not serve it."""
    schema = delta_io.schema_json(path)
    return None if schema is None else tuple(field["name"] for field in schema["fields"])


#: Delta's primitive types as the kinds a :class:`~ops.sources.records.RecordSchema` declares.
_KIND_OF_DELTA_TYPE = {"long": "long", "integer": "long", "short": "long", "byte": "long",
                       "double": "double", "float": "double", "string": "string",
                       "boolean": "boolean", "timestamp": "timestamp", "timestamp_ntz": "timestamp"}


def kinds(path: str) -> dict[str, str] | None:
    """Column -> kind (``long``, ``double``, ``string``, ``boolean``, ``timestamp``) of the Delta
    table at ``path`` as of its latest commit, for the columns of those types (a decimal is a
    ``double``; nested and binary columns are left out); ``None`` as :func:`columns`."""
    schema = delta_io.schema_json(path)
    if schema is None:
        return None
    found: dict[str, str] = {}
    for field in schema["fields"]:
        kind = field["type"] if isinstance(field["type"], str) else None
        kind = "double" if kind and kind.startswith("decimal") else _KIND_OF_DELTA_TYPE.get(kind or "")
        if kind is not None:
            found[field["name"]] = kind
    return found
