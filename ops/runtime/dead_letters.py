"""The dead-letter table: records a source rejected, with the reason and the raw record."""

from __future__ import annotations

import logging

import pandas as pd
from pyspark.sql.types import LongType, StringType, StructField, StructType

from state.lake import tables

from ..context import RunContext

log = logging.getLogger(__name__)

DEAD_LETTER_SCHEMA = StructType([
    StructField("batch_id", LongType(), False),
    StructField("source", StringType(), False),
    StructField("position", StringType(), False),
    StructField("reason", StringType(), False),
    StructField("raw", StringType(), True),
])


def write_dead_letters(ctx: RunContext, batch_id: int, source: str, rejected: pd.DataFrame) -> None:
    """Append a batch's rejected records (``position, reason, raw``), idempotently by batch id;
    the first reason goes to the log."""
    if rejected.empty:
        return
    rows = rejected.assign(batch_id=batch_id, source=source)
    log.warning("%s batch %d: %d record(s) to dead letters; first: %s", ctx.pipeline, batch_id,
                len(rows), rows["reason"].iloc[0])
    tables.append(tables.to_frame(ctx.spark, rows[DEAD_LETTER_SCHEMA.names], DEAD_LETTER_SCHEMA),
                  ctx.layout.dead_letters, txn=ctx.txn("dead_letters", batch_id))
