"""Rows read from a table's data files without Spark: a snapshot's rows, the files of a version
with what the log says of each (statistics readers prune by), and only the files that may hold
the rows asked for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.dataset
import pyarrow.fs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from ..errors import StorageError
from .cache import served_table, snapshots, table
from .stores import calling, on_object_store, table_files


def data_files(path: str) -> tuple[int, dict[str, int]]:
    """The table's latest version (-1: no table) and its data files as of that version, each
    with the time it was added (epoch ms), by path in the table's folder (unescaped, as
    :class:`AddedFile` gives them): what a follower compares from one poll to the next
    to find the files a commit added or removed, with or without the change feed. No request
    beyond bringing the table up to date: delta-rs holds the files of the version it read."""
    found = table(path)
    if found is None:
        return -1, {}
    actions = pa.table(found.get_add_actions(flatten=True))
    names = [unquote(name) for name in actions["path"].to_pylist()]  # the log escapes them
    return int(found.version()), dict(zip(names, actions["modification_time"].cast(pa.int64()).to_pylist()))


def read_data_files(path: str, names: list[str], columns: list[str] | None = None,
                    partition: tuple[str, Any] | None = None,
                    where: pyarrow.dataset.Expression | None = None) -> pa.Table:
    """The rows of the table's data files ``names`` (paths as the log gives them), in that
    order (only ``columns``, when given): files of the version :func:`data_files` or
    :func:`file_statistics` just gave, read from the snapshot it brought up to date (not
    brought up to date again: a commit in between could remove them). ``partition=(column,
    value)`` when every file is in that partition: only its files are made into fragments.
    ``where``: only the rows it holds for, and only the row groups whose statistics allow such
    rows are read."""
    found = snapshots.get(path)
    if found is None:
        found = table(path)
    if found is None or not names:
        return pa.table({})
    pruning = [(partition[0], "=", partition[1])] if partition is not None else None
    dataset = calling(path, "reading", lambda: found.to_pyarrow_dataset(file_pruning_predicate=pruning))
    by_name = {fragment.path: fragment for fragment in dataset.get_fragments()}
    by_name.update({name: by_name[unquote(name)] for name in names
                    if name not in by_name and unquote(name) in by_name})  # the log escapes, fragments not
    missing = [name for name in names if name not in by_name]
    if missing:
        raise StorageError(f"{path}: data file {missing[0]!r} is not in the table's version "
                           f"{found.version()}")
    chosen = pyarrow.dataset.FileSystemDataset([by_name[name] for name in names], dataset.schema,
                                               dataset.format, dataset.filesystem)
    return plain(calling(path, "reading", lambda: chosen.to_table(columns=columns, filter=where)))


def read_added(path: str, names: list[str], schema: pa.Schema | None = None,
               files: pyarrow.fs.FileSystem | None = None,
               sizes: Mapping[str, int] | None = None) -> pa.Table:
    """The rows of data files ``names`` (paths in the table's folder, unescaped, as
    :class:`AddedFile` gives them), in that order, read directly (no snapshot, no lock: what
    each costs is its own file, however many the table has); as ``schema`` (the table's
    columns as a snapshot read gives them, in its order, a column a file lacks null) when
    given. ``files``: the table's (see :func:`state.delta_io.appended`). ``sizes``: each
    file's size as the log gives it (by the same names); a file of known size up to
    :data:`WHOLE_FILE_BYTES` is read in one request, footer and columns together, which on an
    object store is one ``GET`` instead of a ``HEAD`` and two ranged ones."""
    known = dict(sizes or {})
    store = table_files(path, known) if known and on_object_store(path) else files or table_files(path)
    parts = []
    for name in names:
        read = calling(path, f"reading data file {name} of",
                       partial(_parquet, store, name, known.get(name)))
        parts.append(plain(read if schema is None else _as_schema(read, schema)))
    if not parts:
        return pa.table({}) if schema is None else schema.empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


#: The largest data file :func:`read_added` reads whole in one request (when its size is known):
#: a changelog's file per batch is far smaller, and a request saved is a round trip saved.
WHOLE_FILE_BYTES = 8 << 20


def _parquet(store: pyarrow.fs.FileSystem, name: str, size: int | None) -> pa.Table:
    if size is not None and size <= WHOLE_FILE_BYTES:
        with store.open_input_file(name) as handle:
            return pq.read_table(pa.BufferReader(handle.read()))
    return pq.read_table(name, filesystem=store)


def _as_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with ``schema``'s columns in its order and types (times as the snapshot gives
    them: a file Spark wrote holds naive INT96 nanoseconds, read as UTC), missing ones null."""
    columns = [rows[field.name].cast(field.type, safe=False) if field.name in rows.column_names
               else pa.nulls(len(rows), field.type) for field in schema]
    return pa.table(columns, schema=schema)


