"""The driver's side: a batch's stages as Spark plans over the executors' tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from state import (
    PipelineLayout,
    StateStore,
    encode_key,
    key_group_column,
    stored_values,
)

from ...columns import ORDER_COLUMN
from ...operators.event_time import (
    CLOCK,
)
from ..failures import OperatorFailure
from ..instants import Instants
from . import typed_state
from .clocks import after_timers, before_timers, measure_stream_time, one_key, ticked
from .on_executors import (
    bucket_task,
    decode_cells,
    narrow_task,
    owned,
    plain_key,
    reading_task,
    with_buckets,
)
from .output import StageOutput
from .rows import COLLECTED, STAGE_SCHEMA, STATE_COLUMNS, Summary
from .stages import Stage, timers_of
from .tasks import BUCKET_COLUMN, KEY_COLUMN, TaskSpec

_WHOLE_STREAM = 0       # the one bucket of a whole-stream stage


def run_stages(spark: SparkSession, layout: PipelineLayout, as_of: int | None, rows: DataFrame,
               spec: Callable[[Stage], TaskSpec], stages: list[Stage]) -> StageOutput:
    """Run ``stages`` over ``rows`` (with ``__order``) on executors; see the package docstring."""
    output = StageOutput(rows)
    for number, stage in enumerate(stages):
        # which of the stage's input columns its tasks turn back into instants (see Instants)
        task = replace(spec(stage), instants=Instants.of(output.rows))
        clock = StateStore.of_rows(stored_values(spark, layout, stage.names, as_of, one_key(
            spark, CLOCK)).toPandas()) if stage.clocked else None
        if clock is not None:
            task = measure_stream_time(output, task, clock)
        timers = timers_of(stage)
        due = None
        if timers is not None:
            task, due = before_timers(spark, layout, as_of, task, timers)
        inputs = output.rows
        typed_state.add_columns(layout, stage, output.rows, task.state_types)  # before tasks write them
        results = output.keep(_stage_frame(spark, layout, as_of, output, task, due))
        summary = _summary(results, output, task)
        _take(spark, output, results, summary, task, first=number == 0)
        if clock is not None:
            late = sum(done.late or 0 for done in summary.done)
            output.state.append(ticked(spark, task, clock, late))
        if timers is not None:
            after_timers(spark, layout, as_of, task, timers, inputs, output)
    return output


def _summary(results: DataFrame, output: StageOutput, task: TaskSpec) -> Summary:
    """What the stage's tasks told the driver; raises (having released ``output``) what they
    failed with."""
    try:
        summary = Summary.of(results.where(F.col("kind").isin(*COLLECTED)).collect())
    except Exception as exc:  # the tasks failed outside the operators' own code
        output.release()
        raise OperatorFailure(_task_failure(task, exc), _operators(task.stage)) from None
    if summary.errors:
        output.release()
        error = summary.errors[0]
        raise OperatorFailure(error.message, error.failed_in or _operators(task.stage),
                              error.first_rows)
    return summary


def _take(spark: SparkSession, output: StageOutput, results: DataFrame, summary: Summary,
          task: TaskSpec, first: bool) -> None:
    """Add what a stage's tasks made to ``output``: its rows (the next stage's input), counts,
    and the state and sink files or rows they wrote."""
    if first:
        output.rows_in = sum(done.rows_in for done in summary.done)
    output.rows_out = sum(done.rows_out for done in summary.done)
    output.keys = max(output.keys, sum(done.keys for done in summary.done))
    output.rows = _decoded(spark, results, [done.schema for done in summary.done if done.schema])
    output.sink_files = _sink_files(task, summary)
    if task.writes_state:
        output.state_files = task.state_files
        output.written += [written.action for written in summary.files]
    else:
        output.state.append(results.where(F.col("kind") == "state").select(*STATE_COLUMNS))


def _operators(stage: Stage) -> str:
    """The names of ``stage``'s operators, for a failure of the stage as a whole."""
    return ", ".join(op.name for op in stage.operators)


def _sink_files(task: TaskSpec, summary: Summary) -> dict[str, list[str]]:
    """Per sink of ``task.sink_files``, the files its tasks wrote, when every task with rows
    wrote one (a task whose rows the table would not take as they are wrote none, and then the
    sink writes the batch's rows itself)."""
    written: dict[str, list[str]] = {target.sink: [] for target in task.sink_files}
    for sink in summary.sinks:
        if sink.sink in written:
            if sink.action is None:
                del written[sink.sink]
            else:
                written[sink.sink].append(sink.action)
    return written


