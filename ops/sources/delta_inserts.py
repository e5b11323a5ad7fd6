"""The rows a range of commits inserted into a Delta table, as pandas, in the table's order.

Commits that only appended files are read straight from those files, in the order the log gives
them (commit by commit, each commit's files in the order it added them, each file's rows in
order): that order is the rows' order in their batch (``_row``), the same on the driver (pyarrow:
half a million rows in a few hundredths of a second, where Spark's change data feed plus the
transfer to pandas took about a second) and on executors (:func:`file_rows`: Spark reads the
files with each row's position, no sort). On an object store the log and the files are read
through delta-rs's store (one request per commit's JSON). Commits that insert no row by what
they are (an update, a delete, a merge that counted no insert, compaction, a metadata change)
are read from their log entry alone: they add nothing. Anything else (a merge that inserted
rows, an overwrite, deletion vectors, partition columns, column mapping) is read through Spark's
change data feed, which Delta serves from a version only if the feed was on at that version;
its rows have no order of their own and are sorted by every column.

:func:`readings` tells, from the log alone, which way each commit of a range can be read, so a
source can refuse a range before planning it rather than fail reading it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from state import StorageError, delta_io
from state.lake import tables

VERSION = "_commit_version"
#: The table property that turns the change data feed on.
FEED_PROPERTY = delta_io.FEED_PROPERTY
#: Delta's error class for a range of versions the change data feed holds nothing for.
MISSING_CHANGE_DATA = "DELTA_MISSING_CHANGE_DATA"

# Operations that insert no row, whatever files they rewrite: the change data feed shows their
# rows as update images or deletions, never as inserts, which are all a reader of inserts takes.
_INSERT_NOTHING = frozenset({"UPDATE", "DELETE"})

# Spark types whose Parquet form pyarrow turns into the pandas dtype Spark's toPandas gives.
_SAME_IN_PANDAS: dict[type[T.DataType], Callable[[pa.DataType], bool]] = {
    T.LongType: pa.types.is_int64, T.IntegerType: pa.types.is_int32,
    T.ShortType: pa.types.is_int16, T.ByteType: pa.types.is_int8,
    T.DoubleType: pa.types.is_float64, T.FloatType: pa.types.is_float32,
    T.BooleanType: pa.types.is_boolean, T.DateType: pa.types.is_date32,
    T.StringType: lambda kind: pa.types.is_string(kind) or pa.types.is_large_string(kind),
    T.TimestampType: pa.types.is_timestamp,
}
# Where a column's metadata holds its name in the files, under column mapping.
_PHYSICAL_NAME = "delta.columnMapping.physicalName"
# The Arrow type of a column of each of those Spark types a data file lacks (all nulls).
_ARROW_OF: dict[type[T.DataType], pa.DataType] = {
    T.LongType: pa.int64(), T.IntegerType: pa.int32(), T.ShortType: pa.int16(),
    T.ByteType: pa.int8(), T.DoubleType: pa.float64(), T.FloatType: pa.float32(),
    T.BooleanType: pa.bool_(), T.DateType: pa.date32(), T.StringType: pa.string(),
    T.TimestampType: pa.timestamp("us", tz="UTC"),
}


def inserted_rows(spark: SparkSession, path: str, first: int, last: int,
                  order_by: tuple[str, ...] = (), instants: bool = False,
                  sort_all: bool = False) -> pd.DataFrame:
    """Rows inserted by commits ``first..last`` (inclusive) of the table at ``path``, with their
    commit version in column ``_commit_version``, in the table's own order where its log gives
    one (:func:`added_files`: commit by commit, each commit's files in the order it added them,
    each file's rows in order). Rows only the change data feed gives (a merge's, an
    overwrite's) have no such order: they are sorted by version then every column (nulls
    first, as Spark sorts), and so are all rows with ``sort_all`` (how a release before the
    table's order numbered them). ``order_by`` sorts by version then those columns instead
    (rows that tie keep their order).

    Timestamps are as Spark's ``toPandas`` gives them (naive, in the session's time zone), or
    with ``instants``, a ``timestamp`` column as UTC instants (what executors' tasks get too:
    ``ops.runtime.instants``); a ``timestamp_ntz`` column is naive either way.
    """
    schema = table_schema(spark, path, at_least=last)
    time_zone = spark.conf.get("spark.sql.session.timeZone")
    assert time_zone is not None  # a built-in setting: get() returns its value or raises
    sizes: dict[str, int] = {}
    files = added_files(path, first, last, schema, sizes)
    if files is None:
        rows = _from_change_feed(spark, path, first, last)
        sort_all = True
    else:
        rows = _from_files(path, files, schema, time_zone, sizes)
        if rows is None:  # columns pyarrow would not give as Spark does: Spark reads the files
            read: pd.DataFrame = file_rows(spark, path, files, schema).toPandas()
            rows = read.sort_values(ROW_IN_TABLE).drop(columns=[ROW_IN_TABLE])
    if rows.empty:  # commits that inserted nothing: Spark gives the empty frame its dtypes
        empty: pd.DataFrame = _table(spark, path).limit(0).toPandas()
        empty.insert(0, VERSION, pd.Series([], dtype="int64"))
        rows = empty
    keys = [VERSION, *(order_by or (schema.names if sort_all else ()))]
    if len(keys) > 1 and not _in_order(rows, keys):
        rows = rows.sort_values(keys, kind="stable", na_position="first")
    rows = rows.reset_index(drop=True)
    return _as_instants(rows, schema, time_zone) if instants else rows


def table_schema(spark: SparkSession, path: str, at_least: int | None = None) -> T.StructType:
    """The table's columns: from its log where delta-rs serves it (no Spark job), else Spark's.
    ``at_least``: as of that version or a later one, taken as this process holds the table
    when it is (a read of commits up to that version: on an object store, no request)."""
    known = delta_io.schema_json(path, at_least)
    return T.StructType.fromJson(known) if known else _table(spark, path).schema


def added_files(path: str, first: int, last: int, schema: T.StructType | None = None,
                sizes: dict[str, int] | None = None) -> list[tuple[int, str]] | None:
    """The data files holding the rows commits ``first..last`` inserted, with each one's commit
    version, in the table's order (version, then the order each commit added them), as paths
    in the table's folder; ``None`` when the log alone does not tell (a commit did more than
    append files, its JSON is gone, the table maps column names or is not on a store this
    package serves): only the change feed gives those rows. ``schema``: the table's, when the
    caller has it (else read from its log: on an object store, one more request); ``sizes``,
    when given, gets each file's size as its commit gave it.
    One read of each commit's JSON (on an object store, one request each)."""
    if schema is None:
        known = delta_io.schema_json(path)
        schema = None if known is None else T.StructType.fromJson(known)
    if schema is None or _renames_columns(schema):
        return None
    files: list[tuple[int, str]] = []
    for version in range(first, last + 1):
        actions = delta_io.commit_actions(path, version)
        inserted = None if actions is None else _inserted_files(delta_io.appended_in(version, actions),
                                                                actions)
        if inserted is None:
            return None
        files += [(version, added.path) for added in inserted]
        if sizes is not None:
            sizes.update((added.path, added.size) for added in inserted if added.size is not None)
    return files


