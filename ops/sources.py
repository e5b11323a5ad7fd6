"""Sources: bounded, replayable slices of input, addressed by position."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from state import PipelineLayout
from state import appended, tables

from ._context import RunContext
from .errors import BadRecordError, ConfigError
from .records import RecordSchema, encode_record, parse_payload

log = logging.getLogger(__name__)

_BEFORE_FIRST_VERSION = -1  # a new pipeline reads a Delta source from its version 0
INBOX_SCHEMA = StructType([
    StructField("seq", LongType(), False),
    StructField("payload", StringType(), False),
])


@dataclass(frozen=True)
class Slice:
    """Records read for one batch: ``good`` rows in source order and ``rejected`` ones with reasons."""

    good: pd.DataFrame
    rejected: pd.DataFrame  # columns: position, reason, raw


class Source(ABC):
    """A replayable input. Positions are JSON values; a batch reads ``(start, end]``."""

    name: str
    schema: RecordSchema

    @abstractmethod
    def setup(self, ctx: RunContext) -> None:
        """Create what the source needs (idempotent)."""

    @abstractmethod
    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """Up to ``limit`` consecutive slices after position ``after`` (``None``: from the
        beginning); empty when nothing new is there."""

    @abstractmethod
    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        """Exactly the records of ``(start, end]``, in order, validated."""

    @abstractmethod
    def lag(self, ctx: RunContext, after: Any) -> int:
        """How far the input is ahead of position ``after`` (versions or files not processed)."""

    @abstractmethod
    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        """A token that changes whenever new input arrives (for sensors); ``None`` while there
        is no input at all. Local paths are probed without Spark; other URIs need ``spark``."""


@dataclass(frozen=True)
class PublishReport:
    """What ``publish`` stored: every record is kept; ``rejected`` will go to dead letters."""

    accepted: int
    rejected: list[tuple[int, str]] = field(default_factory=list)
    version: int | None = None


@dataclass(frozen=True)
class CallbackSource(Source):
    """Records pushed with ``pipeline.publish(...)``, stored durably in the pipeline's inbox table.

    Each publish is one Delta commit; a batch reads a range of commit versions through Delta's
    change data feed, ordered by (version, position within the publish).
    """

    name: str
    schema: RecordSchema
    max_versions: int | None = None

    def setup(self, ctx: RunContext) -> None:
        _ensure_inbox(ctx.spark, ctx.layout.inbox(self.name))

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = 0 if after is None else int(after)
        latest = delta_version(ctx.layout.inbox(self.name), ctx.spark)
        return _version_slices(start, latest, self.max_versions, limit)

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        rows = appended.inserted_rows(ctx.spark, ctx.layout.inbox(self.name), int(start) + 1,
                                      int(end), order_by=("seq",))
        return _validate(self.schema, rows[[appended.VERSION, "seq", "payload"]])

    def lag(self, ctx: RunContext, after: Any) -> int:
        path = ctx.layout.inbox(self.name)
        return _latest_version(ctx.spark, path) - (0 if after is None else int(after))

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        version = delta_version(layout.inbox(self.name), spark)
        return str(version) if version > 0 else None  # version 0 creates the empty inbox

    def publish(self, spark: SparkSession, layout: PipelineLayout, records: Any,
                dedupe_id: str | None = None) -> PublishReport:
        """Append ``records`` in one commit; with ``dedupe_id`` a repeated publish is a no-op."""
        items = _as_records(records)
        rejected = []
        for index, record in enumerate(items):
            try:
                self.schema.check(record)
            except ValueError as exc:
                rejected.append((index, str(exc)))
        if rejected:
            log.warning("publish to %s.%s: %d of %d records are invalid and will go to dead "
                        "letters; first: record %d: %s", layout.pipeline, self.name,
                        len(rejected), len(items), *rejected[0])
        rows = pd.DataFrame({"seq": range(len(items)),
                             "payload": [encode_record(item) for item in items]})
        path = layout.inbox(self.name)
        _ensure_inbox(spark, path)
        if items:
            txn = (f"publish/{dedupe_id}", 0) if dedupe_id else None
            tables.append(tables.to_frame(spark, rows, INBOX_SCHEMA), path, txn=txn)
        return PublishReport(accepted=len(items) - len(rejected), rejected=rejected,
                             version=_latest_version(spark, path))


@dataclass(frozen=True)
class DeltaTableSource(Source):
    """An existing Delta table read incrementally by version through its change data feed.

    The table must have ``delta.enableChangeDataFeed=true`` (set when the table is created, or
    with ``ALTER TABLE … SET TBLPROPERTIES``). Rows inserted by commits ``(start, end]`` form a
    batch, ordered by commit version then ``order_by`` (default: every column), so a replay sees
    the same order; name a unique column in ``order_by`` when rows may tie. Plain appends are
    read straight from their files (see :mod:`state.appended`). Columns are already typed; rows
    with a null key go to dead letters.
    """

    name: str
    path: str
    schema: RecordSchema
    order_by: tuple[str, ...] = ()
    max_versions: int | None = None

    def setup(self, ctx: RunContext) -> None:
        if not tables.exists(ctx.spark, self.path):
            raise BadRecordError(f"source {self.name!r}: no Delta table at {self.path}")

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        return _version_slices(start, delta_version(self.path, ctx.spark), self.max_versions,
                               limit)

    def lag(self, ctx: RunContext, after: Any) -> int:
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        return _latest_version(ctx.spark, self.path) - start

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        version = delta_version(self.path, spark)
        return str(version) if version >= 0 else None

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        rows = appended.inserted_rows(ctx.spark, self.path, int(start) + 1, int(end),
                                      self.order_by).drop(columns=[appended.VERSION])
        keys = list(self.schema.key_fields)
        missing = rows[keys].isna().any(axis=1) if keys else pd.Series(False, index=rows.index)
        bad = rows[missing]
        rejected = pd.DataFrame({
            "position": [f"{start}..{end}"] * len(bad),
            "reason": [f"key field(s) {keys} null"] * len(bad),
            "raw": [row.to_json() for _, row in bad.iterrows()]},
            columns=["position", "reason", "raw"])
        return Slice(good=rows[~missing], rejected=rejected)


def _version_slices(start: int, latest: int, step: int | None,
                    limit: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, end]`` version ranges of at most ``step`` versions up to ``latest``."""
    slices = []
    while start < latest and len(slices) < limit:
        end = latest if step is None else min(latest, start + step)
        slices.append((start, end))
        start = end
    return slices


