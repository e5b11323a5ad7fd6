"""Data files written by many processes and committed by one: Spark's tasks write a batch's files
(:func:`write_file`), the driver commits them in one commit (:func:`commit_files`)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.fs
import pyarrow.parquet
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction

from ..errors import StorageError
from .appends import repeats, table_fields, writable_schema
from .cache import remember, served_table, snapshots, synced
from .commits import checkpoint_now_and_then, commit_properties, post_commit, retrying
from .file_layout import FileLayout
from .stores import calling, location


def file_schema(path: str, partitioned: bool = True) -> pa.Schema | None:
    """The columns of a data file :func:`write_file` writes for the table at ``path`` (the
    table's, less its partition columns, as Arrow types), when this package may append to it
    (see :func:`state.delta_io.append`); ``None`` when there is no table, it is not on a path
    this package serves or its appends are Spark's, and, with ``partitioned=False``, when the
    table is partitioned."""
    found = served_table(path)
    if found is None or (not partitioned and found.metadata().partition_columns):
        return None
    return _file_schema(found)


def _file_schema(found: DeltaTable) -> pa.Schema | None:
    schema = writable_schema(found)
    if schema is None:
        return None
    for column in found.metadata().partition_columns:
        schema = schema.remove(schema.get_field_index(column))
    return schema


def takes_files(path: str, schema: pa.Schema, *, lacking: bool = False) -> bool:
    """Whether the table at ``path`` takes data files of ``schema`` from :func:`write_file`:
    this package appends to it, and its columns (partition columns aside) are the files'
    ones, of the same types. With ``lacking``, the files may lack nullable columns of the
    table: a file without a column reads as nulls in it, as files written before the column
    was added do (a table whose writers fill only some columns, as ``_state``).

    >>> import tempfile
    >>> from deltalake import write_deltalake
    >>> path = tempfile.mkdtemp()
    >>> write_deltalake(path, pa.table({"x": pa.array([1], pa.int64()), "y": pa.array([2.0])}))
    >>> x = pa.schema([("x", pa.int64())])
    >>> takes_files(path, x), takes_files(path, x, lacking=True)
    (False, True)
    """
    found = served_table(path)
    return found is not None and _takes(found, schema, lacking)


def _takes(found: DeltaTable, schema: pa.Schema, lacking: bool) -> bool:
    takes = _file_schema(found)
    if takes is None or not lacking:
        return takes is not None and takes == schema
    if any(name not in takes.names or takes.field(name).type != schema.field(name).type
           for name in schema.names):
        return False
    nullable = {field["name"]: field.get("nullable", True) for field in table_fields(found)}
    return all(nullable[name] for name in takes.names if name not in schema.names)


def write_file(path: str, rows: pa.Table, partition: Mapping[str, str],
               statistics: Iterable[str] = (), dictionary: Iterable[str] | None = None,
               layout: FileLayout | None = None) -> str:
    """Write ``rows`` as a new Parquet data file of the table at ``path`` without committing
    it, and return its add action (JSON) for :func:`commit_files`: how many processes write a
    commit's files (Spark's executors, say) while one commits them. ``partition``: the file's
    partition values (not columns of ``rows``); ``statistics``: the integer columns whose
    minimum, maximum and null count the action records, which readers prune files by;
    ``dictionary``: the columns to dictionary-encode (default: the text and binary ones);
    ``layout``: the rows are written in its order and row groups (pyarrow's row groups, in the
    order given, else). A file no commit names is never read (a vacuum removes it)."""
    # a partition's folder only for plain values (the log's path would need escaping else)
    folder = "/".join(f"{column}={value}" for column, value in partition.items()
                      if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_]+", value))
    name = f"{folder}/part-{uuid.uuid4()}.snappy.parquet".lstrip("/")
    encoded = list(dictionary) if dictionary is not None else [
        field.name for field in rows.schema if repeats(field.type)]
    files = pyarrow.fs.PyFileSystem(DeltaStorageHandler(location(path)))

    def write() -> int:
        # encoded in memory first: its size is known without asking the store (a HEAD each)
        encoded_file = pa.BufferOutputStream()
        pyarrow.parquet.write_table(rows if layout is None else layout.arrange(rows), encoded_file,
                                    compression="snappy", use_dictionary=encoded,
                                    row_group_size=None if layout is None else layout.row_group_rows)
        data = encoded_file.getvalue()
        # through a buffer larger than the file: delta-rs's stream takes bytes, which is what a
        # buffered stream flushes (an unbuffered one passes an Arrow buffer, which it refuses)
        with files.open_output_stream(name, buffer_size=data.size + 1) as out:
            out.write(data)
        return int(data.size)

    size = calling(path, "writing a data file of", write)
    return json.dumps({"path": name, "size": size, "partition_values": dict(partition),
                       "modification_time": int(time.time() * 1000), "data_change": True,
                       "stats": json.dumps(_file_statistics(rows, statistics))})


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
                 txn: tuple[str, int] | None = None, user_metadata: str | None = None,
                 lacking: bool = False) -> bool:
    """Commit the data files :func:`write_file` wrote (``actions``, in the columns ``schema``
    that :func:`file_schema` gave) to the table at ``path`` in one commit; ``True`` when
    committed, ``False`` when skipped because the table has seen ``txn`` (as
    :func:`state.delta_io.append`). A table that no longer takes those files (its columns or
    protocol changed since; with ``lacking``, as :func:`takes_files` says) raises
    :class:`StorageError`, with nothing committed.

    >>> import tempfile
    >>> from deltalake import write_deltalake
    >>> from state.delta_io import table
    >>> path = tempfile.mkdtemp()
    >>> write_deltalake(path, pa.table({"x": pa.array([1], pa.int64())}))
    >>> written = [write_file(path, pa.table({"x": pa.array([n], pa.int64())}), {}, ["x"])
    ...            for n in (2, 3)]  # by two processes, say
    >>> commit_files(path, written, file_schema(path), txn=("app", 1))
    True
    >>> commit_files(path, written, file_schema(path), txn=("app", 1))  # seen: skipped
    False
    >>> sorted(pa.table(table(path).to_pyarrow_table())["x"].to_pylist()), table(path).version()
    ([1, 2, 3], 1)
    """
    adds: list[AddAction | RemoveAction] = [AddAction(**json.loads(action)) for action in actions]

    def attempt(found: DeltaTable | None) -> bool:
        current = _taking(path, found, schema, lacking)
        before = int(current.version())
        calling(path, "committing files to", lambda: current.create_write_transaction(
            adds, mode="append", schema=current.schema(),
            partition_by=current.metadata().partition_columns or None,
            commit_properties=commit_properties(txn, user_metadata),
            post_commithook_properties=post_commit(path, current)))
        calling(path, "reading the log", current.update_incremental)  # to the version made
        snapshots.committed(path, current, before, txn)
        remember(path, current)
        checkpoint_now_and_then(path, current)
        return True
    with snapshots.lock_for(path):
        return bool(retrying(path, synced(path, committing=True), txn, "committing files to", attempt))


def _taking(path: str, current: DeltaTable | None, schema: pa.Schema, lacking: bool) -> DeltaTable:
    """``current``, when it is there and still takes files of ``schema``; else
    :class:`StorageError`."""
    if current is None:
        raise StorageError(f"{path}: the table is gone (deleted while this run was writing "
                           "it); nothing was committed to it")
    if not _takes(current, schema, lacking):
        takes = _file_schema(current)
        raise StorageError(f"{path}: the table changed while this batch was written (its "
                           f"columns or protocol: it now takes {takes}, the "
                           f"batch's files hold {schema}); nothing was committed to it, and "
                           "the next run writes the batch again")
    return current