#: :func:`file_rows`: a row's place in the table's order (its file's, then its own in the file).
ROW_IN_TABLE = "_row_in_table"
#: Bits of :data:`ROW_IN_TABLE` for a row's position in its file (files hold fewer rows).
_ROW_BITS = 32


def file_rows(spark: SparkSession, path: str, files: list[tuple[int, str]],
              schema: T.StructType) -> DataFrame:
    """The rows of ``files`` (as :func:`added_files` gives them), read by Spark with the
    table's ``schema`` (a column a file lacks is null), their version in ``_commit_version``
    and their place in the table's order in :data:`ROW_IN_TABLE` (a number that grows with
    it, not consecutive): no sort, no shuffle, so executors read them where they are."""
    if not files:
        fields = [T.StructField(VERSION, T.LongType()), *schema.fields,
                  T.StructField(ROW_IN_TABLE, T.LongType())]
        return spark.createDataFrame([], T.StructType(fields))
    root = path.rstrip("/")
    # joined by broadcast, so the rows are read where they are, in their files' order; its
    # column names are no table's
    places = tables.literal_frame(
        spark, [("__file_name", "string"), ("__version", "long"), ("__first_row", "long")],
        [(_file_name(name), version, number << _ROW_BITS) for number, (version, name) in enumerate(files)])
    rows = spark.read.schema(schema).parquet(*[f"{root}/{name}" for _, name in files]).select(
        "*", F.col("_metadata.file_name").alias("__file_name"), F.col("_metadata.row_index").alias("__index"))
    return rows.join(F.broadcast(places), "__file_name").select(
        F.col("__version").alias(VERSION), *[F.col(f"`{c}`") for c in schema.names],
        (F.col("__first_row") + F.col("__index")).alias(ROW_IN_TABLE))


