"""Blind appends to a Delta table, and a state table's upserts, committed by this process
without Spark.

A micro-batch commits three times (its plan, its sink, its checkpoint), and each commit made
through Spark plans a job, rebuilds the table's snapshot and writes through an executor: 0.2-0.5 s
warm. An append that only adds files needs none of that. This module decides when an append
may skip Spark and hands it to delta-rs (:func:`state.delta_io.append`), which writes the
Parquet files and commits them with Delta's optimistic concurrency (an atomic create of the
commit file on a local disk, a conditional put on an object store).

It is used only where that is exactly what Delta's protocol asks of a writer; anything else
(:func:`append` returns ``None``) goes through Spark:

- the table is on the local file system or an object store delta-rs serves. It exists, or the
  append creates it when the caller describes the table (:class:`NewTable`) and its columns are
  of the types below;
- its protocol and metadata ask for nothing a blind append does not do
  (:func:`state.delta_io.blind_append_refusal`): no CHECK constraints, generated or identity
  columns, column mapping, NOT NULL columns or invariants (an add-only commit needs no
  change-data files even with the change data feed on: readers derive inserts from the added
  files);
- the rows have exactly the table's columns, each of a plain type (numbers, booleans, strings,
  binary, dates, UTC timestamps). Not ``void``, a column typed from nothing but nulls (a first
  batch without an optional field): delta-rs would write it into the files with a type no
  reader takes once the column gets one, where Spark writes no such column.

Idempotence is Delta's own: with ``txn=(app_id, version)`` the append is skipped when the table
has seen that version (or a later one) for ``app_id``, and the commit records it.

:func:`upsert` is a state table's ``MERGE`` (the latest row per key, a row replacing one only
when its batch is at least as new, so a replay changes nothing) under the same conditions, and
also not on an append-only table or one with the change data feed on
(:func:`state.delta_io.merge_refusal`). delta-rs rewrites the files holding matched keys, as
Spark's ``MERGE`` does without deletion vectors; Spark's took 2-3 s for a few rows, and over
8 s as the first ``MERGE`` of a new JVM (a new pipeline's first batch), where this takes a few
hundredths.

>>> NewTable(partition_by=("operator",)).creation(pd.DataFrame({"operator": ["sum"]})).fields[0]["type"]
'string'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from .. import delta_io


class Outcome(enum.Enum):
    """What a direct append did."""

    COMMITTED = "committed"  # this call's commit holds the rows
    SKIPPED = "skipped"  # the table had seen the transaction version: nothing written


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

    def creation(self, rows: pd.DataFrame | pa.Table) -> delta_io.Creation | None:
        """The table as its first commit will make it, or ``None`` when its creation is left
        to Spark (a column of a type Spark would type otherwise)."""
        fields = list(self.fields) if self.fields is not None else _inferred_fields(rows)
        if fields is None:
            return None
        return delta_io.Creation(tuple(fields), self.partition_by, self.properties)


def _inferred_fields(rows: pd.DataFrame | pa.Table) -> list[dict[str, Any]] | None:
    """The Delta columns Spark would create from ``rows`` (``None``: a type this writer leaves
    to Spark, such as naive timestamps, lists or decimals)."""
    try:
        schema = rows.schema if isinstance(rows, pa.Table) else pa.Schema.from_pandas(
            rows, preserve_index=False)
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
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is not None else None
    if pa.types.is_large_string(kind):
        return "string"
    return next((name for name, arrow in delta_io.ARROW_TYPES.items()
                 if arrow == kind and name != "timestamp"), None)


def append(rows: pd.DataFrame | pa.Table, path: str, *, txn: tuple[str, int] | None = None,
           user_metadata: str | None = None, create: NewTable | None = None,
           fill_missing: bool = False, layout: delta_io.FileLayout | None = None) -> Outcome | None:
    """Append ``rows`` (pandas, or Arrow) to the Delta table at ``path`` in one commit written here; ``None``
    when the table or the rows do not qualify (see the module docstring: use Spark then).
    With ``create``, a table that does not exist yet is created by this commit; with
    ``fill_missing``, nullable columns of the table the rows lack are null; ``layout``: the
    order and row groups of the rows in the file (:class:`state.delta_io.FileLayout`)."""
    creation = None if create is None else create.creation(rows)
    done = delta_io.append(rows, path, txn=txn, user_metadata=user_metadata, create=creation,
                           fill_missing=fill_missing, layout=layout)
    return None if done is None else Outcome.COMMITTED if done else Outcome.SKIPPED


def upsert(rows: pd.DataFrame, path: str, how: delta_io.Upsert, *,
           create: NewTable | None = None) -> Outcome | None:
    """Merge ``rows`` into the Delta table at ``path`` as the latest row per key (see
    :class:`state.delta_io.Upsert`), in one commit written here; ``None`` when the table or the
    rows do not qualify (use Spark's ``MERGE`` then). With ``create``, a missing table is
    created first, with the rows' columns but ``how.change``."""
    creation = None if create is None else create.creation(rows.drop(columns=[how.change]))
    return None if delta_io.upsert(rows, path, how, creation=creation) is None else Outcome.COMMITTED
