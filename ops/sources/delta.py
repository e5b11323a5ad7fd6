"""``sp.read.from_delta(path)``: the rows appended to an existing Delta table, by version."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from state import PipelineLayout, delta_io
from state.lake import tables

from ..columns import FIRST_ORDINAL, ORDER_COLUMN
from ..context import RunContext
from ..errors import BadRecordError, ConfigError
from . import delta_inserts
from .base import REJECTED_COLUMNS, FrameSlice, Slice, Source, version_slices
from .records import RecordSchema

log = logging.getLogger(__name__)

_BEFORE_FIRST_VERSION = -1  # a new pipeline reads a Delta source from its version 0


@dataclass(frozen=True)
class DeltaTableSource(Source):
    """An existing Delta table read incrementally by version.

    Rows inserted by commits ``(start, end]`` form a batch, ordered by commit version then
    ``order_by`` (default: every column), so a replay sees the same order; name a unique column
    in ``order_by`` when rows may tie. Columns are already typed; rows with a null key go to
    dead letters.

    Plain appends to a local table are read straight from their files, and updates and deletes
    insert nothing (see :mod:`ops.sources.delta_inserts`); any other commit (a merge that inserts, an
    overwrite, a partitioned or remote table) is read through the table's change data feed,
    which Delta holds only for commits made while ``delta.enableChangeDataFeed=true``. So turn
    the feed on when the table is created. A commit that no read can give is refused when it
    would be planned, before anything is recorded: the batches before it run, then the run stops
    with a :class:`~ops.errors.ConfigError` that names the version and says what to run.
    """

    name: str
    path: str
    schema: RecordSchema
    order_by: tuple[str, ...] = ()
    max_versions: int | None = None

    def columns(self) -> tuple[str, ...] | None:
        """The table's columns as of its latest commit, when delta-rs serves it and it exists;
        else those the schema declares, if any."""
        return tables.columns(self.path) or super().columns()

    def kinds(self) -> dict[str, str]:
        """The table's column types as of its latest commit (delta-rs), the schema's over them."""
        return {**(tables.kinds(self.path) or {}), **self.schema.fields}

    def setup(self, ctx: RunContext) -> None:
        if not tables.exists(ctx.spark, self.path):
            raise BadRecordError(f"source {self.name!r}: no Delta table at {self.path}")
        # Readable so far; say so before it stops being. Info, not a warning: a table that is
        # only appended to (a SQL table's changelog) never needs the feed.
        if delta_inserts.feed_on(self.path) is False:
            log.info("pipeline %r, source %r: the Delta table %s has no change data feed. Its "
                     "appends, updates and deletes are read without it, but a merge that inserts "
                     "rows or an overwrite made while it is off could never be read. Turn it on: "
                     "%s", ctx.pipeline, self.name, self.path, self.enable_feed_sql)

    @property
    def enable_feed_sql(self) -> str:
        """The SQL that turns the table's change data feed on."""
        return (f"ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES "
                f"({delta_inserts.FEED_PROPERTY} = true)")

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """Slices up to the latest version, each one the reader can read in one go (all from
        files, or all through the change feed); they stop before a version no read can give,
        and when that is the first one, nothing is planned: a :class:`ConfigError` says why."""
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        latest = tables.latest_version(self.path, ctx.spark)
        last = latest if self.max_versions is None else min(latest, start + limit * self.max_versions)
        last = self._typed_alike_until(ctx, start, last)
        slices: list[tuple[Any, Any]] = []
        for end in self._readable_until(ctx, start, last):
            slices += version_slices(start, end, self.max_versions, limit - len(slices))
            start = end
        return slices

    def _readable_until(self, ctx: RunContext, start: int, last: int) -> list[int]:
        """Ends of the parts of versions ``(start, last]`` that one read each can give, up to
        the first version none can; raises when that is the version right after ``start``."""
        if last <= start:
            return []
        commits = delta_inserts.readings(self.path, start + 1, last)
        if commits is None:  # a remote table (or a log cleaned up): the change feed must do
            if delta_inserts.appends_read_without_spark(self.path, start + 1, last):
                return [last]  # no Spark job to plan a batch of appends on an object store
            reason = delta_inserts.feed_error(ctx.spark, self.path, start + 1, last)
            if reason is not None:
                raise ConfigError(self._feed_missing(ctx, start, last, reason))
            return [last]
        ends, stuck = delta_inserts.readable_runs(commits)
        if stuck is not None and not ends:
            raise ConfigError(self._unreadable(ctx, stuck))
        if stuck is not None:
            log.warning("pipeline %r, source %r: planning up to version %d of %s; version %d "
                        "cannot be read (the next plan will say why)", ctx.pipeline, self.name,
                        ends[-1], self.path, stuck.version)
        return ends

    def _typed_alike_until(self, ctx: RunContext, start: int, last: int) -> int:
        """``last``, or the version before the first of ``(start, last]`` at which a column
        changed type: a batch's rows are one frame, and a column holding two types would reach
        operators and sinks as neither. Raises when that is the version right after ``start``
        (nothing planned). Columns added or dropped are no change: a row without a column has
        it null. Unchecked where delta-rs cannot read the table's versions."""
        if last <= start:
            return last
        seen = _column_types(self.path, max(start, 0))
        if seen is None or _column_types(self.path, last) == seen:
            return last  # the schema is the same at both ends: no version in between to check
        for version in range(max(start, 0) + 1, last + 1):
            now = _column_types(self.path, version)
            if now is None:
                continue
            if not _same_types(seen, now):
                if version == start + 1:
                    raise ConfigError(self._retyped(ctx, version, seen, now))
                log.warning("pipeline %r, source %r: planning up to version %d of %s; version %d "
                            "changes a column's type (the next plan will say so)", ctx.pipeline,
                            self.name, version - 1, self.path, version)
                return version - 1
            seen = {**now, **{c: kind for c, kind in seen.items() if c not in now}}
        return last

    def _retyped(self, ctx: RunContext, version: int, before: dict[str, Any],
                 now: dict[str, Any]) -> str:
        changed = sorted(c for c in set(before) & set(now) if not _alike(before[c], now[c]))
        columns = ", ".join(f"{c!r} from {_shown(before[c])} to {_shown(now[c])}" for c in changed)
        return (f"pipeline {ctx.pipeline!r}, source {self.name!r}: version {version} of the Delta "
                f"table {self.path} changes the type of column(s) {columns}. Rows before and "
                f"after cannot be read as one column, so nothing was planned from version "
                f"{version} on. Write the new values under a new column name instead (and keep "
                f"the old column's type), or read the table from version {version} on with a "
                f"new pipeline.")

    def _unreadable(self, ctx: RunContext, commit: delta_inserts.CommitReading) -> str:
        """Why ``commit`` cannot be read, and what the user can do."""
        what = ("an append whose files cannot be read directly (a partitioned table, deletion "
                "vectors, or columns such as decimals)" if commit.appended else
                f"a {commit.operation or 'commit'} that changed rows other than by appending")
        return (f"pipeline {ctx.pipeline!r}, source {self.name!r}: version {commit.version} of the "
                f"Delta table {self.path} is {what}; only the table's change data feed can give "
                f"the rows it inserted, and the feed was off at that version. Nothing was "
                f"planned from version {commit.version} on. {self._remedy()}")

    def _feed_missing(self, ctx: RunContext, start: int, last: int, reason: str) -> str:
        return (f"pipeline {ctx.pipeline!r}, source {self.name!r}: versions {start + 1}..{last} "
                f"of the Delta table {self.path} can only be read through its change data feed, "
                f"which does not hold them ({reason}). Nothing was planned. {self._remedy()}")

    def _remedy(self) -> str:
        """What to run: the feed turned on (unless it is on), and what it cannot mend."""
        turn_on = ("The feed is on now, but" if delta_inserts.feed_on(self.path) else
                   f"So that later commits can be read, turn the feed on: {self.enable_feed_sql}. "
                   f"Even then,")
        return (f"{turn_on} a commit made while it was off stays unreadable: to read past it, "
                f"re-create the table with the feed on (CREATE TABLE … TBLPROPERTIES "
                f"({delta_inserts.FEED_PROPERTY} = true) AS SELECT …) and read that one with a new "
                f"pipeline.")

    def lag(self, ctx: RunContext, after: Any) -> int:
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        return tables.history_version(ctx.spark, self.path) - start

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        version = tables.latest_version(self.path, spark)
        return str(version) if version >= 0 else None

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        try:
            # timestamps as instants: what the same function gets on executors
            rows = delta_inserts.inserted_rows(ctx.spark, self.path, int(start) + 1, int(end), self.order_by,
                                          instants=True, sort_all=ctx.sorted_rows)
            rows = rows.drop(columns=[delta_inserts.VERSION])
        except Exception as exc:
            reason = delta_inserts.missing_change_data(exc)
            if reason is None:
                raise
            raise ConfigError(self._plan_unreadable(ctx, start, end, reason)) from exc
        keys = list(self.schema.key_fields)
        missing = rows[keys].isna().any(axis=1) if keys else pd.Series(False, index=rows.index)
        return Slice(good=rows[~missing], rejected=_null_keys(rows[missing], keys, start, end))

    def read_frame(self, ctx: RunContext, start: Any, end: Any) -> FrameSlice:
        """Read by executors, in the order :meth:`read` gives: appends from the files they
        added, anything else from the change data feed; only rows with a null key (dead
        letters) come to the driver. Versions the feed does not hold (appends made while it was
        off, that the log does not tell the files of) are read on the driver, as :meth:`read`
        does."""
        if not (ctx.sorted_rows or self.order_by):
            schema = delta_inserts.table_schema(ctx.spark, self.path)
            files = delta_inserts.added_files(self.path, int(start) + 1, int(end), schema)
            if files is not None:
                return self._from_files(ctx, files, schema, start, end)
        commits = delta_inserts.readings(self.path, int(start) + 1, int(end))
        if commits is not None and not all(commit.from_feed for commit in commits):
            return super().read_frame(ctx, start, end)
        if commits is None:  # Spark would say so only once the batch runs on executors
            reason = delta_inserts.feed_error(ctx.spark, self.path, int(start) + 1, int(end))
            if reason is not None:
                raise ConfigError(self._plan_unreadable(ctx, start, end, reason))
        changes = (ctx.spark.read.format("delta").option("readChangeFeed", "true")
                   .option("startingVersion", int(start) + 1).option("endingVersion", int(end))
                   .load(self.path).where(F.col("_change_type") == "insert"))
        columns = [c for c in changes.columns if not c.startswith("_")]
        order = [F.col("_commit_version"), *(F.col(c).asc_nulls_first()
                                             for c in (self.order_by or columns))]
        rows = changes.orderBy(*order).select(*columns)
        rows = rows.withColumn(ORDER_COLUMN, F.lit(FIRST_ORDINAL) + F.monotonically_increasing_id())
        # from the unsorted feed: a filtered scan, not a second sort of the batch
        return self._keyed(rows, changes, columns, ["_commit_version", *(self.order_by or columns)],
                           start, end)

    def _from_files(self, ctx: RunContext, files: list[tuple[int, str]], schema: StructType,
                    start: Any, end: Any) -> FrameSlice:
        """The rows of ``files`` (an append's; the table's ``schema``), numbered in the table's
        order without a sort."""
        read = delta_inserts.file_rows(ctx.spark, self.path, files, schema)
        columns = [c for c in read.columns if c not in (delta_inserts.VERSION, delta_inserts.ROW_IN_TABLE)]
        rows = read.select(*[F.col(f"`{c}`") for c in columns],
                           (F.lit(FIRST_ORDINAL) + F.col(delta_inserts.ROW_IN_TABLE)).alias(ORDER_COLUMN))
        return self._keyed(rows, read, columns, [delta_inserts.ROW_IN_TABLE], start, end)

    def _keyed(self, rows: DataFrame, scanned: DataFrame, columns: list[str], order: list[str],
               start: Any, end: Any) -> FrameSlice:
        """``rows`` without those whose key is null, which come to the driver as dead letters:
        ``columns`` from ``scanned`` (the read before anything was sorted), in ``order``, whose
        first column only orders them."""
        keys = list(self.schema.key_fields)
        null_key = _null_key(keys)
        bad: pd.DataFrame = scanned.where(null_key).select(order[0], *columns).toPandas()
        bad = bad.sort_values(order, kind="stable", na_position="first").drop(columns=[order[0]])
        return FrameSlice(good=rows.where(~null_key), rejected=_null_keys(bad, keys, start, end))

    def _plan_unreadable(self, ctx: RunContext, start: Any, end: Any, reason: str) -> str:
        """A recorded plan the change feed cannot give (one recorded before plans were checked,
        or one whose files changed since): the way out."""
        return (f"pipeline {ctx.pipeline!r}, source {self.name!r}: the recorded plan of versions "
                f"{int(start) + 1}..{end} of the Delta table {self.path} cannot be read: {reason} "
                f"Discard the plans no checkpoint covers (their batches were never checkpointed: "
                f"nothing is lost) with ops.discard_plans(spark, pipeline) or the Dagster job "
                f"discard_plans: the next run plans again from the last checkpoint, in parts "
                f"that can each be read, and stops with the reason at a version none can. "
                f"{self._remedy()}")