def _file_name(name: str) -> str:
    """A data file's name without its folders (what Spark's ``_metadata.file_name`` gives)."""
    return name.rsplit("/", 1)[-1]


def _as_instants(rows: pd.DataFrame, schema: T.StructType, time_zone: str) -> pd.DataFrame:
    """``rows`` (as ``toPandas`` gives them) with each ``timestamp`` column as UTC instants."""
    for field in schema.fields:
        if isinstance(field.dataType, T.TimestampType) and field.name in rows.columns:
            rows[field.name] = utc_instants(rows[field.name], time_zone)
    return rows


def utc_instants(times: pd.Series, time_zone: str) -> pd.Series:
    """Times as Spark's pandas conversion gives a ``timestamp`` column (naive wall-clock times
    of ``time_zone``, the session's) as UTC instants; times that have a zone already are
    converted, anything else is returned as it is.

    A time the clocks show twice (the hour a change from daylight saving time repeats) is taken
    as standard time, as Spark takes a naive time it gets back: its conversion to pandas already
    made the two instants one. The sessions lakestream starts keep UTC, which repeats no hour.

    >>> utc_instants(pd.Series(pd.to_datetime(["2026-07-01 02:00"])), "Europe/Berlin").iloc[0]
    Timestamp('2026-07-01 00:00:00+0000', tz='UTC')
    """
    if isinstance(times.dtype, pd.DatetimeTZDtype):
        return times.dt.tz_convert("UTC")
    if not pd.api.types.is_datetime64_dtype(times.dtype):
        return times
    return times.dt.tz_localize(time_zone, ambiguous=False).dt.tz_convert("UTC")


