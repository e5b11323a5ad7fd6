"""Delta I/O without Spark or a JVM, through delta-rs (``deltalake``): the one module that calls
it, for tables on the local file system and on object stores alike.

A micro-batch of a few rows spent most of its time in Delta commits made through Spark: each
plans a job, rebuilds the table's snapshot and writes through an executor (0.2-0.5 s warm, and a
batch makes three: its plan, its sink, its checkpoint). An append that only adds files, and a
read of a table's log, need none of that; on an object store (``s3://``, ``s3a://``; delta-rs
also reads ``gs://``, ``abfss://``, ``az://``) a Spark job per small append or log read made a
one-row batch take seconds on the local S3 server. delta-rs speaks the Delta protocol from this
process in a few S3 requests instead: opening a table is a ``LIST`` of its log plus the commits
since its checkpoint, following it is a ``LIST`` from the version it knows, an append is a
Parquet ``PUT`` and the commit file's ``PUT`` with ``If-None-Match: *``, so two writers can
never both write one version (the loser reads what the winner did and retries at the next
version, as Delta's optimistic concurrency does for blind appends).

Credentials, endpoint and region come from the standard AWS environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_PROFILE`` …), which delta-rs reads itself; nothing here handles a secret, and errors
carry the store's words with the bucket and path, never the request's credentials.

On a local disk delta-rs commits with an atomic create of the commit file, which fails as the
conditional put does. Anything delta-rs should not write here (see :func:`append`) goes through
Spark, and so does every table elsewhere (``hdfs://`` and the like).

What this process knows of a table (its snapshot) is cached and brought up to date from the
commits since, so a commit or a poll reads only what is new. A local table deleted and made
again at the same path is noticed (its commit file is not the one read) and read afresh; on an
object store that would cost a request per use, so there a table made again at the same path
with as many commits is not noticed until the cache forgets it (a process restart).

>>> on_object_store("s3a://lake/wh/p/_state"), on_object_store("hdfs://nn/wh"), on_object_store("/tmp/wh")
(True, False, False)
>>> serves("/tmp/wh/t"), serves("file:///tmp/wh/t"), serves("hdfs://nn/wh/t")
(True, True, False)
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.dataset
import pyarrow.fs
import pyarrow.parquet
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction

from .errors import StorageError

log = logging.getLogger(__name__)

_RETRIES = 20  # commits lost to other writers before giving up
_CACHED_TABLES = 256
_CACHED_COMMITS = 1000  # per table: what each commit did, as far back as a plan reads
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Delta's primitive types as Arrow writes them (a table delta-rs creates gets the same back).
ARROW_TYPES: dict[str, pa.DataType] = {
    "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
    "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(), "string": pa.string(),
    "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    # not "void" (Spark's type for a column typed from nothing but nulls): delta-rs would write
    # it into Parquet as a typed column, which no reader takes once a later batch gives the
    # column a type (mergeSchema); Spark writes no such column, so those tables are Spark's
}
# table features a blind append satisfies by what it is (only added files) and by the checks of
# `blind_append_refusal`; anything more is left to Spark, which enforces every feature Delta has
_WRITER_FEATURES = {"appendOnly", "invariants", "changeDataFeed"}
# Tables created here get a log checkpoint every 10 commits, as Spark writes them (delta-rs's
# default is 100): opening a table and checking a txn read the commits since the last
# checkpoint, one request each on S3.
_CHECKPOINT_EVERY = 10
_CREATED_PROPERTIES = {"delta.checkpointInterval": str(_CHECKPOINT_EVERY)}
# The columns Delta's change feed adds to a table's own.
_FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


# Per scheme, the prefix of the environment variables its object-store client reads its
# settings (credentials included) from: a task reaching an S3 table is given AWS's, not Azure's.
_STORE_VARIABLES = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_",
                    "abfs": "AZURE_", "abfss": "AZURE_", "az": "AZURE_", "azure": "AZURE_"}
#: The object stores delta-rs reaches (HDFS and the like stay with Spark).
OBJECT_STORE_SCHEMES = frozenset(_STORE_VARIABLES)
#: ``spark`` turns this module off for the pipeline's own appends and log reads on object
#: stores (they go through Spark, as before delta-rs): for comparing the two, or as a way out
#: should a store and delta-rs not get along.
IO_SETTING = "LAKESTREAM_OBJECT_STORE_IO"


def storage_environment(path: str, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """What this process reaches ``path``'s object store with: that store's variables in its
    ``environment`` (default: its own; credentials included, none of another store's) and
    :data:`IO_SETTING`, for a process that must reach the table as this one does (an
    executor's Python worker, whose environment is the one its JVM started with); empty for
    a local path.

    >>> seen = {"AWS_REGION": "eu-west-1", "AZURE_STORAGE_ACCOUNT_NAME": "other", "HOME": "/root"}
    >>> storage_environment("s3a://lake/wh/p/_state", seen), storage_environment("/tmp/wh", seen)
    ({'AWS_REGION': 'eu-west-1'}, {})
    """
    seen = os.environ if environment is None else environment
    if not on_object_store(path, seen):
        return {}
    prefix = _STORE_VARIABLES[urlparse(path).scheme]
    return {name: value for name, value in seen.items() if name.startswith(prefix) or name == IO_SETTING}


def adopt_storage_environment(settings: Mapping[str, str]) -> None:
    """Reach object stores with ``settings`` (from :func:`storage_environment`) from now on."""
    if any(os.environ.get(name) != value for name, value in settings.items()):
        os.environ.update(settings)
        with _cache_lock:  # tables opened with other settings open again with these
            _cache.clear()
            _stamps.clear()


def on_object_store(path: str, environment: Mapping[str, str] | None = None) -> bool:
    """Whether ``path`` is a URI of an object store this module serves, as ``environment``
    (default: this process's) sets :data:`IO_SETTING`."""
    setting = (os.environ if environment is None else environment).get(IO_SETTING, "delta-rs")
    return urlparse(path).scheme in OBJECT_STORE_SCHEMES and setting != "spark"


def local_path(path: str) -> str | None:
    """The file-system path of a local path or ``file:`` URI; ``None`` for other URIs.

    >>> local_path("file:///tmp/wh"), local_path("s3a://lake/wh")
    ('/tmp/wh', None)
    """
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    return None if "://" in path else path


def serves(path: str) -> bool:
    """Whether this module reads and writes the table at ``path``: on the local file system,
    or on an object store it serves."""
    return local_path(path) is not None or on_object_store(path)


@dataclass(frozen=True)
class Creation:
    """What an append that finds no table creates: ``fields`` in Delta's JSON form, partitioned
    by ``partition_by``, with table ``properties``."""

    fields: tuple[dict[str, Any], ...]
    partition_by: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()

    def arrow_schema(self) -> pa.Schema | None:
        """The columns as Arrow types; ``None`` when one is of a type left to Spark (nested,
        decimal, timestamps without time zone)."""
        kinds = [(spec["name"], spec["type"]) for spec in self.fields]
        if not all(isinstance(kind, str) and kind in ARROW_TYPES for _, kind in kinds):
            return None
        return pa.schema([(name, ARROW_TYPES[kind]) for name, kind in kinds])


_cache: OrderedDict[str, DeltaTable] = OrderedDict()
_stamps: dict[str, tuple[int, int] | None] = {}  # the commit file each cached table was read at
_appends: dict[str, dict[int, bool]] = {}  # per table, per version: a blind append?
_cache_lock = threading.Lock()
_table_locks: dict[str, threading.Lock] = {}


def table(path: str) -> DeltaTable | None:
    """The table at ``path`` as of its latest commit (``None``: no table there). A table this
    process opened before is brought up to date from the commits since, not read afresh."""
    with _lock_for(path):
        return _synced(path)


def latest_version(path: str) -> int:
    """The latest version of the table at ``path``; -1 when there is none."""
    found = table(path)
    return -1 if found is None else int(found.version())


def recent_metadata(path: str, commits: int = 10) -> list[str]:
    """``userMetadata`` of the last ``commits`` commits, newest first."""
    found = table(path)
    if found is None:
        return []
    history = _calling(path, "reading the history", lambda: found.history(commits))
    return [str(entry["userMetadata"]) for entry in history if entry.get("userMetadata")]


def schema_json(path: str) -> dict[str, Any] | None:
    """The table's schema in Delta's JSON form; ``None`` when there is no table."""
    found = table(path)
    return None if found is None else dict(json.loads(found.schema().to_json()))


def append(rows: pd.DataFrame, path: str, *, txn: tuple[str, int] | None = None,
           user_metadata: str | None = None, create: Creation | None = None) -> bool | None:
    """Append ``rows`` to the table at ``path`` in one commit; ``True`` when committed, ``False``
    when skipped (the table has seen ``txn``'s version, or a later one, for its app id), ``None``
    when this writer leaves the append to Spark: the table's protocol asks for more than a blind
    append, the rows do not have exactly its columns, or there is no table and ``create`` is not
    given or has a column of a type left to Spark.

    Idempotence is Delta's ``txn`` action: checked against the snapshot the commit is made on,
    and written with it, so a racing writer with the same app id makes this commit fail (then
    it is read again and checked again)."""
    with _lock_for(path):
        current = _synced(path)
        try:
            return _append_to(current, rows, path, txn, user_metadata, create)
        except StorageError as failure:
            if current is not None and _synced(path, fresh=True) is None:
                raise StorageError(f"{path}: the table is gone (deleted while this run was "
                                   f"writing it); nothing was committed to it. {failure}") from failure
            raise


def _append_to(current: DeltaTable | None, rows: pd.DataFrame, path: str, txn: tuple[str, int] | None,
               user_metadata: str | None, create: Creation | None) -> bool | None:
    """:func:`append` once the table is read (``current``; ``None``: no table yet)."""
    def attempt(current: DeltaTable | None) -> bool | None:
        data = _arrow(rows, current, create)
        if data is None:
            return None
        _write(path, current, data, txn, user_metadata, create)
        return True
    return _retrying(path, current, txn, "appending to", attempt)


def _retrying(path: str, current: DeltaTable | None, txn: tuple[str, int] | None, doing: str,
              attempt: Callable[[DeltaTable | None], bool | None]) -> bool | None:
    """``attempt(current)`` (a commit), ``False`` instead when the table has seen ``txn``; a
    commit that loses a race with another writer's is read again and attempted again."""
    for _ in range(_RETRIES):
        if txn is not None and current is not None and _has_seen(path, current, txn):
            return False
        try:
            return attempt(current)
        except CommitFailedError as conflict:  # another writer's commit conflicts: read it
            log.debug("%s %s lost a race, retrying: %s", doing, path, conflict)
            current = _synced(path, fresh=True)
    raise StorageError(f"{doing} {path} lost {_RETRIES} races with other writers in a row; "
                       "is another run of this pipeline writing the same table?")


def file_schema(path: str, partitioned: bool = True) -> pa.Schema | None:
    """The columns of a data file :func:`write_file` writes for the table at ``path`` (the
    table's, less its partition columns, as Arrow types), when this module may append to it
    (see :func:`append`); ``None`` when there is no table or its appends are Spark's, and, with
    ``partitioned=False``, when the table is partitioned."""
    found = table(path)
    if found is None or (not partitioned and found.metadata().partition_columns):
        return None
    return _file_schema(found)


def _file_schema(found: DeltaTable) -> pa.Schema | None:
    schema = _writable_schema(found)
    if schema is None:
        return None
    for column in found.metadata().partition_columns:
        schema = schema.remove(schema.get_field_index(column))
    return schema


def write_file(path: str, rows: pa.Table, partition: Mapping[str, str],
               statistics: Iterable[str] = (), dictionary: Iterable[str] | None = None) -> str:
    """Write ``rows`` as a new Parquet data file of the table at ``path`` without committing
    it, and return its add action (JSON) for :func:`commit_files`: how many processes write a
    commit's files (Spark's executors, say) while one commits them. ``partition``: the file's
    partition values (not columns of ``rows``); ``statistics``: the integer columns whose
    minimum, maximum and null count the action records, which readers prune files by;
    ``dictionary``: the columns to dictionary-encode (default: the text and binary ones). A
    file no commit names is never read (a vacuum removes it)."""
    # a partition's folder only for plain values (the log's path would need escaping else)
    folder = "/".join(f"{column}={value}" for column, value in partition.items()
                      if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_]+", value))
    name = f"{folder}/part-{uuid.uuid4()}.snappy.parquet".lstrip("/")
    encoded = list(dictionary) if dictionary is not None else [
        field.name for field in rows.schema if _repeats(field.type)]
    files = pyarrow.fs.PyFileSystem(DeltaStorageHandler(_location(path)))

    def write() -> int:
        # encoded in memory first: its size is known without asking the store (a HEAD each)
        encoded_file = pa.BufferOutputStream()
        pyarrow.parquet.write_table(rows, encoded_file, compression="snappy", use_dictionary=encoded)
        data = encoded_file.getvalue()
        # through a buffer larger than the file: delta-rs's stream takes bytes, which is what a
        # buffered stream flushes (an unbuffered one passes an Arrow buffer, which it refuses)
        with files.open_output_stream(name, buffer_size=data.size + 1) as out:
            out.write(data)
        return int(data.size)

    size = _calling(path, "writing a data file of", write)
    return json.dumps({"path": name, "size": size, "partition_values": dict(partition),
                       "modification_time": int(time.time() * 1000), "data_change": True,
                       "stats": json.dumps(_file_statistics(rows, statistics))})


def _writer_properties(schema: pa.Schema) -> WriterProperties:
    """How delta-rs writes a data file of ``schema``: as :func:`write_file` does (snappy,
    dictionaries only where values repeat: 0.16 s against 0.13 s for 1M rows of six int64s)."""
    return WriterProperties(
        compression="SNAPPY", default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={field.name: ColumnProperties(dictionary_enabled=True)
                           for field in schema if _repeats(field.type)})


def _repeats(kind: pa.DataType) -> bool:
    """Whether a column of ``kind`` is worth a dictionary: text and binary values repeat
    (names, codes, states); numbers rarely do, and a dictionary of distinct numbers cost
    4× the time to write and made the file a third larger (125k random int64s)."""
    return any(check(kind) for check in (pa.types.is_string, pa.types.is_large_string,
                                         pa.types.is_binary, pa.types.is_large_binary,
                                         pa.types.is_dictionary))


def _file_statistics(rows: pa.Table, columns: Iterable[str]) -> dict[str, Any]:
    """A data file's ``stats`` as Delta's log holds them, for ``columns`` (integers)."""
    least, most, nulls = {}, {}, {}
    for column in columns:
        nulls[column] = rows[column].null_count
        extremes = pyarrow.compute.min_max(rows[column]).as_py()
        if extremes["min"] is not None:
            least[column], most[column] = extremes["min"], extremes["max"]
    return {"numRecords": rows.num_rows, "minValues": least, "maxValues": most, "nullCount": nulls}


def commit_files(path: str, actions: list[str], schema: pa.Schema, *,
                 txn: tuple[str, int] | None = None, user_metadata: str | None = None) -> bool:
    """Commit the data files :func:`write_file` wrote (``actions``, in the columns ``schema``
    that :func:`file_schema` gave) to the table at ``path`` in one commit; ``True`` when
    committed, ``False`` when skipped because the table has seen ``txn`` (as :func:`append`).
    A table whose columns or protocol changed since (so that it no longer takes those files)
    raises :class:`StorageError`, with nothing committed.

    >>> import tempfile
    >>> path = tempfile.mkdtemp()
    >>> write_deltalake(path, pa.table({"x": pa.array([1], pa.int64())}))
    >>> written = [write_file(path, pa.table({"x": pa.array([n], pa.int64())}), {}, ["x"])
    ...            for n in (2, 3)]  # by two processes, say
    >>> commit_files(path, written, file_schema(path), txn=("app", 1))
    True
    >>> commit_files(path, written, file_schema(path), txn=("app", 1))  # seen: skipped
    False
    >>> sorted(pa.table(table(path).to_pyarrow_table())["x"].to_pylist()), latest_version(path)
    ([1, 2, 3], 1)
    """
    adds: list[AddAction | RemoveAction] = [AddAction(**json.loads(action)) for action in actions]

    def attempt(current: DeltaTable | None) -> bool:
        if current is None:
            raise StorageError(f"{path}: the table is gone (deleted while this run was writing "
                               "it); nothing was committed to it")
        takes = _file_schema(current)
        if takes != schema:
            raise StorageError(f"{path}: the table changed while this batch was written (its "
                               f"columns or protocol: it now takes {takes}, the "
                               f"batch's files hold {schema}); nothing was committed to it, and "
                               "the next run writes the batch again")
        _calling(path, "committing files to", lambda: current.create_write_transaction(
            adds, mode="append", schema=current.schema(),
            partition_by=current.metadata().partition_columns or None,
            commit_properties=_commit_properties(txn, user_metadata)))
        _calling(path, "reading the log", current.update_incremental)  # to the version made
        _remember(path, current)
        _checkpoint_now_and_then(path, current)
        return True
    with _lock_for(path):
        return bool(_retrying(path, _synced(path), txn, "committing files to", attempt))


@dataclass(frozen=True)
class Upsert:
    """How :func:`upsert` merges rows into a table that holds the latest row per key: a row
    replaces the table's row of the same ``keys`` when its ``version`` column is at least the
    table row's (so replaying a batch changes nothing), and removes it when its ``change``
    column is ``deleted``; a key the table lacks is inserted unless the row deletes it. The
    ``change`` column is the rows' alone: the table has every other column of the rows."""

    keys: tuple[str, ...]
    version: str
    change: str
    deleted: str = "delete"

    # The clauses, in the SQL both delta-rs's and Spark's MERGE read (target ``t``, source ``s``)
    def predicate(self) -> str:
        """Which table row a row of the rows is about: the same keys.

        >>> Upsert(("k",), version="v", change="c").predicate()
        't.`k` = s.`k`'
        """
        return " AND ".join(f"t.{_quoted(key)} = s.{_quoted(key)}" for key in self.keys)

    def newer(self) -> str:
        """When a matched row changes the table's: its version is at least the table row's."""
        return f"s.{_quoted(self.version)} >= t.{_quoted(self.version)}"

    def deleted_when(self) -> str:
        """When a matched row removes the table's."""
        return f"{self.newer()} AND s.{_quoted(self.change)} = '{self.deleted}'"

    def inserted_when(self) -> str:
        """When a row for a key the table lacks is inserted."""
        return f"s.{_quoted(self.change)} != '{self.deleted}'"

    def assignments(self, columns: Iterable[str]) -> dict[str, str]:
        """Each table column set from the row's, for ``columns`` (the rows' own)."""
        return {_quoted(name): f"s.{_quoted(name)}" for name in columns if name != self.change}


def _quoted(column: str) -> str:
    """A column name as delta-rs's SQL reads it literally (case kept, any characters)."""
    return "`" + column.replace("`", "``") + "`"


def upsert(rows: pd.DataFrame, path: str, how: Upsert, *, creation: Creation | None = None) -> bool | None:
    """Merge ``rows`` into the table at ``path`` in one commit, as ``how`` says; ``True`` when
    done, ``None`` when this writer leaves the merge to Spark: the table asks for more than a
    copy-on-write merge of plain columns (see :func:`merge_refusal`), ``rows`` lack one of its
    columns, or there is no table and ``creation`` is not given or has a column of a type left
    to Spark.

    A commit that loses to another writer's is tried again on the table as that one left it;
    the version rule keeps the outcome the same.
    """
    with _lock_for(path):
        current = _synced(path)  # one read of the log per batch, as an append makes
        if current is not None:
            return _merge_retrying(path, current, rows, how)
    if creation is None or not create(path, creation):
        return None
    with _lock_for(path):
        return _merge_retrying(path, _synced(path), rows, how)


def _merge_retrying(path: str, current: DeltaTable | None, rows: pd.DataFrame, how: Upsert) -> bool | None:
    """:func:`upsert` once the table is read (under its lock): one merge, planned again on the
    table as a racing writer left it, as often as races are lost."""
    def attempt(current: DeltaTable | None) -> bool | None:
        data = None if current is None else _merge_source(rows, current, how)
        if current is None or data is None:
            return None
        _merge(path, current, data, how)
        return True
    return _retrying(path, current, None, "merging into", attempt)


def _merge_source(rows: pd.DataFrame, current: DeltaTable, how: Upsert) -> pa.Table | None:
    """``rows`` as Arrow in the table's column types (and the change column as text), or
    ``None`` when the merge is left to Spark."""
    refused = merge_refusal(current.metadata().configuration or {})
    if refused is not None:
        log.debug("merge left to Spark: %s", refused)
        return None
    schema = _writable_schema(current)
    return None if schema is None else _as_arrow(rows, schema.append(pa.field(how.change, pa.string())))


def merge_refusal(configuration: Mapping[str, str]) -> str | None:
    """Why this writer leaves a merge into a table of ``configuration`` to Spark, beyond what
    it refuses for a blind append (``None``: nothing more): an append-only table (Spark
    raises the user's error) or one whose change feed is on (a merge must then write change
    files). A merge here rewrites the files holding matched keys, as Spark's does without
    deletion vectors (a table with them asks for a protocol this writer refuses).

    >>> merge_refusal({"delta.enableChangeDataFeed": "true"})
    'the change data feed is on'
    >>> merge_refusal({}) is None
    True
    """
    if configuration.get("delta.appendOnly", "false").lower() == "true":
        return "an append-only table"
    if feed_enabled(configuration):
        return "the change data feed is on"
    return None


def _merge(path: str, current: DeltaTable, data: pa.Table, how: Upsert) -> None:
    """One merge commit of ``data`` into ``current`` (raising ``CommitFailedError`` when another
    writer's commit came first: no retry inside, the caller reads the table again)."""
    columns = how.assignments(data.schema.names)
    merging = (current.merge(data, how.predicate(), source_alias="s", target_alias="t",
                             commit_properties=CommitProperties(max_commit_retries=0))
               .when_matched_delete(predicate=how.deleted_when())
               .when_matched_update(columns, predicate=how.newer())
               .when_not_matched_insert(columns, predicate=how.inserted_when()))
    _calling(path, "merging into", merging.execute)
    _remember(path, current)
    _checkpoint_now_and_then(path, current)


def _has_seen(path: str, current: DeltaTable, txn: tuple[str, int]) -> bool:
    # None: never (and 0 is a version like any other)
    seen = _calling(path, "reading the transactions of", lambda: current.transaction_version(txn[0]))
    return seen is not None and seen >= txn[1]


def metadata_at(path: str, version: int) -> dict[str, Any] | None:
    """The table's ``configuration`` and ``schemaString`` as of ``version``, as the log's
    ``metaData`` action holds them; ``None`` when there is no table or its log no longer holds
    that version (cleaned up after a checkpoint)."""
    try:
        found = _calling(path, f"reading version {version} of",
                         lambda: DeltaTable(_location(path), version=version))
    except (TableNotFoundError, StorageError) as missing:
        log.debug("metadata of %s at version %d unknown: %s", path, version, missing)
        return None
    return {"configuration": dict(found.metadata().configuration or {}),
            "schemaString": found.schema().to_json()}


def commit_times(path: str, first: int, last: int) -> dict[int, int]:
    """The time (epoch ms) each of commits ``first..last`` of the table at ``path`` was made,
    from its ``commitInfo`` (a publish's time, for a callback source's inbox); a commit the
    log no longer holds (cleaned up by log retention) is left out."""
    found = table(path)
    if found is None or last < first:
        return {}
    newest = int(found.version())
    entries = _calling(path, "reading the history of",
                       lambda: found.history(max(newest - first + 1, 1)))
    return {int(entry["version"]): int(entry["timestamp"]) for entry in entries
            if "version" in entry and "timestamp" in entry and first <= int(entry["version"]) <= last}


def commit_actions(path: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version`` of the local table at ``path``, from its JSON file;
    ``None`` when that file is gone (cleaned up by log retention) or the table is not local.
    The one read of the log by hand: delta-rs gives a commit's operation (its history) but not
    its actions, which tell the files an append added (read by :mod:`state.appended`)."""
    local = local_path(path)
    if local is None:
        return None
    try:
        with open(os.path.join(local, "_delta_log", f"{version:020d}.json")) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return None


#: The table property that turns the change data feed on.
FEED_PROPERTY = "delta.enableChangeDataFeed"


def feed_enabled(configuration: Mapping[str, Any]) -> bool:
    """Whether a table ``configuration`` (its properties) turns the change data feed on.

    >>> feed_enabled({FEED_PROPERTY: "TRUE"}), feed_enabled({})
    (True, False)
    """
    return str(configuration.get(FEED_PROPERTY, "false")).lower() == "true"


def feed_on(path: str) -> bool | None:
    """Whether the table's change data feed is on as of its latest commit; ``None`` when there
    is no table."""
    found = table(path)
    return None if found is None else feed_enabled(found.metadata().configuration or {})


def reads_inserts(path: str, first: int, last: int) -> bool:
    """Whether :func:`inserted_rows` gives commits ``first..last``: the feed is on now and they
    are all blind appends (:func:`_blind_appends`)."""
    found = table(path)
    return found is not None and _reads_inserts(path, found, first, last)


def _reads_inserts(path: str, found: DeltaTable, first: int, last: int) -> bool:
    return feed_enabled(found.metadata().configuration or {}) and \
        _blind_appends(path, found, first, last)


def _blind_appends(path: str, found: DeltaTable, first: int, last: int) -> bool:
    """Whether commits ``first..last`` of ``found`` all only appended rows, as their
    ``commitInfo`` says (Spark's and delta-rs's appends record ``mode: Append``; Spark's also
    ``isBlindAppend``): the rows they inserted are then the files they added, whether or not
    the feed was on when they were made. One small read per commit not read before (a commit
    never changes)."""
    newest = int(found.version())
    if last < first or newest < last:
        return False
    with _cache_lock:
        known = dict(_appends.get(path, {}))
    if any(version not in known for version in range(first, last + 1)):
        entries = _calling(path, "reading the history of", lambda: found.history(newest - first + 1))
        known.update({int(entry["version"]): _is_blind_append(entry) for entry in entries
                      if "version" in entry})
        with _cache_lock:
            _appends[path] = {version: known[version] for version in sorted(known)[-_CACHED_COMMITS:]}
    return all(known.get(version) for version in range(first, last + 1))


def _is_blind_append(info: Mapping[str, Any]) -> bool:
    parameters = info.get("operationParameters") or {}
    return info.get("isBlindAppend") is True or (
        info.get("operation") in ("WRITE", "STREAMING UPDATE")
        and "Append" in (parameters.get("mode"), parameters.get("outputMode")))


def inserted_rows(path: str, first: int, last: int) -> pa.Table | None:
    """The rows commits ``first..last`` inserted, read from the files they added, with their
    commit version first (``_commit_version``, int64), in commit order; ``None`` when there is
    no table, a commit of the range did more than append (:func:`_blind_appends`) or the feed
    is off now. Then only Spark's change feed can give them: it knows at which versions the feed was
    on, where delta-rs takes the files a commit added and removed for its changes, which for a
    MERGE made while the feed was off are not the rows it inserted."""
    found = table(path)
    if found is None or not _reads_inserts(path, found, first, last):
        return None
    try:
        changes = found.load_cdf(starting_version=first, ending_version=last)
    except DeltaError as refused:
        if "not enabled" in str(refused):  # a commit of the range turned the feed off
            return None
        raise StorageError(_describe(path, f"reading the changes of versions {first}-{last} of",
                                     refused)) from refused
    except OSError as failed:
        raise StorageError(_describe(path, f"reading the changes of versions {first}-{last} of",
                                     failed)) from failed
    feed = _plain(pa.table(changes))
    inserts = feed.filter(pa.compute.equal(feed["_change_type"], "insert"))
    rows = inserts.select([name for name in inserts.column_names if name not in _FEED_COLUMNS])
    return rows.add_column(0, "_commit_version", inserts["_commit_version"].cast(pa.int64()))


def data_files(path: str) -> tuple[int, dict[str, int]]:
    """The table's latest version (-1: no table) and its data files as of that version, each
    with the time it was added (epoch ms): what a follower compares from one poll to the next
    to find the files a commit added or removed, with or without the change feed. No request
    beyond bringing the table up to date: delta-rs holds the files of the version it read."""
    found = table(path)
    if found is None:
        return -1, {}
    actions = pa.table(found.get_add_actions(flatten=True))
    return int(found.version()), dict(zip(actions["path"].to_pylist(),
                                          actions["modification_time"].cast(pa.int64()).to_pylist()))


def read_data_files(path: str, names: list[str], columns: list[str] | None = None,
                    partition: tuple[str, Any] | None = None) -> pa.Table:
    """The rows of the table's data files ``names`` (paths as the log gives them), in that
    order (only ``columns``, when given): files of the version :func:`data_files` or
    :func:`file_statistics` just gave, read from the snapshot it brought up to date (not
    brought up to date again: a commit in between could remove them). ``partition=(column,
    value)`` when every file is in that partition: only its files are made into fragments."""
    with _cache_lock:
        found = _cache.get(path)
    if found is None:
        found = table(path)
    if found is None or not names:
        return pa.table({})
    pruning = [(partition[0], "=", partition[1])] if partition is not None else None
    dataset = _calling(path, "reading", lambda: found.to_pyarrow_dataset(file_pruning_predicate=pruning))
    by_name = {fragment.path: fragment for fragment in dataset.get_fragments()}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise StorageError(f"{path}: data file {missing[0]!r} is not in the table's version "
                           f"{found.version()}")
    chosen = pyarrow.dataset.FileSystemDataset([by_name[name] for name in names], dataset.schema,
                                               dataset.format, dataset.filesystem)
    return _plain(_calling(path, "reading", lambda: chosen.to_table(columns=columns)))


def file_statistics(path: str) -> pa.Table | None:
    """The data files of the table's latest version with what the log says of each: ``path``,
    ``num_records``, ``partition.<column>``, and ``min.<column>``, ``max.<column>``,
    ``null_count.<column>`` for the columns it keeps statistics of (null where it keeps none).
    ``None`` when there is no table, when this module does not serve it (:func:`serves`), or
    when reading its files is not all it takes to read its rows (deletion vectors, column
    mapping): then only Spark reads it right."""
    found = table(path) if serves(path) else None
    if found is None or not _files_are_rows(found):
        return None
    return pa.table(_calling(path, "reading the log", lambda: found.get_add_actions(flatten=True)))


def newest_rows(path: str, column: str, partition: tuple[str, Any] | None = None,
                columns: list[str] | None = None) -> pa.Table | None:
    """The rows holding the largest value of integer ``column`` (in ``partition=(column,
    value)``), reading only the files whose statistics say they hold it; ``None`` when a file
    has no statistics for it, there are no rows, or there is no table this module reads by its
    files (see :func:`file_statistics`)."""
    files = _files_of(path, partition)
    if files is None or f"max.{column}" not in files.column_names or len(files) == 0:
        return None
    highest = files[f"max.{column}"]
    if highest.null_count:
        return None
    return _rows_from(path, files, column, int(pa.compute.max(highest).as_py()), partition, columns)


def rows_at_least(path: str, column: str, lowest: int, partition: tuple[str, Any] | None = None,
                  columns: list[str] | None = None) -> pa.Table | None:
    """The rows whose integer ``column`` is at least ``lowest`` (in ``partition``), reading
    only the files whose statistics allow such rows; ``None`` when there is no table this
    module reads by its files (see :func:`file_statistics`)."""
    files = _files_of(path, partition)
    return None if files is None else _rows_from(path, files, column, lowest, partition, columns)


def _files_of(path: str, partition: tuple[str, Any] | None) -> pa.Table | None:
    files = file_statistics(path)
    if files is None or partition is None:
        return files
    return files.filter(pa.compute.equal(files[f"partition.{partition[0]}"], partition[1]))


def _rows_from(path: str, files: pa.Table, column: str, lowest: int,
               partition: tuple[str, Any] | None, columns: list[str] | None) -> pa.Table:
    """The rows of ``files`` whose ``column`` is at least ``lowest``, skipping the files whose
    statistics rule them out."""
    if f"max.{column}" in files.column_names:
        files = files.filter(pa.compute.fill_null(
            pa.compute.greater_equal(files[f"max.{column}"], lowest), True))
    reading = None if columns is None else list(dict.fromkeys([*columns, column]))
    rows = read_data_files(path, files["path"].to_pylist(), reading, partition)
    if rows.num_rows == 0:
        return rows
    return rows.filter(pa.compute.greater_equal(rows[column], lowest))


def _files_are_rows(found: DeltaTable) -> bool:
    """Whether the table's rows are its data files' rows, as they are in Parquet (no deletion
    vectors or column mapping, which a reader must apply)."""
    protocol = found.protocol()
    if protocol.min_reader_version == 1:
        return True
    return set(protocol.reader_features or ()) <= {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}


def snapshot(path: str, equal: tuple[str, Any] | None = None) -> tuple[int, pa.Table]:
    """The table's latest version and its rows (-1 and an empty table when there is none);
    with ``equal=(column, value)``, the rows where ``column == value``, reading only the files
    whose statistics allow such rows."""
    found = table(path)
    if found is None:
        return -1, pa.table({})
    filters = [(equal[0], "=", equal[1])] if equal is not None else None
    rows = _calling(path, "reading", lambda: found.to_pyarrow_table(filters=filters))
    return int(found.version()), _plain(rows)


def _plain(rows: pa.Table) -> pa.Table:
    """``rows`` with string and binary views as the plain types pandas and Spark's Parquet give."""
    views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return rows.cast(pa.schema([(field.name, views.get(field.type, field.type)) for field in rows.schema]))


def create(path: str, creation: Creation) -> bool:
    """Create an empty table at ``path`` unless one is there; ``False`` when ``creation`` has a
    column of a type left to Spark. Two processes racing to create it both succeed: the
    commit of version 0 is a conditional put, and the loser finds the winner's table."""
    schema = creation.arrow_schema()
    if schema is None:
        return False
    with _lock_for(path):
        if _synced(path) is not None:
            return True
        try:  # no retry: a retried creation would commit a second version 0 as version 1
            _calling(path, "creating the table", lambda: DeltaTable.create(
                _location(path), schema, mode="ignore", partition_by=list(creation.partition_by) or None,
                configuration={**_CREATED_PROPERTIES, **dict(creation.properties)},
                commit_properties=CommitProperties(max_commit_retries=0)))
        except CommitFailedError:
            pass  # another writer created it first: that is fine
        _forget(path)
    return True


def _write(path: str, current: DeltaTable | None, data: pa.Table, txn: tuple[str, int] | None,
           user_metadata: str | None, create: Creation | None) -> None:
    properties = _commit_properties(txn, user_metadata)
    if current is not None:
        _calling(path, "appending", lambda: write_deltalake(
            current, data, mode="append", commit_properties=properties,
            writer_properties=_writer_properties(data.schema)))
        _remember(path, current)
        _checkpoint_now_and_then(path, current)
        return
    assert create is not None  # _arrow gave no data for a missing table without it
    _calling(path, "creating the table", lambda: write_deltalake(
        _location(path), data, mode="append", partition_by=list(create.partition_by) or None,
        configuration={**_CREATED_PROPERTIES, **dict(create.properties)},
        commit_properties=properties, writer_properties=_writer_properties(data.schema)))
    _forget(path)  # opened on the next use, as the table it made


def _commit_properties(txn: tuple[str, int] | None, user_metadata: str | None) -> CommitProperties:
    """A commit's ``txn`` action (idempotence) and ``userMetadata``."""
    return CommitProperties(
        app_transactions=[Transaction(app_id=txn[0], version=txn[1])] if txn else None,
        custom_metadata={"userMetadata": user_metadata} if user_metadata is not None else None)


def _checkpoint_now_and_then(path: str, current: DeltaTable) -> None:
    """Every tenth version of a table without ``delta.checkpointInterval`` (one Spark made),
    write the log checkpoint Spark's own commit would have written (delta-rs's own default is
    every hundredth), so neither reader replays a long log. delta-rs checkpoints the tables it
    made itself (they carry the property)."""
    version = int(current.version())
    if version % _CHECKPOINT_EVERY or "delta.checkpointInterval" in (current.metadata().configuration or {}):
        return
    try:
        current.create_checkpoint()
    except (OSError, DeltaError):  # a missed checkpoint costs reading time, never data
        log.warning("log checkpoint of %s at version %d failed", path, version, exc_info=True)


def _arrow(rows: pd.DataFrame, current: DeltaTable | None, create: Creation | None) -> pa.Table | None:
    """``rows`` as Arrow in the table's column types, or ``None`` when this writer must leave
    the append to Spark."""
    if current is None:
        schema = create.arrow_schema() if create is not None else None
    else:
        schema = _writable_schema(current)
    return None if schema is None else _as_arrow(rows, schema)


def _as_arrow(rows: pd.DataFrame, schema: pa.Schema) -> pa.Table | None:
    """``rows`` as Arrow in ``schema``'s types, when they have exactly its columns and Arrow
    takes their values (else ``None``: the write is left to Spark)."""
    if set(rows.columns) != set(schema.names) or rows.columns.duplicated().any():
        return None
    try:
        return pa.Table.from_pandas(rows, schema=schema, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as error:  # values Arrow cannot take
        log.debug("write left to Spark: %s", error)
        return None


def _writable_schema(current: DeltaTable) -> pa.Schema | None:
    """The table's columns as Arrow types, when a blind append by this writer is all its
    protocol and metadata ask for; else ``None``."""
    protocol = current.protocol()
    fields = json.loads(current.schema().to_json())["fields"]
    refused = blind_append_refusal(protocol.min_reader_version, protocol.min_writer_version,
                                   set(protocol.writer_features or ()),
                                   current.metadata().configuration or {}, fields, set(ARROW_TYPES))
    if refused is not None:
        log.debug("append left to Spark: %s", refused)
        return None
    return Creation(tuple(fields)).arrow_schema()


def blind_append_refusal(reader: int, writer: int, features: set[str], configuration: Mapping[str, str],
                         fields: list[dict[str, Any]], types: set[str]) -> str | None:
    """Why a writer that only adds files must leave a table to Spark (``None``: it need not):
    a protocol beyond reader 1 and writer 4 (or 7 with no feature a blind append does not
    satisfy), CHECK constraints, column mapping, a NOT NULL, generated, identity or invariant
    column, or a column of a type not in ``types``.

    >>> blind_append_refusal(1, 2, set(), {}, [{"name": "k", "type": "long"}], {"long"}) is None
    True
    >>> blind_append_refusal(3, 7, {"deletionVectors"}, {}, [], {"long"})
    "protocol (3, 7, ['deletionVectors'])"
    """
    if reader > 1 or (writer > 4 and (writer != 7 or not features <= _WRITER_FEATURES)):
        return f"protocol ({reader}, {writer}, {sorted(features)})"
    if any(key.startswith("delta.constraints.") for key in configuration):
        return "CHECK constraints"
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return "column mapping"
    for spec in fields:
        meta = spec.get("metadata") or {}
        if not spec.get("nullable", True) or any(
                key.startswith(("delta.generationExpression", "delta.identity", "delta.invariants"))
                for key in meta):
            return f"column {spec['name']!r} has a constraint"
        if not isinstance(spec["type"], str) or spec["type"] not in types:
            return f"column {spec['name']!r} is of type {spec['type']}"
    return None


def _lock_for(path: str) -> threading.Lock:
    with _cache_lock:
        return _table_locks.setdefault(path, threading.Lock())


def _synced(path: str, fresh: bool = False) -> DeltaTable | None:
    """The cached table brought up to date, or the table opened (``None``: none there)."""
    with _cache_lock:
        cached = None if fresh else _cache.get(path)
    if cached is not None and _stamp(path, cached) == _stamps.get(path):
        try:
            _calling(path, "reading the log", cached.update_incremental)
            _remember(path, cached)
            return cached
        except StorageError:
            if not _served_locally(path):
                raise
            # a local table deleted and made again with fewer commits: read it afresh
    try:
        opened = _calling(path, "opening the table", lambda: DeltaTable(_location(path)))
    except TableNotFoundError:
        _forget(path)
        return None
    with _cache_lock:
        _cache[path] = opened
        _cache.move_to_end(path)
        while len(_cache) > _CACHED_TABLES:
            forgotten, _ = _cache.popitem(last=False)
            _stamps.pop(forgotten, None)
            _appends.pop(forgotten, None)
    _remember(path, opened)
    return opened


def _location(path: str) -> str:
    """``path`` as delta-rs opens it: an absolute path for a local table."""
    local = local_path(path)
    return path if local is None else os.path.abspath(local)


def _served_locally(path: str) -> bool:
    return local_path(path) is not None


def _stamp(path: str, found: DeltaTable) -> tuple[int, int] | None:
    """The inode and size of the commit file of ``found``'s version, for a local table (what
    tells a table made again at the same path from the one read); ``None`` elsewhere."""
    local = local_path(path)
    if local is None:
        return None
    try:
        status = os.stat(os.path.join(local, "_delta_log", f"{found.version():020d}.json"))
    except FileNotFoundError:
        return (-1, -1)
    return status.st_ino, status.st_size


def _remember(path: str, found: DeltaTable) -> None:
    with _cache_lock:
        _stamps[path] = _stamp(path, found)


def _forget(path: str) -> None:
    with _cache_lock:
        _cache.pop(path, None)
        _stamps.pop(path, None)
        _appends.pop(path, None)  # a table made again at this path reuses its version numbers


def _calling(path: str, doing: str, call: Any) -> Any:
    """``call()``, with an object store's failure raised as :class:`StorageError` naming the
    bucket, the path and what was being done (a missing table passes as it is)."""
    try:
        return call()
    except (TableNotFoundError, CommitFailedError):
        raise  # not a failure of the store: no table there / another writer's commit won
    except (OSError, DeltaError) as exc:
        raise StorageError(_describe(path, doing, exc)) from exc


def _describe(path: str, doing: str, error: BaseException) -> str:
    """A one-paragraph account of a failed call: the path (and an object store's bucket), what
    was being done, and the store's own words (without terminal colours or the request's
    headers)."""
    words = " ".join(_ANSI.sub("", str(error)).split())
    if _served_locally(path):
        return f"{doing} {path} failed: {words[:600]}"
    where = urlparse(path)
    return (f"{doing} {path} failed (bucket {where.netloc!r}, path {where.path.lstrip('/')!r}): "
            f"{words[:600]}. Check that the bucket exists, the endpoint (AWS_ENDPOINT_URL) "
            "answers and the credentials in the AWS environment may read and write it.")
