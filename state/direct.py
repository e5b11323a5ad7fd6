"""Blind appends to a Delta table committed by this process, without Spark.

A table on an object store is appended to through delta-rs (:mod:`state.delta_io`, which
commits with S3's conditional put); a local one as follows.

A micro-batch of a few rows spends most of its time in Delta commits made through Spark: each
plans a job, rebuilds the table's snapshot and writes through an executor (0.2-0.5 s warm, and
a batch makes three: its plan, its sink, its checkpoint). An append that only adds files needs
none of that: write the Parquet file with pyarrow, then the commit file (``commitInfo``, an
optional ``txn`` and the ``add`` actions) under the next version with an atomic create, which
fails if another writer took that version first (then the commits in between are read and the
append retried after them, as Delta's optimistic concurrency does for blind appends).

It is used only where that is exactly what Delta's protocol asks of a writer; anything else
(:func:`append` returns ``None``) goes through Spark:

- the table is on the local file system. It exists, or the append creates it (version 0 then
  holds the protocol and the metadata as well) when the caller describes the table
  (:class:`NewTable`), its columns are of the types below and its properties need no more than
  Delta's base protocol (reader 1, writer 2);
- its protocol is reader version 1 and writer version 4 or lower, or 7 with the features
  ``appendOnly``, ``invariants`` and ``changeDataFeed`` at most; and nothing this writer would
  have to enforce: no CHECK constraints, generated or identity columns, column mapping, NOT
  NULL columns or invariants (an add-only commit needs no change-data files even with the
  change data feed on: readers derive inserts from the added files);
- the rows have exactly the table's columns, each of a plain type (numbers, booleans,
  strings, binary, dates, timestamps, or ``void``: a column Spark typed from nothing but
  nulls, which no data file stores);
- the partition values are plain names (letters, digits, ``_ . -``), so no path escaping.

Idempotence is Delta's own: with ``txn=(app_id, version)`` the append is skipped when the table
has seen that version (or a later one) for ``app_id``, and the commit records it. What a table's
log says (protocol, schema, transaction versions) is cached per table and brought up to date
from the commit files written since, so an append reads only what is new. Every tenth version
this writer commits, Spark writes a log checkpoint in the background, as Spark's own writers do.

>>> append_is_direct = Outcome.COMMITTED is not Outcome.SKIPPED
>>> append_is_direct
True
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import delta_io

log = logging.getLogger(__name__)

_CHECKPOINT_EVERY = 10  # Delta's default delta.checkpointInterval
_RETRIES = 50  # versions taken by other writers before giving up to Spark
_CACHED_TABLES = 256
_PLAIN_PARTITION = re.compile(r"^[A-Za-z0-9_.\-]+$")
_TYPES = delta_io.ARROW_TYPES
_VOID = "void"  # Spark's type for a column created from nulls only: in the schema, in no file
# table properties a table created here may have: none needs more than protocol (1, 2)
_CREATABLE_PROPERTIES = {"delta.dataSkippingStatsColumns"}
_STATS_TYPES = {"long", "integer", "short", "byte"}  # exact min/max; floats' NaN would need care


class Outcome(enum.Enum):
    """What a direct append did."""

    COMMITTED = "committed"  # this call's commit holds the rows
    SKIPPED = "skipped"  # the table had seen the transaction version: nothing written


@dataclass
class _TableLog:
    """What this process knows of one table's log, as of ``version``."""

    version: int = -1
    stamp: tuple[int, int] | None = None  # inode and size of that version's commit file
    protocol: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)

    def apply(self, action: dict[str, Any]) -> None:
        if "protocol" in action:
            self.protocol = action["protocol"]
        elif "metaData" in action:
            self.metadata = action["metaData"]
        elif "txn" in action and action["txn"]:
            txn = action["txn"]
            self.txns[txn["appId"]] = max(int(txn["version"]), self.txns.get(txn["appId"], -1))

    @property
    def fields(self) -> list[dict[str, Any]]:
        return json.loads(self.metadata["schemaString"])["fields"]

    def writable(self) -> str | None:
        """Why this writer must leave the table to Spark, or ``None`` when it need not."""
        return delta_io.blind_append_refusal(
            int(self.protocol.get("minReaderVersion", 1)), int(self.protocol.get("minWriterVersion", 2)),
            set(self.protocol.get("writerFeatures") or ()), self.metadata.get("configuration") or {},
            self.fields, {*_TYPES, _VOID})


