"""Blind appends: rows added to a table in one commit that only adds files, and the table created
by the first append that finds none, where that is all the table's protocol asks of a writer.

A micro-batch of a few rows spent most of its time in Delta commits made through Spark: each
plans a job, rebuilds the table's snapshot and writes through an executor (0.2-0.5 s warm, and a
batch makes three: its plan, its sink, its checkpoint); on an object store a Spark job per small
append made a one-row batch take seconds. Anything delta-rs should not write here (see
:func:`append`, :func:`blind_append_refusal`) goes through Spark.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError

from ..errors import StorageError
from .cache import remember, snapshots, synced
from .commits import CHECKPOINT_EVERY, checkpoint_now_and_then, commit_properties, post_commit, retrying
from .file_layout import FileLayout
from .stores import calling, location, serves

log = logging.getLogger(__name__)

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
_CREATED_PROPERTIES = {"delta.checkpointInterval": str(CHECKPOINT_EVERY)}


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


def append(rows: pd.DataFrame | pa.Table, path: str, *, txn: tuple[str, int] | None = None,
           user_metadata: str | None = None, create: Creation | None = None,
           fill_missing: bool = False, layout: FileLayout | None = None) -> bool | None:
    """Append ``rows`` (pandas, or Arrow) to the table at ``path`` in one commit; ``True`` when
    committed, ``False`` when skipped (the table has seen ``txn``'s version, or a later one,
    for its app id), ``None`` when this writer leaves the append to Spark: the path is not one
    it serves, the table's protocol asks for more than a blind append, the rows do not have
    exactly its columns, or there is no table and ``create`` is not given or has a column of a
    type left to Spark.
    With ``fill_missing``, the rows may lack nullable columns of the table: they are null
    there (as Spark appends them), as when the table gained columns the writer does not use.
    ``layout``: the rows are written in its order and row groups (delta-rs's row groups, in
    the order given, else).

    Idempotence is Delta's ``txn`` action: checked against the snapshot the commit is made on,
    and written with it, so a racing writer with the same app id makes this commit fail (then
    it is read again and checked again)."""
    if not serves(path):
        return None
    with snapshots.lock_for(path):
        current = synced(path, committing=True)
        try:
            return _append_to(current, rows, path, txn, user_metadata, create, fill_missing, layout)
        except StorageError as failure:
            if current is not None and synced(path, fresh=True) is None:
                raise StorageError(f"{path}: the table is gone (deleted while this run was "
                                   f"writing it); nothing was committed to it. {failure}") from failure
            raise


def _append_to(current: DeltaTable | None, rows: pd.DataFrame | pa.Table, path: str,
               txn: tuple[str, int] | None, user_metadata: str | None, create: Creation | None,
               fill_missing: bool, layout: FileLayout | None) -> bool | None:
    """:func:`append` once the table is read (``current``; ``None``: no table yet)."""
    def attempt(current: DeltaTable | None) -> bool | None:
        filled = _filled(rows, current) if fill_missing and current is not None else rows
        data = _arrow(filled, current, create)
        if data is None:
            return None
        _write(path, current, data, txn, user_metadata, create, layout)
        return True
    return retrying(path, current, txn, "appending to", attempt)


def create(path: str, creation: Creation) -> bool:
    """Create an empty table at ``path`` unless one is there; ``False`` when ``creation`` has a
    column of a type left to Spark or the path is not one this package serves. Two processes
    racing to create it both succeed: the commit of version 0 is a conditional put, and the
    loser finds the winner's table."""
    schema = creation.arrow_schema()
    if schema is None or not serves(path):
        return False
    with snapshots.lock_for(path):
        if synced(path) is not None:
            return True
        try:  # no retry: a retried creation would commit a second version 0 as version 1
            calling(path, "creating the table", lambda: DeltaTable.create(
                location(path), schema, mode="ignore", partition_by=list(creation.partition_by) or None,
                configuration={**_CREATED_PROPERTIES, **dict(creation.properties)},
                commit_properties=CommitProperties(max_commit_retries=0)))
        except CommitFailedError:
            pass  # another writer created it first: that is fine
        snapshots.forget(path)
    return True


