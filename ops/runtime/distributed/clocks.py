"""Stream time and timers across a whole batch: what the driver measures and keeps of them
for a clocked stage or a timed map."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StructField,
    StructType,
)

from state import (
    STATE_SCHEMA,
    PipelineLayout,
    StateStore,
    encode_key,
    key_groups,
)

from ...columns import ORDER_COLUMN
from ...context import BatchScope
from ...operators import TimerDeclaration
from ...operators.event_time import (
    NO_TIME,
    STREAM_TIME_COLUMN,
)
from ...operators.timing import moved_watermark, wake_time
from .. import timed
from .on_executors import latest_times, stamped
from .output import StageOutput
from .stages import is_event_time
from .tasks import PART_COLUMN, TaskSpec


def before_timers(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                   task: TaskSpec, timers: TimerDeclaration) -> tuple[TaskSpec, DataFrame]:
    """The watermark at the batch's start (event time), handed to the tasks, and the keys
    whose deadlines are due, whose state joins the stage's."""
    if timers.event_time is None:
        return task, timed.due_keys(spark, layout, as_of, timers, task.batch_time)
    watermark = timed.watermark_before(spark, layout, as_of, timers)
    task = replace(task, watermarks={**task.watermarks, timers.operator: watermark})
    return task, timed.due_keys(spark, layout, as_of, timers, watermark)


def after_timers(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                  task: TaskSpec, timers: TimerDeclaration, inputs: DataFrame,
                  output: StageOutput) -> None:
    """The watermark the batch moved (a changed state row) and the output's ``wake_at``."""
    changed = output.state[-1]  # the stage's own changed state rows
    watermark = task.watermarks.get(timers.operator)
    if timers.event_time is not None:
        before, watermark = watermark, moved_watermark(
            timers, watermark, timed.latest_event(inputs, timers))
        if watermark is not None and watermark != before:
            output.state.append(timed.watermark_row(spark, timers, watermark, task.key_groups))
    earliest = timed.earliest_after(spark, layout, as_of, timers, changed)
    wake = wake_time(timers, earliest, watermark, task.batch_time)
    if wake is not None:
        output.wake_at = wake if output.wake_at is None else min(output.wake_at, wake)


def one_key(spark: SparkSession, key: Any) -> DataFrame:
    return spark.createDataFrame([(encode_key(key),)], "key string")


def measure_stream_time(output: StageOutput, task: TaskSpec, clock: StateStore) -> TaskSpec:
    """Stamp every row with the stream time before it (across all keys, in input order) and
    return ``task`` with the stream time after the batch (see the package docstring)."""
    operator = task.stage.operators[0]
    assert is_event_time(operator)
    _, held = operator.clock(BatchScope(task.pipeline, task.batch_id, (), clock))
    ranged = output.keep(output.rows.repartitionByRange(task.buckets, F.col(ORDER_COLUMN))
                         .sortWithinPartitions(ORDER_COLUMN)
                         .withColumn(PART_COLUMN, F.spark_partition_id()))
    latest: dict[int, int] = {}
    progress: int | None = None
    measured = ranged.mapInPandas(lambda chunks: latest_times(chunks, operator, task.instants),
                                  "part int, latest long, reached long")
    for part, time, reached in measured.collect():
        latest[part] = max(latest.get(part, NO_TIME), time)
        progress = progress if reached is None else max(progress or NO_TIME, reached)
    starts, running = {}, NO_TIME if held["time"] is None else held["time"]
    for part in sorted(latest):
        starts[part], running = running, max(running, latest[part])
    schema = StructType([*output.rows.schema.fields, StructField(STREAM_TIME_COLUMN, LongType())])
    output.rows = ranged.mapInPandas(lambda chunks: stamped(chunks, operator, starts, task.instants),
                                     schema)
    after = None if running == NO_TIME else running
    if progress is not None:  # the operator's progress column (see EventTimeAggregate)
        after = progress if after is None else max(after, progress)
    return replace(task, stream_time={operator.name: after})


def ticked(spark: SparkSession, task: TaskSpec, clock: StateStore, late: int) -> DataFrame:
    """The operator's clock after the batch, as a changed state row."""
    operator = task.stage.operators[0]
    assert is_event_time(operator)
    scope = BatchScope(task.pipeline, task.batch_id, (), clock)
    store, held = operator.clock(scope)
    operator.tick(scope, store, held, task.stream_time[operator.name], late)
    rows = store.changed_rows()
    rows["key_group"] = key_groups(rows["key"], task.key_groups)
    columns = StructType([f for f in STATE_SCHEMA if f.name != "checkpoint_id"])
    return spark.createDataFrame(rows[columns.names], columns)