def file_statistics(path: str) -> pa.Table | None:
    """The data files of the table's latest version with what the log says of each: ``path``,
    ``num_records``, ``partition.<column>``, and ``min.<column>``, ``max.<column>``,
    ``null_count.<column>`` for the columns it keeps statistics of (null where it keeps none).
    ``None`` when there is no table, when this package does not serve it
    (:func:`state.delta_io.serves`), or when reading its files is not all it takes to read its
    rows (deletion vectors, column mapping): then only Spark reads it right."""
    found = served_table(path)
    if found is None or not _files_are_rows(found):
        return None
    return pa.table(calling(path, "reading the log", lambda: found.get_add_actions(flatten=True)))


def newest_rows(path: str, column: str, partition: tuple[str, Any] | None = None,
                columns: list[str] | None = None) -> pa.Table | None:
    """The rows holding the largest value of integer ``column`` (in ``partition=(column,
    value)``), reading only the files whose statistics say they hold it; ``None`` when a file
    has no statistics for it, there are no rows, or there is no table this package reads by its
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
    package reads by its files (see :func:`file_statistics`)."""
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
    rows = calling(path, "reading", lambda: found.to_pyarrow_table(filters=filters))
    return int(found.version()), plain(rows)


def plain(rows: pa.Table) -> pa.Table:
    """``rows`` with string and binary views as the plain types pandas and Spark's Parquet give."""
    views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return rows.cast(pa.schema([(field.name, views.get(field.type, field.type)) for field in rows.schema]))


@dataclass(frozen=True)
class Summary:
    """What a table's log says of it, and its newest rows: ``rows`` counted from the files'
    statistics, ``schema`` the Delta schema (JSON), ``newest`` the last rows of its newest
    files, oldest first."""

    version: int
    rows: int
    schema: dict[str, Any]
    newest: pa.Table


def summary(path: str, newest: int) -> Summary | None:
    """The :class:`Summary` of the table at ``path`` with up to ``newest`` of its newest rows:
    the log and the newest data files only, however large the table is. ``None`` when there is
    no table or this package does not read it by its files (see :func:`file_statistics`)."""
    found = served_table(path)
    if found is None or not _files_are_rows(found):
        return None
    files = pa.table(calling(path, "reading the log", lambda: found.get_add_actions(flatten=True)))
    counted = files["num_records"]
    rows = (int(pa.compute.sum(counted).as_py() or 0) if counted.null_count == 0
            else _counted_rows(path, files))  # a writer that kept no statistics
    by_age = files.sort_by([("modification_time", "ascending")])["path"].to_pylist()
    read: list[pa.Table] = []
    while by_age and sum(part.num_rows for part in read) < newest:
        read.insert(0, read_data_files(path, [by_age.pop()]))
    last = pa.concat_tables(read, promote_options="permissive") if read else pa.table({})
    return Summary(int(found.version()), rows, json.loads(found.schema().to_json()),
                   last.slice(max(0, last.num_rows - newest)))


def _counted_rows(path: str, files: pa.Table) -> int:
    """The table's rows counted from its data files' footers."""
    store = table_files(path)
    return sum(pq.read_metadata(unquote(name), filesystem=store).num_rows
               for name in files["path"].to_pylist())


def count_between(path: str, column: str, lowest: int, highest: int | None = None,
                  partition: tuple[str, Any] | None = None) -> int | None:
    """How many rows have integer ``column`` in ``lowest..highest`` (no upper bound when
    ``highest`` is ``None``), reading only that column of the files whose statistics allow
    such rows; ``None`` when this package does not read the table by its files."""
    found = rows_at_least(path, column, lowest, partition, [column])
    if found is None:
        return None
    if highest is None or found.num_rows == 0:
        return found.num_rows
    return int(pa.compute.sum(pa.compute.less_equal(found[column], highest)).as_py() or 0)


def column_rows(path: str, columns: list[str]) -> pa.Table | None:
    """Only ``columns`` of every row of the table at ``path`` (no other column is read);
    ``None`` when there is no table or this package does not read it by its files (see
    :func:`file_statistics`)."""
    files = file_statistics(path)
    if files is None:
        return None
    rows = read_data_files(path, files["path"].to_pylist(), columns)
    return rows if rows.num_columns else pa.table({name: pa.array([]) for name in columns})