def _ensure_inbox(spark: SparkSession, path: str) -> None:
    tables.ensure(spark, path, INBOX_SCHEMA,
                  properties={"delta.enableChangeDataFeed": "true"})


def _latest_version(spark: SparkSession, path: str) -> int:
    return int(DeltaTable.forPath(spark, path).history(1).select("version").first()[0])


def delta_version(path: str, spark: SparkSession | None = None) -> int:
    """Latest version of the Delta table at ``path``; -1 when there is none yet.

    A local table is read from its ``_delta_log`` folder directly, so sensors need no JVM.
    """
    versions = tables.local_commit_versions(path)
    if versions is not None:
        return versions[-1] if versions else -1
    if spark is None:
        raise ConfigError(f"probing {path} needs a Spark session (it is not a local path)")
    return _latest_version(spark, path) if tables.exists(spark, path) else -1


def _as_records(records: Any) -> list[Any]:
    if isinstance(records, pd.DataFrame):
        return records.to_dict("records")
    if isinstance(records, Mapping):
        return [dict(records)]
    if isinstance(records, Iterable) and not isinstance(records, (str, bytes)):
        return list(records)
    raise TypeError(f"publish takes a dict, a list of dicts or a DataFrame, not {type(records).__name__}")


def _validate(schema: RecordSchema, rows: pd.DataFrame) -> Slice:
    good, index, rejected = [], [], []
    for position, (version, seq, payload) in enumerate(rows.itertuples(index=False)):
        try:
            good.append(schema.check(parse_payload(payload)))
            index.append(position)
        except ValueError as exc:
            rejected.append({"position": f"{version}:{seq}", "reason": str(exc), "raw": payload})
    return Slice(good=schema.frame(good, index),
                 rejected=pd.DataFrame(rejected, columns=["position", "reason", "raw"]))


class _Read:
    """``sp.read``: the source constructors, KX-style (``sp.read.from_callback(...)``)."""

    @staticmethod
    def from_callback(name: str, key: str | tuple[str, ...] | None = None,
                      schema: Mapping[str, str] | None = None,
                      max_versions: int | None = None):
        """A stream of records published with ``pipeline.publish(...)``.

        ``key`` names the field (or fields) that key the stream; ``schema`` maps field names to
        ``long``/``double``/``string``/``boolean``/``timestamp`` and is checked on every record.
        """
        from .pipeline import Stream  # the builder module imports sources; avoid the cycle

        source = CallbackSource(name=name, schema=RecordSchema(dict(schema or {}), key),
                                max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_delta(path: str, key: str | tuple[str, ...] | None = None, *, name: str = "delta",
                   order_by: tuple[str, ...] = (), max_versions: int | None = None):
        """A stream of the rows appended to the Delta table at ``path`` (change data feed on)."""
        from .pipeline import Stream

        source = DeltaTableSource(name=name, path=path, schema=RecordSchema({}, key),
                                  order_by=tuple(order_by), max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_files(directory: str, format: str, key: str | tuple[str, ...] | None = None,  # noqa: A002
                   schema: Mapping[str, str] | None = None, *, name: str = "files",
                   max_files: int | None = None, options: Mapping[str, str] | None = None):
        """A stream of the records in files landing in ``directory`` (``json``, ``csv`` with a
        header row, or ``parquet``); each file is processed exactly once, oldest first.

        ``schema`` is required for JSON and CSV; records that do not match it, and records with
        a null key, go to dead letters with ``file:line`` as their position.
        """
        from .file_source import FileSource
        from .pipeline import Stream

        source = FileSource(name=name, directory=directory, format=format,
                            schema=RecordSchema(dict(schema or {}), key), max_files=max_files,
                            options=tuple(sorted((options or {}).items())))
        return Stream(source=source)


read = _Read()