def _write(path: str, current: DeltaTable | None, data: pa.Table, txn: tuple[str, int] | None,
           user_metadata: str | None, create: Creation | None, layout: FileLayout | None) -> None:
    properties = commit_properties(txn, user_metadata)
    writing = writer_properties(data.schema, None if layout is None else layout.row_group_rows)
    data = data if layout is None else layout.arrange(data)
    if current is not None:
        before = int(current.version())
        calling(path, "appending", lambda: write_deltalake(
            current, data, mode="append", commit_properties=properties,
            post_commithook_properties=post_commit(path, current),
            writer_properties=writing))
        snapshots.committed(path, current, before, txn)
        remember(path, current)
        checkpoint_now_and_then(path, current)
        return
    assert create is not None  # _arrow gave no data for a missing table without it
    calling(path, "creating the table", lambda: write_deltalake(
        location(path), data, mode="append", partition_by=list(create.partition_by) or None,
        configuration={**_CREATED_PROPERTIES, **dict(create.properties)},
        commit_properties=properties, writer_properties=writing))
    snapshots.forget(path)  # opened on the next use, as the table it made


def _filled(rows: pd.DataFrame | pa.Table, current: DeltaTable) -> pd.DataFrame | pa.Table:
    """``rows`` with a null column for each nullable column of the table they lack."""
    present = set(rows.column_names if isinstance(rows, pa.Table) else rows.columns)
    missing = [field["name"] for field in table_fields(current)
               if field["name"] not in present and field.get("nullable", True)]
    if not missing:
        return rows
    if isinstance(rows, pa.Table):  # typed nulls come from the cast to the table's schema
        nulls = [pa.nulls(rows.num_rows) for _ in missing]
        return pa.Table.from_arrays([*rows.columns, *nulls], names=[*rows.column_names, *missing])
    return rows.assign(**{name: None for name in missing})


def _arrow(rows: pd.DataFrame | pa.Table, current: DeltaTable | None,
           create: Creation | None) -> pa.Table | None:
    """``rows`` as Arrow in the table's column types, or ``None`` when this writer must leave
    the append to Spark."""
    if current is None:
        schema = create.arrow_schema() if create is not None else None
    else:
        schema = writable_schema(current)
    return None if schema is None else as_arrow(rows, schema)


def as_arrow(rows: pd.DataFrame | pa.Table, schema: pa.Schema) -> pa.Table | None:
    """``rows`` as Arrow in ``schema``'s types, when they have exactly its columns and Arrow
    takes their values (else ``None``: the write is left to Spark)."""
    names = rows.column_names if isinstance(rows, pa.Table) else list(rows.columns)
    if set(names) != set(schema.names) or len(set(names)) < len(names):
        return None
    try:
        if isinstance(rows, pa.Table):
            return rows.select(schema.names).cast(schema)
        return pa.Table.from_pandas(rows, schema=schema, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as error:  # values Arrow cannot take
        log.debug("write left to Spark: %s", error)
        return None


def writable_schema(current: DeltaTable) -> pa.Schema | None:
    """The table's columns as Arrow types, when a blind append by this writer is all its
    protocol and metadata ask for; else ``None``."""
    protocol = current.protocol()
    fields = table_fields(current)
    refused = blind_append_refusal(protocol.min_reader_version, protocol.min_writer_version,
                                   set(protocol.writer_features or ()),
                                   current.metadata().configuration or {}, fields, set(ARROW_TYPES))
    if refused is not None:
        log.debug("append left to Spark: %s", refused)
        return None
    return Creation(tuple(fields)).arrow_schema()


def table_fields(current: DeltaTable) -> list[dict[str, Any]]:
    """The table's columns as its log describes them (``name``, ``type``, ``nullable``, …)."""
    return list(json.loads(current.schema().to_json())["fields"])


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


def writer_properties(schema: pa.Schema, row_group_rows: int | None = None) -> WriterProperties:
    """How delta-rs writes a data file of ``schema``: as :func:`state.delta_io.write_file`
    does (snappy, dictionaries only where values repeat: 0.16 s against 0.13 s for 1M rows of
    six int64s), ``row_group_rows`` rows per row group at most."""
    return WriterProperties(
        max_row_group_size=row_group_rows, compression="SNAPPY",
        default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={field.name: ColumnProperties(dictionary_enabled=True)
                           for field in schema if repeats(field.type)})


def repeats(kind: pa.DataType) -> bool:
    """Whether a column of ``kind`` is worth a dictionary: text and binary values repeat
    (names, codes, states); numbers rarely do, and a dictionary of distinct numbers cost
    4× the time to write and made the file a third larger (125k random int64s)."""
    return any(check(kind) for check in (pa.types.is_string, pa.types.is_large_string,
                                         pa.types.is_binary, pa.types.is_large_binary,
                                         pa.types.is_dictionary))