@dataclass(frozen=True)
class NewTable:
    """What an append that finds no table creates, as Spark's first append would: the rows'
    columns (typed from the rows, or ``fields`` in Delta's JSON form), partitioned by
    ``partition_by``, with table ``properties``.

    >>> NewTable(partition_by=("operator",)).partition_by
    ('operator',)
    """

    partition_by: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    fields: tuple[dict[str, Any], ...] | None = None

    def log(self, rows: pd.DataFrame) -> _TableLog | None:
        """The log of the table as its first commit will make it, or ``None`` when this
        writer must leave its creation to Spark."""
        fields = list(self.fields) if self.fields is not None else _inferred_fields(rows)
        if fields is None or any(key not in _CREATABLE_PROPERTIES for key, _ in self.properties):
            return None
        metadata = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps({"type": "struct", "fields": fields}),
                    "partitionColumns": list(self.partition_by),
                    "configuration": dict(self.properties), "createdTime": int(time.time() * 1000)}
        table = _TableLog(protocol={"minReaderVersion": 1, "minWriterVersion": 2}, metadata=metadata)
        return table if table.writable() is None else None


def _inferred_fields(rows: pd.DataFrame) -> list[dict[str, Any]] | None:
    """The Delta columns Spark would create from ``rows`` (``None``: a type this writer leaves
    to Spark, such as naive timestamps, lists or decimals)."""
    try:
        schema = pa.Schema.from_pandas(rows, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    fields = []
    for column in schema:
        kind = _delta_type(column.type)
        if kind is None:
            return None
        fields.append({"name": column.name, "type": kind, "nullable": True, "metadata": {}})
    return fields


def _delta_type(kind: pa.DataType) -> str | None:
    if pa.types.is_null(kind):
        return _VOID
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is not None else None
    if pa.types.is_large_string(kind):
        return "string"
    return next((name for name, arrow in _TYPES.items() if arrow == kind and name != "timestamp"), None)


_cache: OrderedDict[str, _TableLog] = OrderedDict()
_cache_lock = threading.Lock()
_table_locks: dict[str, threading.Lock] = {}


def append(rows: pd.DataFrame, path: str, *, txn: tuple[str, int] | None = None,
           user_metadata: str | None = None, spark: Any = None,
           create: NewTable | None = None) -> Outcome | None:
    """Append ``rows`` to the Delta table at ``path`` in one commit written here; ``None``
    when the table or the rows do not qualify (see the module docstring: use Spark then).
    With ``create``, a table that does not exist yet is created by this commit.
    ``spark``, when given, writes a log checkpoint every tenth version in the background.
    A table on an object store is appended to by delta-rs (:func:`state.delta_io.append`)."""
    if delta_io.on_object_store(path):
        return _append_remote(rows, path, txn, user_metadata, create)
    local = _local(path)
    logdir = os.path.join(local or "", "_delta_log")
    if local is None or not (os.path.isdir(logdir) or create is not None):
        return None
    with _lock_for(local):
        table = _synced(local, logdir) if os.path.isdir(logdir) else None
        if table is None and create is not None and not _has_commits(logdir):
            table = create.log(rows)
        if table is None or table.writable() is not None or not _fits(rows, table):
            return None
        if txn is not None and table.txns.get(txn[0], -1) >= txn[1]:
            return Outcome.SKIPPED
        try:
            adds = _write_files(rows, local, table)
        except (pa.ArrowException, TypeError, ValueError) as error:  # values Arrow cannot take
            log.debug("direct append to %s left to Spark: %s", path, error)
            return None
        written_as = table.fields  # the files' columns and types
        os.makedirs(logdir, exist_ok=True)
        for _ in range(_RETRIES):
            version = table.version + 1
            if _commit(logdir, version, _actions(adds, table, txn, user_metadata)):
                _remember(table, logdir, version, txn)
                _checkpoint_now_and_then(spark, path, version)
                return Outcome.COMMITTED
            table = _synced(local, logdir)  # another writer took it: read what it did, retry
            if (table is None or table.writable() is not None or not _fits(rows, table)
                    or table.fields != written_as):
                _remove(local, adds)
                return None
            if txn is not None and table.txns.get(txn[0], -1) >= txn[1]:
                _remove(local, adds)
                return Outcome.SKIPPED
        _remove(local, adds)
        return None


def _append_remote(rows: pd.DataFrame, path: str, txn: tuple[str, int] | None,
                   user_metadata: str | None, create: NewTable | None) -> Outcome | None:
    creation = None
    if create is not None:
        fields = list(create.fields) if create.fields is not None else _inferred_fields(rows)
        if fields is not None:
            creation = delta_io.Creation(tuple(fields), create.partition_by, create.properties)
    done = delta_io.append(rows, path, txn=txn, user_metadata=user_metadata, create=creation)
    return None if done is None else Outcome.COMMITTED if done else Outcome.SKIPPED


def table_schema(path: str) -> dict[str, Any] | None:
    """The schema of the Delta table at ``path`` as of its latest commit (Delta's JSON form),
    read from its log as appends follow it (delta-rs's on an object store), without Spark;
    ``None`` when there is no such table or its log is not one this module reads."""
    if delta_io.on_object_store(path):
        return delta_io.schema_json(path)
    local = _local(path)
    if local is None or not os.path.isdir(os.path.join(local, "_delta_log")):
        return None
    with _lock_for(local):
        table = _synced(local, os.path.join(local, "_delta_log"))
    return None if table is None else json.loads(table.metadata["schemaString"])


def _local(path: str) -> str | None:
    if "://" in path and not path.startswith("file:"):
        return None
    return "/" + path[len("file:"):].lstrip("/") if path.startswith("file:") else path


def _lock_for(local: str) -> threading.Lock:
    with _cache_lock:
        return _table_locks.setdefault(local, threading.Lock())


def _synced(local: str, logdir: str) -> _TableLog | None:
    """The table's log as of its latest commit: the cached state plus the commits since, or
    read afresh from the last log checkpoint (``None``: a checkpoint this reader cannot read)."""
    with _cache_lock:
        table = _cache.get(local)
    # the cached state holds while its last commit file is the one it read: a table deleted and
    # made again at the same path has new files (and maybe other transactions)
    if table is None or _stamp(_commit_file(logdir, table.version)) != table.stamp:
        table = _from_checkpoint(logdir)  # first use, or the log changed under the cache
        if table is None:
            return None
    while True:
        try:
            with open(_commit_file(logdir, table.version + 1)) as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            break
        for line in lines:
            if line.strip():
                table.apply(json.loads(line))
        table.version += 1
        table.stamp = _stamp(_commit_file(logdir, table.version))
    if table.version < 0 or not table.metadata:
        return None
    with _cache_lock:
        _cache[local] = table
        _cache.move_to_end(local)
        while len(_cache) > _CACHED_TABLES:
            _cache.popitem(last=False)
    return table


def _from_checkpoint(logdir: str) -> _TableLog | None:
    """The state at the last log checkpoint (an empty state when there is none)."""
    table = _TableLog()
    try:
        with open(os.path.join(logdir, "_last_checkpoint")) as handle:
            last = json.load(handle)
    except FileNotFoundError:
        return table
    if last.get("parts") or last.get("v2Checkpoint"):
        return None  # multi-part and v2 checkpoints: left to Spark
    version = int(last["version"])
    checkpoint = os.path.join(logdir, f"{version:020d}.checkpoint.parquet")
    if not os.path.exists(checkpoint):
        return None
    names = set(pq.read_schema(checkpoint).names)
    columns = [c for c in ("protocol", "metaData", "txn") if c in names]
    for row in pq.read_table(checkpoint, columns=columns).to_pylist():
        if row.get("metaData") and isinstance(row["metaData"].get("configuration"), list):
            row["metaData"]["configuration"] = dict(row["metaData"]["configuration"])
        table.apply({key: value for key, value in row.items() if value is not None})
    table.version = version
    table.stamp = _stamp(_commit_file(logdir, version))
    return table


def _has_commits(logdir: str) -> bool:
    return os.path.isdir(logdir) and any(name.endswith(".json") for name in os.listdir(logdir))


def _fits(rows: pd.DataFrame, table: _TableLog) -> bool:
    """The rows have exactly the table's columns (nothing but nulls in a ``void`` one), and
    partition values that need no escaping."""
    if set(rows.columns) != {spec["name"] for spec in table.fields} or rows.columns.duplicated().any():
        return False
    if any(spec["type"] == _VOID and rows[spec["name"]].notna().any() for spec in table.fields):
        return False
    for column in table.metadata.get("partitionColumns") or []:
        values = rows[column]
        if values.isna().any() or not all(_PLAIN_PARTITION.match(str(v)) for v in values.unique()):
            return False
    return True


def _write_files(rows: pd.DataFrame, local: str, table: _TableLog) -> list[dict[str, Any]]:
    """One Parquet file per partition; their ``add`` actions."""
    partitions = list(table.metadata.get("partitionColumns") or [])
    kinds = {spec["name"]: spec["type"] for spec in table.fields}
    data_columns = [spec["name"] for spec in table.fields if spec["name"] not in partitions]
    stored = [name for name in data_columns if kinds[name] != _VOID]  # void: in no file
    schema = pa.schema([(name, _TYPES[kinds[name]]) for name in stored])
    stats_columns = _stats_columns(table, data_columns, kinds)
    groups = rows.groupby(partitions, sort=False) if partitions else [((), rows)]
    adds = []
    for values, part in groups:
        values = values if isinstance(values, tuple) else (values,)
        folder = "/".join(f"{name}={value}" for name, value in zip(partitions, values))
        name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        relative = f"{folder}/{name}" if folder else name
        os.makedirs(os.path.join(local, folder), exist_ok=True)
        arrow = pa.Table.from_pandas(part, schema=schema, preserve_index=False)  # schema's columns
        pq.write_table(arrow, os.path.join(local, relative), compression="snappy")
        adds.append({"add": {
            "path": relative, "partitionValues": dict(zip(partitions, map(str, values))),
            "size": os.path.getsize(os.path.join(local, relative)),
            "modificationTime": int(time.time() * 1000), "dataChange": True,
            "stats": json.dumps(_stats(arrow, stats_columns, data_columns))}})
    return adds


def _stats_columns(table: _TableLog, data_columns: list[str], kinds: dict[str, str]) -> list[str]:
    """The columns whose min and max the commit records: integer columns, limited to
    ``delta.dataSkippingStatsColumns`` when the table names them."""
    config = table.metadata.get("configuration") or {}
    named = config.get("delta.dataSkippingStatsColumns")
    chosen = [c.strip() for c in named.split(",")] if named else data_columns[:32]
    return [c for c in chosen if c in data_columns and kinds[c] in _STATS_TYPES]


def _stats(arrow: pa.Table, stats_columns: list[str], data_columns: list[str]) -> dict[str, Any]:
    """Delta's file statistics, from the rows as written (``void`` columns are in no file:
    all null)."""
    mins, maxes = {}, {}
    for column in stats_columns:
        bounds = pc.min_max(arrow[column])
        if bounds["min"].is_valid:
            mins[column], maxes[column] = bounds["min"].as_py(), bounds["max"].as_py()
    stored = set(arrow.column_names)
    return {"numRecords": arrow.num_rows, "minValues": mins, "maxValues": maxes,
            "nullCount": {c: arrow[c].null_count if c in stored else arrow.num_rows
                          for c in data_columns}}


def _actions(adds: list[dict[str, Any]], table: _TableLog, txn: tuple[str, int] | None,
             user_metadata: str | None) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    info: dict[str, Any] = {
        "timestamp": now, "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(
            table.metadata.get("partitionColumns") or [])},
        **({"readVersion": table.version} if table.version >= 0 else {}),
        "isolationLevel": "WriteSerializable",
        "isBlindAppend": True, "engineInfo": "lakestream-direct-append", "txnId": str(uuid.uuid4()),
        "operationMetrics": {"numFiles": str(len(adds)), "numOutputRows": str(sum(
            json.loads(a["add"]["stats"])["numRecords"] for a in adds))}}
    if user_metadata is not None:
        info["userMetadata"] = user_metadata
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    if table.version < 0:  # this commit creates the table
        actions += [{"metaData": table.metadata}, {"protocol": table.protocol}]
    if txn is not None:
        actions.append({"txn": {"appId": txn[0], "version": txn[1], "lastUpdated": now}})
    return actions + adds


