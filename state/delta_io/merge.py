"""MERGE without Spark: rows upserted into a table that holds the latest row per key (a state
table in driver mode), in one copy-on-write commit, where delta-rs can write it as Spark would.

Spark's MERGE cost 2-3 s for a few rows (over 8 s as a new JVM's first); delta-rs's a few
hundredths. A merge commits with no retry of delta-rs's own: one that loses to another writer's
is planned again from the table as that one left it, so the two engines never need to agree on
conflict rules."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable

from .appends import Creation, as_arrow, create, writable_schema
from .cache import remember, snapshots, synced
from .commits import checkpoint_now_and_then, post_commit, retrying
from .log import feed_enabled
from .stores import calling, serves

log = logging.getLogger(__name__)


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
    done, ``None`` when this writer leaves the merge to Spark: the path is not one it serves,
    the table asks for more than a copy-on-write merge of plain columns (see
    :func:`merge_refusal`), ``rows`` lack one of its columns, or there is no table and
    ``creation`` is not given or has a column of a type left to Spark.

    A commit that loses to another writer's is tried again on the table as that one left it;
    the version rule keeps the outcome the same.
    """
    if not serves(path):
        return None
    with snapshots.lock_for(path):
        current = synced(path)  # one read of the log per batch, as an append makes
        if current is not None:
            return _merge_retrying(path, current, rows, how)
    if creation is None or not create(path, creation):
        return None
    with snapshots.lock_for(path):
        return _merge_retrying(path, synced(path), rows, how)


def _merge_retrying(path: str, current: DeltaTable | None, rows: pd.DataFrame, how: Upsert) -> bool | None:
    """:func:`upsert` once the table is read (under its lock): one merge, planned again on the
    table as a racing writer left it, as often as races are lost."""
    def attempt(current: DeltaTable | None) -> bool | None:
        data = None if current is None else _merge_source(rows, current, how)
        if current is None or data is None:
            return None
        _merge(path, current, data, how)
        return True
    return retrying(path, current, None, "merging into", attempt)


def _merge_source(rows: pd.DataFrame, current: DeltaTable, how: Upsert) -> pa.Table | None:
    """``rows`` as Arrow in the table's column types (and the change column as text), or
    ``None`` when the merge is left to Spark."""
    refused = merge_refusal(current.metadata().configuration or {})
    if refused is not None:
        log.debug("merge left to Spark: %s", refused)
        return None
    schema = writable_schema(current)
    return None if schema is None else as_arrow(rows, schema.append(pa.field(how.change, pa.string())))


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
                             commit_properties=CommitProperties(max_commit_retries=0),
                             post_commithook_properties=post_commit(path, current))
               .when_matched_delete(predicate=how.deleted_when())
               .when_matched_update(columns, predicate=how.newer())
               .when_not_matched_insert(columns, predicate=how.inserted_when()))
    calling(path, "merging into", merging.execute)
    remember(path, current)
    checkpoint_now_and_then(path, current)
