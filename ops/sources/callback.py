"""``sp.read.from_callback(name)``: records pushed with ``pipeline.publish(...)``, kept durably in
the pipeline's inbox table before any batch reads them."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from state import PipelineLayout, delta_io
from state.lake import tables

from ..columns import ROWTIME
from ..context import RunContext
from . import delta_inserts
from .base import REJECTED_COLUMNS, Slice, Source, version_slices
from .records import RecordSchema, encode_record, parse_payload

log = logging.getLogger(__name__)

INBOX_SCHEMA = StructType([
    StructField("seq", LongType(), False),
    StructField("payload", StringType(), False),
])


@dataclass(frozen=True)
class PublishReport:
    """What ``publish`` stored: every record is kept; ``rejected`` will go to dead letters."""

    accepted: int
    rejected: list[tuple[int, str]] = field(default_factory=list)
    #: the inbox's version once the records are stored: the publish's commit's (or a later one
    #: this process read), the latest it knew of when nothing was written
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
    #: add ``ROWTIME``: the time of the publish that stored each record (see with_rowtime)
    rowtime: bool = False

    def tables(self, layout: PipelineLayout) -> list[str]:
        return [layout.inbox(self.name)]

    def setup(self, ctx: RunContext) -> None:
        _ensure_inbox(ctx.spark, ctx.layout.inbox(self.name))

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = 0 if after is None else int(after)
        latest = tables.latest_version(ctx.layout.inbox(self.name), ctx.spark)
        return version_slices(start, latest, self.max_versions, limit)

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        path = ctx.layout.inbox(self.name)
        rows = delta_inserts.inserted_rows(ctx.spark, path, int(start) + 1, int(end), order_by=("seq",))
        sliced = _validate(self.schema, rows[[delta_inserts.VERSION, "seq", "payload"]])
        if self.rowtime:  # each good row's publish: the commit that stored it
            published = delta_io.commit_times(path, int(start) + 1, int(end))
            versions = rows[delta_inserts.VERSION].to_numpy()[sliced.good.index]
            sliced.good[ROWTIME] = pd.to_datetime(
                pd.Series([published.get(int(v)) for v in versions], index=sliced.good.index,
                          dtype="Int64"), unit="ms", utc=True)
        return sliced

    def with_rowtime(self) -> tuple[Source, str]:
        """ROWTIME is the time of the publish that stored the record (its commit's time)."""
        return dataclasses.replace(self, rowtime=True), ROWTIME

    def lag(self, ctx: RunContext, after: Any) -> int:
        path = ctx.layout.inbox(self.name)
        return tables.history_version(ctx.spark, path) - (0 if after is None else int(after))

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        version = tables.latest_version(layout.inbox(self.name), spark)
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
            tables.append_rows(spark, rows, path, schema=INBOX_SCHEMA, txn=txn, again_soon=False)
        return PublishReport(accepted=len(items) - len(rejected), rejected=rejected,
                             version=tables.held_version(path, spark))


def _ensure_inbox(spark: SparkSession, path: str) -> None:
    tables.ensure(spark, path, INBOX_SCHEMA,
                  properties={"delta.enableChangeDataFeed": "true"})


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
                 rejected=pd.DataFrame(rejected, columns=REJECTED_COLUMNS))