def _commit(logdir: str, version: int, actions: list[dict[str, Any]]) -> bool:
    """Write the commit file of ``version`` unless it exists: written whole under a temporary
    name, then linked into place, which fails if another writer got there first."""
    temporary = os.path.join(logdir, f".{version:020d}.{uuid.uuid4().hex}.json.tmp")
    with open(temporary, "w") as handle:
        handle.write("\n".join(json.dumps(action) for action in actions) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, _commit_file(logdir, version))
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_size


def _remember(table: _TableLog, logdir: str, version: int, txn: tuple[str, int] | None) -> None:
    table.version = version
    table.stamp = _stamp(_commit_file(logdir, version))
    if txn is not None:
        table.txns[txn[0]] = max(txn[1], table.txns.get(txn[0], -1))


def _remove(local: str, adds: list[dict[str, Any]]) -> None:
    """Data files no commit will reference (a vacuum would remove them too)."""
    for add in adds:
        try:
            os.unlink(os.path.join(local, add["add"]["path"]))
        except FileNotFoundError:
            pass


def _commit_file(logdir: str, version: int) -> str:
    return os.path.join(logdir, f"{version:020d}.json")


def _checkpoint_now_and_then(spark: Any, path: str, version: int) -> None:
    """Every tenth version, have Spark write the log checkpoint its own commit would have
    written, in a background thread, so reading the table never replays a long log."""
    if spark is None or version == 0 or version % _CHECKPOINT_EVERY:
        return  # as Spark: none for the commit that creates a table

    def checkpoint() -> None:
        try:
            jvm = spark.sparkContext._jvm
            delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
            none = jvm.scala.Option.empty()
            delta_log.update(False, none, none)  # then checkpoint() writes _last_checkpoint too
            delta_log.checkpoint()
        except Exception:  # a missed checkpoint costs reading time, never data
            log.warning("log checkpoint of %s at version %d failed", path, version, exc_info=True)

    threading.Thread(target=checkpoint, name="lakestream-log-checkpoint", daemon=True).start()