def _null_key(keys: Iterable[str]) -> Column:
    """Whether a row has a null in any of its ``keys`` (false for an unkeyed stream)."""
    null_key = F.lit(False)
    for key in keys:
        null_key = null_key | F.col(key).isNull()
    return null_key


def _column_types(path: str, version: int) -> dict[str, Any] | None:
    """Each top-level column's Delta type (its JSON form) at ``version``; ``None``: unknown."""
    try:
        found = delta_io.metadata_at(path, version)
    except Exception as exc:  # a table feature delta-rs does not read: the check is skipped
        log.debug("schema of %s at version %d unknown: %s", path, version, exc)
        return None
    if found is None:
        return None
    fields = json.loads(found["schemaString"])["fields"]
    return {field["name"]: field["type"] for field in fields}


def _shown(kind: Any) -> str:
    """A Delta type for a message: ``long``, or a nested type's JSON."""
    return kind if isinstance(kind, str) else json.dumps(kind, sort_keys=True)


def _same_types(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether every column of both has a type in ``now`` that its values in ``before`` keep."""
    return all(_alike(before[c], now[c]) for c in set(before) & set(now))


def _alike(before: Any, now: Any) -> bool:
    """Whether values of Delta type ``before`` read as type ``now``: the same type, or a nested
    one whose common parts are alike (a struct gaining or losing a field, nullability aside).

    >>> _alike({"type": "struct", "fields": [{"name": "a", "type": "long"}]},
    ...        {"type": "struct", "fields": [{"name": "a", "type": "long"},
    ...                                      {"name": "b", "type": "string"}]})
    True
    >>> _alike("long", "string")
    False
    """
    if not (isinstance(before, dict) and isinstance(now, dict)):
        return bool(before == now)
    kind = before.get("type")
    if kind != now.get("type"):
        return False
    if kind == "struct":
        old = {field["name"]: field["type"] for field in before["fields"]}
        new = {field["name"]: field["type"] for field in now["fields"]}
        return all(_alike(old[name], new[name]) for name in old.keys() & new.keys())
    if kind == "array":
        return _alike(before["elementType"], now["elementType"])
    if kind == "map":
        return _alike(before["keyType"], now["keyType"]) and _alike(before["valueType"],
                                                                    now["valueType"])
    return bool(before == now)


def _null_keys(bad: pd.DataFrame, keys: list[str], start: Any, end: Any) -> pd.DataFrame:
    """Dead letters for rows of ``(start, end]`` whose key is null."""
    return pd.DataFrame({
        "position": [f"{start}..{end}"] * len(bad),
        "reason": [f"key field(s) {keys} null"] * len(bad),
        "raw": [row.to_json() for _, row in bad.iterrows()]},
        columns=REJECTED_COLUMNS)