def _stage_frame(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                 output: StageOutput, task: TaskSpec, due: DataFrame | None = None) -> DataFrame:
    """The stage's tasks over the rows in ``output`` (and, for a timed map, the ``due`` keys:
    encoded keys whose timers or TTL fire, with or without rows)."""
    stage, rows = task.stage, output.rows
    if stage.keys == ():
        return rows.mapInPandas(lambda chunks: narrow_task(task, chunks), STAGE_SCHEMA)
    if stage.keys is None:  # one group with all of the operator's state
        rows = rows.withColumn(BUCKET_COLUMN, F.lit(_WHOLE_STREAM))
        present = spark.createDataFrame([("", "", None)], "operator string, key string, value string")
        state = (stored_values(spark, layout, stage.names, as_of).unionByName(present)
                 .withColumn(BUCKET_COLUMN, F.lit(_WHOLE_STREAM)))
    else:
        rows = _with_added_rows(spark, rows, task)
        if task.state_files is not None and due is None and not stage.clocked:
            # each task reads its groups' state itself: one shuffle, of the rows only
            rows = _tagged(rows, task).repartition(task.buckets, BUCKET_COLUMN)  # see partition_tags
            return rows.groupBy(BUCKET_COLUMN).applyInPandas(
                lambda part: reading_task(task, part), STAGE_SCHEMA)
        # kept: the keys feed both the state read and the cogroup
        rows = output.keep(_tagged(rows, task))
        if stage.clocked:  # every open window (or session): each bucket closes its own
            stored = stored_values(spark, layout, stage.names, as_of).where(
                F.col("key") != encode_key(CLOCK))
            state = stored.mapInPandas(
                lambda chunks: owned(chunks, task),
                StructType([*stored.schema.fields, StructField(BUCKET_COLUMN, IntegerType())]))
        else:
            batch_keys = rows.select(F.col(KEY_COLUMN).alias("key")).distinct()
            if due is not None:
                batch_keys = batch_keys.unionByName(due).distinct()
            groups = key_group_column(F.col("key"), task.key_groups)
            entries = {name: column for op in stage.operators for name, column in op.declares().entries}
            state = (stored_values(spark, layout, stage.names, as_of, batch_keys, entries)
                     .withColumn(BUCKET_COLUMN, task.bucket(groups)))
    # repartitioned by hand: see partition_tags
    rows, state = (frame.repartition(task.buckets, BUCKET_COLUMN) for frame in (rows, state))
    return (rows.groupBy(BUCKET_COLUMN).cogroup(state.groupBy(BUCKET_COLUMN))
            .applyInPandas(lambda group, part, held: bucket_task(task, group, part, held),
                           STAGE_SCHEMA))


def _with_added_rows(spark: SparkSession, rows: DataFrame, task: TaskSpec) -> DataFrame:
    """``rows`` and the rows the stage's keyed operator adds to its input in this batch (see
    :meth:`Operator.added_rows`), numbered before the input's so they come first."""
    added = task.stage.operators[0].added_rows(task.batch_id)
    if added is None:
        return rows
    added = added.assign(**{ORDER_COLUMN: -1 - np.arange(len(added))[::-1]})
    types = {name: rows.schema[name].dataType for name in added.columns if name in rows.columns}
    frame = spark.createDataFrame(added).select(
        *(F.col(name).cast(types[name]) if name in types else F.col(name) for name in added.columns))
    return rows.unionByName(frame, allowMissingColumns=True)


def _tagged(rows: DataFrame, task: TaskSpec) -> DataFrame:
    """``rows`` with their encoded key and its bucket (see :func:`with_buckets`): computed by
    Spark for one integer key column that the operator keys its state by (an int's encoding is
    its digits, and Spark's CRC-32 is Python's), by Python otherwise."""
    plain = plain_key(task)
    if (plain is not None and plain in rows.columns
            and isinstance(rows.schema[plain].dataType, (IntegerType, LongType))):
        encoded = F.coalesce(F.col(plain).cast("string"), F.lit(encode_key(None)))
        bucket = task.bucket(key_group_column(encoded, task.key_groups)).cast("int")
        return rows.withColumn(KEY_COLUMN, encoded).withColumn(BUCKET_COLUMN, bucket)
    schema = StructType([*rows.schema.fields, StructField(KEY_COLUMN, StringType()),
                         StructField(BUCKET_COLUMN, IntegerType())])
    return rows.mapInPandas(lambda chunks: with_buckets(chunks, task), schema)


def _decoded(spark: SparkSession, results: DataFrame, schemas: list[bytes]) -> DataFrame:
    """The output rows of a stage, decoded from their Arrow cells on executors."""
    if not schemas:
        return spark.createDataFrame([], StructType([StructField(ORDER_COLUMN, LongType())]))
    unified = _spark_ready(pa.unify_schemas([pa.ipc.read_schema(pa.py_buffer(s)) for s in schemas],
                                            promote_options="permissive"))
    return (results.where(F.col("kind") == "rows").select("payload")
            .mapInArrow(lambda batches: decode_cells(batches, unified), from_arrow_schema(unified)))


def _spark_ready(schema: pa.Schema) -> pa.Schema:
    """Arrow types Spark cannot hold, replaced: null columns become text, timestamps micros."""
    fields = []
    for arrow_field in schema:
        kind = arrow_field.type
        if pa.types.is_null(kind):
            kind = pa.string()
        elif pa.types.is_timestamp(kind):
            kind = pa.timestamp("us", tz=kind.tz)
        fields.append(pa.field(arrow_field.name, kind))
    return pa.schema(fields)


def _task_failure(task: TaskSpec, exc: Exception) -> str:
    """A failure Spark reports for a stage's tasks (user code that executors cannot load, a
    worker that died and could not be retried), told in its Python lines, not the JVM's."""
    lines = [line for line in str(exc).splitlines()
             if line.strip() and not line.lstrip().startswith(("at ", "...")) and "SQLSTATE" not in line]
    names = ", ".join(repr(op.name) for op in task.stage.operators)
    return (f"pipeline {task.pipeline!r}, batch {task.batch_id}, operator(s) {names}: the tasks "
            f"running them on Spark executors failed: {lines[-1] if lines else type(exc).__name__}. "
            "Executors must be able to import every module your functions use (install them "
            "there, or ship them with spark.submit.pyFiles). Nothing of this batch was "
            "committed; the next run retries it.\n\n" + "\n".join(lines[-20:]))
