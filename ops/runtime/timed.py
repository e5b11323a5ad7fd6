"""Distributed mode: what the driver works out for a keyed map with timers or TTL, so that each
task can fire the timers of its own keys (see :mod:`ops.operators.timing` for the rules).

Before the stage: the watermark at the batch's start (event time) and the keys whose deadlines
are due, which join the batch's keys in the stage's state read, so their buckets run even
with no rows. After it: the watermark the batch moved, as a changed state row, and when a
batch with no input would next fire something (``wake_at`` of the checkpoint, from
:func:`~ops.operators.timing.wake_time`). Deadlines are
stored as plain epoch-ms numbers, so Spark compares them without Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from state import STATE_SCHEMA, WATERMARK, PipelineLayout, encode_key, key_group, stored_values
from state import timer_state as timers_name

from ..operators import TimerDeclaration
from ..operators.event_time import NO_TIME
from ..operators.timing import event_ms
from .instants import Instants

_WATERMARK_KEY = encode_key(WATERMARK)


def watermark_before(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                     clock: TimerDeclaration) -> int | None:
    """The operator's watermark as of checkpoint ``as_of`` (``None``: no event seen)."""
    keys = spark.createDataFrame([(_WATERMARK_KEY,)], "key string")
    rows = stored_values(spark, layout, [timers_name(clock.operator)], as_of, keys).collect()
    return int(rows[0]["value"]) if rows else None


def _deadlines(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
               clock: TimerDeclaration) -> DataFrame:
    return (stored_values(spark, layout, list(clock.names), as_of)
            .where(F.col("key") != _WATERMARK_KEY))


def due_keys(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
             clock: TimerDeclaration, now: int | None) -> DataFrame:
    """The encoded keys (column ``key``) with a timer or TTL deadline strictly before ``now``."""
    deadlines = _deadlines(spark, layout, as_of, clock)
    if now is None:
        return deadlines.select("key").limit(0)
    return deadlines.where(F.col("value").cast("long") < now).select("key").distinct()


def latest_event(rows: DataFrame, clock: TimerDeclaration) -> int | None:
    """The largest event time (epoch ms) among ``rows``, or ``None``. Times are read as the
    operator got them (instants: see Instants), not as naive times of the session's zone."""
    instants = Instants.of(rows)
    found = (rows.mapInPandas(lambda chunks: _latest(instants.each(chunks), clock), "latest long")
             .agg(F.max("latest")).collect())
    return found[0][0] if found and found[0][0] is not None else None


def _latest(chunks: Iterator[pd.DataFrame], clock: TimerDeclaration) -> Iterator[pd.DataFrame]:
    for chunk in chunks:
        times = event_ms(clock, chunk)
        times = times[times != NO_TIME]
        if len(times):
            yield pd.DataFrame({"latest": [int(times.max())]})


def watermark_row(spark: SparkSession, clock: TimerDeclaration, watermark: int,
                  key_groups: int) -> DataFrame:
    """The changed state row that stores ``watermark``."""
    columns = StructType([f for f in STATE_SCHEMA if f.name != "checkpoint_id"])
    return spark.createDataFrame([(timers_name(clock.operator), _WATERMARK_KEY, str(watermark),
                                   False, key_group(_WATERMARK_KEY, key_groups))], columns)


def earliest_after(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                   clock: TimerDeclaration, changed: DataFrame) -> int | None:
    """The earliest deadline the operator holds once ``changed`` (the stage's changed state
    rows) is applied to its state as of ``as_of``."""
    mine = changed.where(F.col("operator").isin(list(clock.names))
                         & (F.col("key") != _WATERMARK_KEY))
    kept = _deadlines(spark, layout, as_of, clock).join(
        mine.select("operator", "key"), ["operator", "key"], "left_anti").select("value")
    live = kept.unionByName(mine.where(~F.col("deleted")).select("value"))
    found = live.agg(F.min(F.col("value").cast("long"))).collect()
    return found[0][0] if found and found[0][0] is not None else None