def _table(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def _in_order(rows: pd.DataFrame, keys: list[str]) -> bool:
    """Whether ``rows`` are sorted by ``keys`` already, so a stable sort would not move a row
    (appended data is often written in order; sorting half a million rows took 0.07 s). Only
    numeric and timestamp keys without nulls are checked; anything else counts as unsorted."""
    tied = np.ones(max(len(rows) - 1, 0), dtype=bool)  # row i equals row i+1 on the keys so far
    for key in keys:
        column = rows[key]
        if not isinstance(column.dtype, np.dtype) or column.dtype.kind not in "iufM" \
                or column.isna().any():
            return False
        values = column.to_numpy()
        before, after = values[:-1], values[1:]
        if (tied & (after < before)).any():
            return False
        tied &= after == before
        if not tied.any():
            return True
    return True


def _from_change_feed(spark: SparkSession, path: str, first: int, last: int) -> pd.DataFrame:
    changes = _change_feed(spark, path, first, last).where(F.col("_change_type") == "insert")
    columns = [c for c in changes.columns if not c.startswith("_")]
    return changes.select(F.col(VERSION).cast("long"), *columns).toPandas()  # sorted by the caller


def _change_feed(spark: SparkSession, path: str, first: int, last: int) -> DataFrame:
    return (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", first).option("endingVersion", last).load(path))


def feed_error(spark: SparkSession, path: str, first: int, last: int) -> str | None:
    """Why the change data feed cannot give commits ``first..last`` (Delta's own words), or
    ``None`` when it can. Delta finds out while planning the read, so no data is read."""
    try:
        _change_feed(spark, path, first, last)._jdf.queryExecution().executedPlan()
    except Exception as exc:
        reason = missing_change_data(exc)
        if reason is None:
            raise
        return reason
    return None


def missing_change_data(error: BaseException) -> str | None:
    """Delta's first sentence when ``error`` says the change feed holds nothing for a version
    (``[DELTA_MISSING_CHANGE_DATA] … was not recorded for version [v].``), else ``None``."""
    text = " ".join(str(error).split())
    if MISSING_CHANGE_DATA not in text:
        return None
    end = text.find("].")
    return text[:end + 2] if end >= 0 else text[:300]


def _from_files(path: str, files: list[tuple[int, str]], schema: T.StructType,
                time_zone: str, sizes: dict[str, int] | None = None) -> pd.DataFrame | None:
    """The rows of ``files`` (:func:`added_files`), read with pyarrow in that order (a column a
    file lacks is null); ``None`` when a column would not come out as Spark gives it (its type,
    a time zone only Spark knows). Each file is opened by its name, not looked up (on an object
    store that was a ``HEAD`` and a ``LIST``), and with its size from ``sizes`` (the log's) not
    asked for either: on an object store, its footer's and its columns' ranged reads only."""
    if not _plain_columns(schema):
        return None
    store = delta_io.table_files(path, sizes)
    parts = []
    for version, name in files:
        try:
            with store.open_input_file(name) as handle:
                table = pq.read_table(handle)
        except pa.ArrowInvalid:  # not Parquet pyarrow reads: Spark will say what it is
            return None
        except OSError as failed:  # gone: no other read has its rows
            raise StorageError(f"{path}: data file {name} of version {version} cannot be read "
                               f"({failed}); a VACUUM may have removed it before this batch read "
                               "it") from failed
        conformed = _conformed(table, schema)
        if conformed is None:
            return None
        parts.append(conformed.add_column(0, VERSION, pa.array(np.full(len(table), version, np.int64))))
    if not parts:
        return pd.DataFrame()  # nothing inserted: the caller has Spark give it dtypes
    return _as_spark_gives(pa.concat_tables(parts, promote_options="permissive"), schema, time_zone)


def _conformed(table: pa.Table, schema: T.StructType) -> pa.Table | None:
    """``table`` (a data file's rows) with the table's columns in its order, a column the file
    lacks (added to the table after it) null, one the table dropped since left out; ``None``
    when a column is of a type pandas would not get as from Spark."""
    columns = []
    for field in schema.fields:
        if field.name not in table.column_names:
            columns.append(pa.nulls(len(table), _ARROW_OF[type(field.dataType)]))
        elif _SAME_IN_PANDAS[type(field.dataType)](table.schema.field(field.name).type):
            columns.append(_one_form(table[field.name]))
        else:
            return None
    return pa.table(columns, names=schema.names)


def _as_spark_gives(rows_read: pa.Table, schema: T.StructType, time_zone: str) -> pd.DataFrame | None:
    """The rows as pandas, with timestamps as Spark's ``toPandas`` gives them (``None``: a time
    zone only Spark knows)."""
    rows = rows_read.to_pandas()
    for field in schema.fields:
        if isinstance(field.dataType, T.TimestampType):  # Spark: naive, in the session time zone
            column = rows[field.name]
            instants = column.dt.tz_convert("UTC") if column.dt.tz else column.dt.tz_localize("UTC")
            try:
                zoned = instants.dt.tz_convert(time_zone)
            except (KeyError, ValueError, TypeError):  # a zone spelling only Spark knows
                return None
            rows[field.name] = zoned.dt.tz_localize(None).astype("datetime64[ns]")
    return rows


def _one_form(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A file's column in the form every file's takes, so files read together make one table:
    times as UTC instants in microseconds (Spark writes instants, some files as INT96 that
    pyarrow gives as naive nanoseconds, of which Spark uses only the microseconds)."""
    if pa.types.is_timestamp(column.type):
        return column.cast(_ARROW_OF[T.TimestampType], safe=False)
    return column


def _plain_columns(schema: T.StructType) -> bool:
    """Whether every column's Parquet form reads into pandas as Spark's ``toPandas`` gives it."""
    return all(type(f.dataType) in _SAME_IN_PANDAS for f in schema.fields)


def _inserted_files(commit: delta_io.Appended,
                    actions: list[dict[str, Any]]) -> tuple[delta_io.AddedFile, ...] | None:
    """The data files holding the rows ``commit`` (read from its ``actions`` by the one rule,
    :func:`state.delta_io.appended_in`) inserted, in the order it added them: none for a
    commit that inserts nothing by what it is, the files it added when it only appended rows
    whose files hold them alone; else ``None``. A compaction's rewrites and schema changes
    pass: a rewrite adds no row, and a file's columns are matched to the table's by name when
    read."""
    if _inserts_nothing(actions):
        return ()
    return commit.files if commit.in_files_alone else None


def _inserts_nothing(actions: list[dict[str, Any]]) -> bool:
    """Whether the commit inserted no row, by its operation: an update or a delete (which the
    change feed shows as update images and deletions), or a merge whose own metrics count no
    inserted row. A commit without that record is not assumed to be one."""
    info = _commit_info(actions)
    operation = info.get("operation")
    metrics = info.get("operationMetrics") or {}
    return operation in _INSERT_NOTHING or (
        operation == "MERGE" and str(metrics.get("numTargetRowsInserted")) == "0")


@dataclass(frozen=True)
class CommitReading:
    """How the rows commit ``version`` inserted can be read (see :func:`readings`)."""

    version: int
    operation: str  # what the commit did, as its log records it ("WRITE", "MERGE", ...; "" if not)
    appended: bool  # all it did was add files (an append), whether or not they can be read directly
    from_files: bool  # from its log entry and the files it added, without the change feed
    from_feed: bool  # through the change data feed: it was on at this version

    @property
    def ways(self) -> frozenset[str]:
        """``"files"`` and/or ``"feed"``: the reads that can give this commit's rows."""
        return frozenset(way for way, can in (("files", self.from_files), ("feed", self.from_feed))
                         if can)


def readings(path: str, first: int, last: int) -> list[CommitReading] | None:
    """How each of commits ``first..last`` of the table at ``path`` can be read, from its log
    alone (no Spark): the table's metadata before ``first`` through delta-rs, then each commit's
    actions from its JSON file (delta-rs gives a commit's operation, not its actions). ``None``
    when the log cannot tell: the table is not on the local file system, or delta-rs can no
    longer read the version before ``first``. A commit whose JSON file is gone counts as
    readable through the feed: only Delta can say, and the read will."""
    local = tables.local_path(path)
    if local is None:
        return None
    metadata = delta_io.metadata_at(path, first - 1) if first > 0 else {}
    if metadata is None:
        return None
    commits = []
    for version in range(first, last + 1):
        actions = delta_io.commit_actions(path, version)
        # a commit's own metaData applies to it: Delta reads the feed from a version whose
        # snapshot has it on, so turning it on makes that very commit readable
        metadata = _last_metadata(actions or []) or metadata
        commits.append((version, actions, _feed_on(metadata) or actions is None))
    text = metadata.get("schemaString")  # the newest metadata: what the reader checks
    renames = text is not None and _renames_columns(T.StructType.fromJson(json.loads(text)))
    return [_reading(version, actions, feed, renames) for version, actions, feed in commits]


def _reading(version: int, actions: list[dict[str, Any]] | None, feed: bool,
             renames_columns: bool) -> CommitReading:
    """How commit ``version`` (its ``actions``; ``None``: its JSON is gone) can be read, the feed
    being on for it or not, the table giving columns other names in its files
    (:func:`_renames_columns`) or not."""
    commit = None if actions is None else delta_io.appended_in(version, actions)
    files = None if commit is None or renames_columns else _inserted_files(commit, actions or [])
    operation = str(_commit_info(actions or []).get("operation") or "")
    appended = commit is not None and commit.files is not None
    return CommitReading(version, operation, appended, files is not None, feed)


def readable_runs(commits: list[CommitReading]) -> tuple[list[int], CommitReading | None]:
    """Where to cut ``commits`` (consecutive, oldest first) so that one read serves each part:
    :func:`inserted_rows` reads a range from files when every commit allows it, else through
    the change feed, which must then hold every commit of the range. Returns the last version
    of each part, and the first commit no read can give (``None`` when there is none; the parts
    then end before it)."""
    ends: list[int] = []
    ways: frozenset[str] = frozenset()
    for commit in commits:
        if not commit.ways:
            if ways:
                ends.append(commit.version - 1)
            return ends, commit
        if ways and not ways & commit.ways:
            ends.append(commit.version - 1)
            ways = commit.ways
        else:
            ways = (ways & commit.ways) if ways else commit.ways
    if ways:
        ends.append(commits[-1].version)
    return ends, None


def feed_on(path: str) -> bool | None:
    """Whether the change data feed of the table at ``path`` is on now (read by delta-rs);
    ``None`` when there is no table or delta-rs does not serve its path."""
    return delta_io.feed_on(path)


def appends_read_without_spark(path: str, first: int, last: int) -> bool:
    """Whether :func:`inserted_rows` will read commits ``first..last`` of a table on an object
    store without Spark: they are all blind appends and the feed is on now (delta-rs reads
    an append's rows from the files it added). Where this is ``False``, only Spark can tell
    whether its change feed holds the range (:func:`feed_error`)."""
    return delta_io.on_object_store(path) and delta_io.reads_inserts(path, first, last)


def _commit_info(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """The commit's ``commitInfo`` action (what it did and its metrics); empty when it has none."""
    found: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    return found


def _feed_on(metadata: dict[str, Any]) -> bool:
    return delta_io.feed_enabled(dict(metadata.get("configuration") or {}))


def _renames_columns(schema: T.StructType) -> bool:
    """Whether a table's ``schema`` gives a column a name in its files other than its own
    (column mapping; a table that turned it on keeps its columns' names, a column added after
    that gets a name of its own): only Delta's readers know how to read it.

    >>> _renames_columns(T.StructType([T.StructField("k", T.LongType(), metadata={_PHYSICAL_NAME: "k"})]))
    False
    """
    return any(field.metadata.get(_PHYSICAL_NAME, field.name) != field.name for field in schema.fields)


def _last_metadata(actions: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [action["metaData"] for action in actions if "metaData" in action]
    return found[-1] if found else None
