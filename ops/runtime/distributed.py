"""Distributed mode: a batch's operators and their state run on Spark executors.

The driver builds a plan of Spark DataFrames and never holds a batch's rows or state:

1. The operators are cut into **stages**, each starting at a stateful operator and taking the
   stateless ones after it along (:func:`stages_of`). Stateless operators before the first
   stateful one form a narrow stage, run where the rows are.
2. A **keyed** stage tags every row with its encoded key and key group and shuffles the rows
   by bucket: a contiguous range of key groups, as many buckets as shuffle partitions (a call
   per key group cost 3.5 s of a 7 s batch of 25k rows on 256 groups). Each bucket is one call
   of the operators, on an executor, with a :class:`~state.StateStore` over its keys' state,
   which the task reads from the ``_state`` files of its groups itself (:class:`StateFiles`;
   where delta-rs does not read the table, and for timed maps, the rows are cogrouped with a
   Spark semi-join of ``_state`` instead): ``sp.get``/``sp.set`` behave as on the driver. Key
   groups, not tasks, own state, so any number of tasks works.
3. A **clocked** stage (windows, sessions: keyed, but whether a record is late depends on the
   stream time before it, across all keys) first measures stream time over the whole batch in
   input order: the rows are range-partitioned by ``__order``, each partition's largest event
   time collected (one number per partition), and each row stamped with the stream time before
   it. Then it runs as a keyed stage, with all of the operator's state (its open windows, each
   routed by the keys that own it) so that every bucket closes its own windows; the driver
   writes the operator's clock (stream time, late records the tasks counted).
4. A **whole-stream** stage (unkeyed state) runs as one group, with all of the operator's state.
5. Each group returns its output rows (Arrow IPC, one binary cell per chunk), its changed state
   rows, counts, or the error it raised, in one frame of :data:`STAGE_SCHEMA`. The driver
   collects only the counts, the output schemas and errors; the next stage decodes the rows.
6. **Files written where the rows are.** Once ``_state`` exists and delta-rs appends to it, a
   task writes its changed state as a ``_state`` data file itself and returns only the file's
   add action, which the driver commits with the checkpoint's record (:class:`StateFiles`,
   :class:`~state.WrittenState`; not in a batch with a clocked stage or a timed map, whose
   driver-made rows and deadline reads need the rows in Spark: :func:`writes_state_files`);
   likewise the last stage's tasks write each Delta sink's
   files when the table takes the rows as they are (:meth:`~ops.sinks.FileSink.file_target`; a
   task whose rows it would not take writes none, and the sink writes the batch itself). No
   state or sink row then passes through Spark's writers: at 1M events per batch on two cores
   that more than halved a batch (``bench/README.md``). A file whose commit never comes (a crash, a
   refused batch) is never read; a vacuum removes it.

Rows keep their source order through the ``__order`` column (an operator sees its rows sorted
by it, as on the driver); an operator that makes new rows (an aggregation) numbers them after
every source ordinal, by bucket and position (so those numbers, and only they, depend on the
number of shuffle partitions; a replayed batch's sink write is skipped or complete either way).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from state import (
    STATE_SCHEMA,
    ChangedState,
    PipelineLayout,
    SparkStateRows,
    StateStore,
    WrittenState,
    decode_key,
    delta_io,
    encode_key,
    key_group_column,
    key_groups,
    stored_values,
    write_state_files,
)

from ..columns import BATCH_COLUMN, ORDER_COLUMN, ROW_COLUMN
from ..context import BatchScope
from ..errors import OperatorError
from ..operators import Operator, StateKind, TimerDeclaration
from ..operators.aggregates import to_python
from ..operators.event_time import (
    CLOCK,
    LATE_COUNT,
    NO_TIME,
    STREAM_TIME_COLUMN,
    EventTimeAggregate,
    running_max_before,
)
from ..operators.timing import moved_watermark, wake_time
from ..sinks import FileTarget
from . import timed
from .failures import OperatorFailure, first_rows
from .reports import distinct_keys

KEY_COLUMN, BUCKET_COLUMN, PART_COLUMN = "__key", "__bucket", "__part"
_NEW_ROWS = 1 << 62     # ordinals of rows an operator made: after every source ordinal
_BUCKET_SPAN = 1 << 32  # positions per bucket among them
_CHUNK_ROWS = 100_000   # output rows per Arrow cell
_WHOLE_STREAM = 0       # the one bucket of a whole-stream stage

STAGE_SCHEMA = StructType([
    StructField("kind", StringType(), False),       # rows | state | file | sink | done | error
    StructField("payload", BinaryType(), True),     # rows: Arrow IPC of output rows; done: their schema
    StructField("operator", StringType(), True),    # state rows … (sink: the sink's name)
    StructField("key", StringType(), True),
    StructField("value", StringType(), True),       # … or file, sink: a data file's add action
    StructField("deleted", BooleanType(), True),
    StructField("key_group", IntegerType(), True),
    StructField("rows_in", LongType(), True),       # done: what the group saw and made
    StructField("rows_out", LongType(), True),
    StructField("keys", LongType(), True),
    StructField("late", LongType(), True),          # records dropped as late
    StructField("message", StringType(), True),     # error: message and traceback
])


@dataclass(frozen=True)
class Stage:
    """Operators run together in one pass: a stateful one (if any) and the stateless ones after
    it. ``keys``: the key columns of a keyed stage; ``None`` for a whole-stream stage; ``()``
    for a narrow (stateless) stage. ``clocked``: a keyed stage whose operator needs the stream
    time measured over the whole batch first (an :class:`EventTimeAggregate`)."""

    operators: tuple[Operator, ...]
    keys: tuple[str, ...] | None
    clocked: bool = False

    @property
    def names(self) -> list[str]:
        return [name for op in self.operators for name in op.declares().names]


def stages_of(operators: tuple[Operator, ...]) -> list[Stage]:
    """The stages that run ``operators`` (see the module docstring).

    >>> from ops.operators.basic import Filter, Map
    >>> ops = (Filter(bool, "f"), Map(len, "m", state=0, keys=("k",)), Filter(bool, "g"))
    >>> [(len(s.operators), s.keys) for s in stages_of(ops)]
    [(1, ()), (2, ('k',))]
    """
    stages: list[Stage] = [] if operators else [Stage((), ())]  # no operators: rows pass through
    for op in operators:
        declared = op.declares()
        if declared.kind is StateKind.STATELESS and stages:
            stages[-1] = replace(stages[-1], operators=stages[-1].operators + (op,))
        elif declared.kind is StateKind.STATELESS:
            stages.append(Stage((op,), ()))
        elif declared.kind is StateKind.KEYED and not declared.shared:
            stages.append(Stage((op,), declared.keys))
        elif declared.kind is StateKind.KEYED and isinstance(op, EventTimeAggregate):
            stages.append(Stage((op,), declared.keys, clocked=True))
        else:
            stages.append(Stage((op,), None))
    return stages


@dataclass(frozen=True)
class TaskSpec:
    """What an executor needs to run a stage for one batch (shipped to it with the closure)."""

    pipeline: str
    batch_id: int
    key_fields: tuple[str, ...]
    inputs: dict[str, Any]
    key_groups: int
    buckets: int  # calls per keyed stage: each runs a contiguous range of key groups
    stage: Stage
    batch_time: int = 0  # the batch's processing time (epoch ms)
    operators: tuple[str, ...] = ()  # the pipeline's stateful operators (for errors)
    #: a clocked stage's operator -> stream time after the batch (see BatchScope.stream_time)
    stream_time: dict[str, int | None] = field(default_factory=dict)
    #: a timed map -> its watermark at the batch's start (see BatchScope.watermarks)
    watermarks: dict[str, int | None] = field(default_factory=dict)
    #: where a keyed stage's tasks read their keys' state themselves, as of which checkpoint,
    #: and how they reach it (see StateFiles); None: it is handed to them by a cogroup
    state_files: StateFiles | None = None
    #: the sinks whose files the (last) stage's tasks write themselves (see FileSink.file_target)
    sink_files: tuple[FileTarget, ...] = ()

    @property
    def writes_state(self) -> bool:
        """Whether the tasks write their changed state's files (see StateFiles)."""
        return self.state_files is not None and self.state_files.checkpoint_id is not None

    def owning_bucket(self, encoded_keys: Any, groups: np.ndarray | None = None) -> np.ndarray:
        """The bucket of each stored state key: that of the key which owns it (a window's
        keys own each of their windows). ``groups``: the keys' own groups, if known."""
        operator = self.stage.operators[0]
        if isinstance(operator, EventTimeAggregate):
            encoded_keys = [encode_key(operator.owner(decode_key(key))) for key in encoded_keys]
            groups = None  # the owners' groups, not the keys'
        if groups is None:
            groups = key_groups(encoded_keys, self.key_groups).astype("int64")
        return self.bucket(groups)

    def groups_of(self, bucket: int) -> tuple[int, int]:
        """The key groups ``first, end`` (``first <= group < end``) that bucket ``bucket`` (a
        :func:`partition_tags` value) runs: the inverse of :meth:`bucket`.

        >>> spec = TaskSpec("p", 1, (), {}, key_groups=10, buckets=4, stage=Stage((), ("k",)))
        >>> [spec.groups_of(tag) for tag in partition_tags(4)]
        [(0, 3), (3, 5), (5, 8), (8, 10)]
        """
        index = partition_tags(self.buckets).index(bucket)
        first = -(-index * self.key_groups // self.buckets)
        return first, -(-(index + 1) * self.key_groups // self.buckets)

    def bucket(self, group: Any) -> Any:
        """The bucket (one operator call) that runs key group ``group``: an int, a numpy array
        or a Spark column of them (one formula for rows, state and the check). A bucket's id
        is the :func:`partition_tags` value of its range of groups, so that each bucket has a
        shuffle partition, and a task, of its own."""
        tags = partition_tags(self.buckets)
        if isinstance(group, Column):
            index = F.floor(group * self.buckets / self.key_groups).cast("int")
            return F.element_at(F.array(*map(F.lit, tags)), index + 1)
        return np.asarray(tags)[group * self.buckets // self.key_groups]


@dataclass(frozen=True)
class StateFiles:
    """How a keyed stage's tasks read their keys' state from ``_state``'s files themselves
    (:meth:`StateStore.of_files`), skipping the Spark read of the state and its shuffle: the
    table, the checkpoint the batch starts from, and the object store's settings from the
    driver's environment (credentials, as Spark's own settings carry them to executors)."""

    path: str
    as_of: int
    storage: dict[str, str] = field(default_factory=dict, repr=False)  # credentials, maybe
    #: the checkpoint the batch's changed state goes into, when the tasks write it as
    #: ``_state`` files themselves (the driver commits them with the checkpoint's record, and
    #: no state row passes through Spark); ``None``: they return the rows
    checkpoint_id: int | None = None


@functools.cache
def partition_tags(partitions: int) -> tuple[int, ...]:
    """For each shuffle partition ``p``, the smallest int that Spark's hash partitioning
    (Murmur3, seed 42, of an int column) sends to ``p``. Bucket ids are these, so that
    ``repartition(n, bucket)`` gives every bucket its own task: plain ids 0…n-1 collide (8
    buckets filled 6 of 8 partitions), and the shuffle Spark plans for a cogroup by itself
    is coalesced by adaptive execution into one task when the batch is small.

    >>> partition_tags(4)
    (12, 6, 2, 0)
    """
    tags: dict[int, int] = {}
    candidate = 0
    while len(tags) < partitions:
        tags.setdefault(_murmur3_int(candidate) % partitions, candidate)
        candidate += 1
    return tuple(tags[p] for p in range(partitions))


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a 32-bit int (Murmur3 x86_32), as a signed int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotl((value * 0xCC9E2D51) & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h1 = ((h1 ^ (h1 >> shift)) * factor) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


@dataclass
class StageOutput:
    """What a batch's stages produced: its output rows and changed state (lazy, persisted
    DataFrames), and counts collected from the tasks."""

    rows: DataFrame
    state: list[DataFrame] = field(default_factory=list)
    #: where the tasks wrote their changed state, when they did (see StateFiles) …
    state_files: StateFiles | None = None
    written: list[str] = field(default_factory=list)  # … and the files' add actions
    #: per sink whose files every task wrote: their add actions (see FileSink.file_target)
    sink_files: dict[str, list[str]] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    keys: int = 0
    persisted: list[DataFrame] = field(default_factory=list)
    wake_at: int | None = None  # when a batch with no input would next fire a timer

    def changed_state(self, spark: SparkSession) -> ChangedState:
        """Every stage's changed state rows: ``_state``'s columns but the checkpoint id, or
        the files the tasks wrote of them."""
        if self.state_files is not None:
            if self.state_files.checkpoint_id is None or self.state:  # see writes_state_files
                raise RuntimeError("a batch's changed state is both in files and in rows")
            return WrittenState(self.state_files.checkpoint_id, tuple(self.written))
        columns = StructType([f for f in STATE_SCHEMA if f.name != "checkpoint_id"])
        return SparkStateRows(reduce(DataFrame.unionByName, self.state,
                                     spark.createDataFrame([], columns)))

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame``, persisted until :meth:`release` (it is read more than once)."""
        self.persisted.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return self.persisted[-1]

    def release(self) -> None:
        for frame in self.persisted:
            frame.unpersist()


# -- the driver's side ----------------------------------------------------------------------------
def run_stages(spark: SparkSession, layout: PipelineLayout, as_of: int | None, rows: DataFrame,
               spec: Callable[[Stage], TaskSpec], stages: list[Stage]) -> StageOutput:
    """Run ``stages`` over ``rows`` (with ``__order``) on executors; see the module docstring."""
    output = StageOutput(rows)
    for number, stage in enumerate(stages):
        task = spec(stage)
        clock = StateStore.of_rows(stored_values(spark, layout, stage.names, as_of, _one_key(
            spark, CLOCK)).toPandas()) if stage.clocked else None
        if clock is not None:
            task = _measure_stream_time(output, task, clock)
        timers = _timers_of(stage)
        due = None
        if timers is not None:
            task, due = _before_timers(spark, layout, as_of, task, timers)
        inputs = output.rows
        results = output.keep(_stage_frame(spark, layout, as_of, output, task, due))
        try:
            summary = results.where(F.col("kind").isin("done", "error", "file", "sink")).collect()
        except Exception as exc:  # the tasks failed outside the operators' own code
            output.release()
            raise OperatorFailure(_task_failure(task, exc), _operators(stage)) from None
        errors = [row for row in summary if row["kind"] == "error"]
        if errors:
            output.release()
            raise OperatorFailure(errors[0]["message"], errors[0]["operator"] or _operators(stage),
                                  errors[0]["value"])
        done = [row for row in summary if row["kind"] == "done"]
        if number == 0:
            output.rows_in = sum(row["rows_in"] for row in done)
        output.rows_out = sum(row["rows_out"] for row in done)
        output.keys = max(output.keys, sum(row["keys"] for row in done))
        output.rows = _decoded(spark, results, [row["payload"] for row in done if row["payload"]])
        output.sink_files = _sink_files(task, summary)
        if task.writes_state:
            output.state_files = task.state_files
            output.written += [row["value"] for row in summary if row["kind"] == "file"]
        else:
            output.state.append(results.where(F.col("kind") == "state")
                                .select("operator", "key", "value", "deleted", "key_group"))
        if clock is not None:
            late = sum(row["late"] or 0 for row in done)
            output.state.append(_ticked(spark, task, clock, late))
        if timers is not None:
            _after_timers(spark, layout, as_of, task, timers, inputs, output)
    return output


def _operators(stage: Stage) -> str:
    """The names of ``stage``'s operators, for a failure of the stage as a whole."""
    return ", ".join(op.name for op in stage.operators)


def _sink_files(task: TaskSpec, summary: list[Any]) -> dict[str, list[str]]:
    """Per sink of ``task.sink_files``, the files its tasks wrote, when every task with rows
    wrote one (a task whose rows the table would not take as they are wrote none, and then the
    sink writes the batch's rows itself)."""
    written: dict[str, list[str]] = {target.sink: [] for target in task.sink_files}
    for row in summary:
        if row["kind"] == "sink" and row["operator"] in written:
            if row["value"] is None:
                del written[row["operator"]]
            else:
                written[row["operator"]].append(row["value"])
    return written


def writes_state_files(stages: list[Stage]) -> bool:
    """Whether the tasks of ``stages`` may write their changed state as ``_state`` files
    themselves (see StateFiles): when every state row the batch changes is a task's (a clocked
    stage's clock and a timed map's watermark are rows the driver makes, and a timed map's
    next deadline is read from its changed rows)."""
    return not any(stage.clocked or _timers_of(stage) is not None for stage in stages)


def _timers_of(stage: Stage) -> TimerDeclaration | None:
    """The timers and TTL of a keyed stage's operator, if it has any."""
    if not stage.keys or not stage.operators:
        return None
    return stage.operators[0].declares().clock


def _before_timers(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                   task: TaskSpec, timers: TimerDeclaration) -> tuple[TaskSpec, DataFrame]:
    """The watermark at the batch's start (event time), handed to the tasks, and the keys
    whose deadlines are due, whose state joins the stage's."""
    if timers.event_time is None:
        return task, timed.due_keys(spark, layout, as_of, timers, task.batch_time)
    watermark = timed.watermark_before(spark, layout, as_of, timers)
    task = replace(task, watermarks={**task.watermarks, timers.operator: watermark})
    return task, timed.due_keys(spark, layout, as_of, timers, watermark)


def _after_timers(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
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


def _one_key(spark: SparkSession, key: Any) -> DataFrame:
    return spark.createDataFrame([(encode_key(key),)], "key string")


def _measure_stream_time(output: StageOutput, task: TaskSpec, clock: StateStore) -> TaskSpec:
    """Stamp every row with the stream time before it (across all keys, in input order) and
    return ``task`` with the stream time after the batch (see the module docstring)."""
    operator = task.stage.operators[0]
    assert isinstance(operator, EventTimeAggregate)
    _, held = operator.clock(BatchScope(task.pipeline, task.batch_id, (), clock))
    ranged = output.keep(output.rows.repartitionByRange(task.buckets, F.col(ORDER_COLUMN))
                         .sortWithinPartitions(ORDER_COLUMN)
                         .withColumn(PART_COLUMN, F.spark_partition_id()))
    latest: dict[int, int] = {}
    progress: int | None = None
    for part, time, reached in ranged.mapInPandas(lambda chunks: _latest_times(chunks, operator),
                                                  "part int, latest long, reached long").collect():
        latest[part] = max(latest.get(part, NO_TIME), time)
        progress = progress if reached is None else max(progress or NO_TIME, reached)
    starts, running = {}, NO_TIME if held["time"] is None else held["time"]
    for part in sorted(latest):
        starts[part], running = running, max(running, latest[part])
    schema = StructType([*output.rows.schema.fields, StructField(STREAM_TIME_COLUMN, LongType())])
    output.rows = ranged.mapInPandas(lambda chunks: _stamped(chunks, operator, starts), schema)
    after = None if running == NO_TIME else running
    if progress is not None:  # the operator's progress column (see EventTimeAggregate)
        after = progress if after is None else max(after, progress)
    return replace(task, stream_time={operator.name: after})


def _ticked(spark: SparkSession, task: TaskSpec, clock: StateStore, late: int) -> DataFrame:
    """The operator's clock after the batch, as a changed state row."""
    operator = task.stage.operators[0]
    assert isinstance(operator, EventTimeAggregate)
    scope = BatchScope(task.pipeline, task.batch_id, (), clock)
    store, held = operator.clock(scope)
    operator.tick(scope, store, held, task.stream_time[operator.name], late)
    rows = store.changed_rows()
    rows["key_group"] = key_groups(rows["key"], task.key_groups)
    columns = StructType([f for f in STATE_SCHEMA if f.name != "checkpoint_id"])
    return spark.createDataFrame(rows[columns.names], columns)


def _stage_frame(spark: SparkSession, layout: PipelineLayout, as_of: int | None,
                 output: StageOutput, task: TaskSpec, due: DataFrame | None = None) -> DataFrame:
    """The stage's tasks over the rows in ``output`` (and, for a timed map, the ``due`` keys:
    encoded keys whose timers or TTL fire, with or without rows)."""
    stage, rows = task.stage, output.rows
    if stage.keys == ():
        return rows.mapInPandas(lambda chunks: _narrow_task(task, chunks), STAGE_SCHEMA)
    if stage.keys is None:  # one group with all of the operator's state
        rows = rows.withColumn(BUCKET_COLUMN, F.lit(_WHOLE_STREAM))
        present = spark.createDataFrame([("", "", None)], "operator string, key string, value string")
        state = (stored_values(spark, layout, stage.names, as_of).unionByName(present)
                 .withColumn(BUCKET_COLUMN, F.lit(_WHOLE_STREAM)))
    else:
        if task.state_files is not None and due is None and not stage.clocked:
            # each task reads its groups' state itself: one shuffle, of the rows only
            rows = _tagged(rows, task).repartition(task.buckets, BUCKET_COLUMN)  # see partition_tags
            return rows.groupBy(BUCKET_COLUMN).applyInPandas(
                lambda part: _reading_task(task, part), STAGE_SCHEMA)
        # kept: the keys feed both the state read and the cogroup
        rows = output.keep(_tagged(rows, task))
        if stage.clocked:  # every open window (or session): each bucket closes its own
            stored = stored_values(spark, layout, stage.names, as_of).where(
                F.col("key") != encode_key(CLOCK))
            state = stored.mapInPandas(
                lambda chunks: _owned(chunks, task),
                StructType([*stored.schema.fields, StructField(BUCKET_COLUMN, IntegerType())]))
        else:
            batch_keys = rows.select(F.col(KEY_COLUMN).alias("key")).distinct()
            if due is not None:
                batch_keys = batch_keys.unionByName(due).distinct()
            groups = key_group_column(F.col("key"), task.key_groups)
            state = (stored_values(spark, layout, stage.names, as_of, batch_keys)
                     .withColumn(BUCKET_COLUMN, task.bucket(groups)))
    # repartitioned by hand: see partition_tags
    rows, state = (frame.repartition(task.buckets, BUCKET_COLUMN) for frame in (rows, state))
    return (rows.groupBy(BUCKET_COLUMN).cogroup(state.groupBy(BUCKET_COLUMN))
            .applyInPandas(lambda group, part, held: _bucket_task(task, group, part, held),
                           STAGE_SCHEMA))


def _tagged(rows: DataFrame, task: TaskSpec) -> DataFrame:
    """``rows`` with their encoded key and its bucket (see :func:`_with_buckets`): computed by
    Spark for one integer key column that the operator keys its state by (an int's encoding is
    its digits, and Spark's CRC-32 is Python's), by Python otherwise."""
    plain = _plain_key(task)
    if (plain is not None and plain in rows.columns
            and isinstance(rows.schema[plain].dataType, (IntegerType, LongType))):
        encoded = F.coalesce(F.col(plain).cast("string"), F.lit(encode_key(None)))
        bucket = task.bucket(key_group_column(encoded, task.key_groups)).cast("int")
        return rows.withColumn(KEY_COLUMN, encoded).withColumn(BUCKET_COLUMN, bucket)
    schema = StructType([*rows.schema.fields, StructField(KEY_COLUMN, StringType()),
                         StructField(BUCKET_COLUMN, IntegerType())])
    return rows.mapInPandas(lambda chunks: _with_buckets(chunks, task), schema)


def _decoded(spark: SparkSession, results: DataFrame, schemas: list[bytes]) -> DataFrame:
    """The output rows of a stage, decoded from their Arrow cells on executors."""
    if not schemas:
        return spark.createDataFrame([], StructType([StructField(ORDER_COLUMN, LongType())]))
    unified = _spark_ready(pa.unify_schemas([pa.ipc.read_schema(pa.py_buffer(s)) for s in schemas],
                                            promote_options="permissive"))
    return (results.where(F.col("kind") == "rows").select("payload")
            .mapInArrow(lambda batches: _decode_cells(batches, unified), from_arrow_schema(unified)))


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


# -- the executors' side --------------------------------------------------------------------------
def _decode_cells(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for cell in batch.column(0).to_pylist():
            table = pa.ipc.open_stream(cell).read_all()
            columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
                       else pa.nulls(len(table), f.type) for f in schema]
            yield from pa.Table.from_arrays(columns, schema=schema).to_batches()


def _with_buckets(chunks: Iterator[pd.DataFrame], task: TaskSpec) -> Iterator[pd.DataFrame]:
    """Rows tagged with their encoded key (as the stage's operator keys its state) and the
    bucket of its key group."""
    operator, keys, plain = task.stage.operators[0], task.stage.keys or (), _plain_key(task)
    for chunk in chunks:
        if any(k not in chunk.columns for k in keys):  # the operator reports it, by name
            encoded = [encode_key(None)] * len(chunk)
        elif plain is not None and pd.api.types.is_integer_dtype(chunk[plain].dtype):
            encoded = chunk[plain].astype(str).tolist()  # an int's encoding is its digits
        else:
            encoded = [encode_key(operator.state_key(tuple(to_python(v) for v in row)))
                       for row in chunk[list(keys)].itertuples(index=False)]
        groups = key_groups(encoded, task.key_groups).astype("int64")
        yield chunk.assign(**{KEY_COLUMN: encoded, BUCKET_COLUMN: task.bucket(groups).astype("int32")})


def _plain_key(task: TaskSpec) -> str | None:
    """The keyed stage's one key column when its operator keys state by the column's plain
    value (so an integer key's encoding is its digits); ``None`` otherwise."""
    operator, keys = task.stage.operators[0], task.stage.keys or ()
    return keys[0] if len(keys) == 1 and type(operator).state_key is Operator.state_key else None


def _owned(chunks: Iterator[pd.DataFrame], task: TaskSpec) -> Iterator[pd.DataFrame]:
    """Stored state rows tagged with the bucket of the keys that own them."""
    for chunk in chunks:
        yield chunk.assign(**{BUCKET_COLUMN: task.owning_bucket(chunk["key"]).astype("int32")})


def _latest_times(chunks: Iterator[pd.DataFrame], operator: EventTimeAggregate
                  ) -> Iterator[pd.DataFrame]:
    """Per chunk of a range partition: its number, its largest event time and the stream time
    its progress column says was reached (``None`` without one)."""
    for chunk in chunks:
        if len(chunk):
            yield pd.DataFrame({"part": [int(chunk[PART_COLUMN].iloc[0])],
                                "latest": [int(operator.event_ms(chunk).max())],
                                "reached": pd.array([operator.progressed(chunk, None)],
                                                    dtype="Int64")})


def _stamped(chunks: Iterator[pd.DataFrame], operator: EventTimeAggregate,
             starts: dict[int, int]) -> Iterator[pd.DataFrame]:
    """A range partition's rows (in input order), each with the stream time before it."""
    running: int | None = None
    for chunk in chunks:
        if not len(chunk):
            continue
        if running is None:  # a partition's first chunk: what every earlier partition saw
            running = starts[int(chunk[PART_COLUMN].iloc[0])]
        before, after = running_max_before(operator.event_ms(chunk), running)
        running = NO_TIME if after is None else after
        yield chunk.drop(columns=[PART_COLUMN]).assign(**{STREAM_TIME_COLUMN: before})


def _narrow_task(task: TaskSpec, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for chunk in chunks:
        yield _run(task, chunk, StateStore.of_rows(_no_state()), bucket=None)


def _bucket_task(task: TaskSpec, bucket: tuple, rows: pd.DataFrame,
                 held: pd.DataFrame) -> pd.DataFrame:
    held = held[held["operator"] != ""]  # the marker that makes a whole-stream bucket run
    return _run(task, rows, StateStore.of_rows(held), bucket=int(bucket[0]))


def _reading_task(task: TaskSpec, rows: pd.DataFrame) -> pd.DataFrame:
    """A bucket's rows through the stage's operators, their state read from ``_state``'s
    files of the bucket's key groups."""
    files = task.state_files
    assert files is not None
    bucket = int(rows[BUCKET_COLUMN].iloc[0])
    delta_io.adopt_storage_environment(files.storage)
    store = StateStore.of_files(files.path, files.as_of, task.key_groups, task.groups_of(bucket))
    return _run(task, rows, store, bucket=bucket)


def _run(task: TaskSpec, rows: pd.DataFrame, store: StateStore, bucket: int | None) -> pd.DataFrame:
    """Run the stage's operators on one bucket's rows; its result rows (see STAGE_SCHEMA)."""
    rows = rows.sort_values(ORDER_COLUMN, kind="stable")
    frame = rows.drop(columns=[c for c in (ORDER_COLUMN, KEY_COLUMN, BUCKET_COLUMN) if c in rows])
    frame.index = pd.Index(rows[ORDER_COLUMN].to_numpy(), name=None)
    keys = distinct_keys(frame, task.stage.keys or task.stage.operators[0].declares().keys
                         if task.stage.operators else ())
    scope = BatchScope(task.pipeline, task.batch_id, task.key_fields, store, task.inputs,
                       stream_time=task.stream_time, watermarks=task.watermarks,
                       batch_time=task.batch_time, operators=task.operators)
    running: tuple[str, pd.DataFrame] | None = None  # the operator and the rows it was given
    try:
        for op in task.stage.operators:
            running = (op.name, frame)
            frame = op.apply(scope, frame)
        running = None
        out = _ordered(frame, rows[ORDER_COLUMN], bucket)
        changed = _changed_state(store, task, bucket)
        if task.writes_state:
            changed = _written(changed, task)
        cells = _cells(out)
        if task.sink_files and not out.empty:
            cells = pd.concat([cells, _sink_written(out, task)], ignore_index=True)
    except Exception as exc:  # reported to the driver, which fails the batch with it
        where = {} if running is None else {"operator": running[0], "value": first_rows(running[1])}
        return _typed(_result("error", message=_message(task, exc), **where))
    done = _result("done", rows_in=len(rows), rows_out=len(out), keys=keys,
                   late=scope.counts.get(LATE_COUNT, 0),
                   payload=pa.Schema.from_pandas(out, preserve_index=False).serialize().to_pybytes()
                   if len(out.columns) else None)
    return _typed(pd.concat([cells, changed, done], ignore_index=True))


def _ordered(out: pd.DataFrame, ordinals: pd.Series, bucket: int | None) -> pd.DataFrame:
    """``out`` with ``__order``: its rows' source ordinals when it kept them (a map, a filter),
    else new ones after all source rows, by bucket and position."""
    out = out if out is not None else pd.DataFrame()
    if _kept_ordinals(out.index, ordinals):
        order = out.index.to_numpy(dtype="int64")
    else:
        base = _NEW_ROWS + (bucket or 0) * _BUCKET_SPAN
        order = np.arange(base, base + len(out), dtype="int64")
    out = out.reset_index(drop=True)  # a new frame: the operator's own is left as it was
    out[ORDER_COLUMN] = order
    return out


def _kept_ordinals(index: pd.Index, ordinals: pd.Series) -> bool:
    """Whether ``index`` is distinct source ordinals of ``ordinals``: every row
    (the common case, compared at once), or some of them, each once."""
    if not pd.api.types.is_integer_dtype(index.dtype):
        return False
    if not index.is_unique:  # a narrow stage's new rows, numbered chunk by chunk, may repeat
        return False
    if len(index) == len(ordinals) and np.array_equal(index.to_numpy(), ordinals.to_numpy()):
        return True
    return bool(index.isin(ordinals.to_numpy()).all())


def _changed_state(store: StateStore, task: TaskSpec, bucket: int | None) -> pd.DataFrame:
    rows = store.changed_rows()
    if rows.empty:
        return rows
    groups = key_groups(rows["key"], task.key_groups)
    if task.stage.keys and bucket is not None:
        elsewhere = task.owning_bucket(rows["key"], groups) != bucket
        if elsewhere.any():  # a key encoded unlike its rows: its state would be lost next batch
            raise RuntimeError(f"state keys {rows['key'][elsewhere].head(3).tolist()} do not "
                               f"belong to bucket {bucket}, whose rows changed them")
    return rows.assign(kind="state", key_group=groups)


def _written(changed: pd.DataFrame, task: TaskSpec) -> pd.DataFrame:
    """``changed`` state rows written as ``_state`` files (uncommitted: see StateFiles), as
    result rows naming them."""
    files = task.state_files
    if files is None or files.checkpoint_id is None or changed.empty:
        return changed.iloc[0:0]
    delta_io.adopt_storage_environment(files.storage)
    actions = write_state_files(files.path, changed, files.checkpoint_id)
    return pd.DataFrame({"kind": "file", "value": actions})


def _sink_written(out: pd.DataFrame, task: TaskSpec) -> pd.DataFrame:
    """``out`` written as a data file of each of ``task.sink_files``, as result rows naming
    them (a ``None`` action: the table does not take the rows as they are)."""
    rows = out.rename(columns={ORDER_COLUMN: ROW_COLUMN}).assign(**{BATCH_COLUMN: task.batch_id})
    return pd.DataFrame({"kind": "sink", "operator": [target.sink for target in task.sink_files],
                         "value": [target.write(rows) for target in task.sink_files]})


def _cells(out: pd.DataFrame) -> pd.DataFrame:
    payloads = []
    for start in range(0, len(out), _CHUNK_ROWS):
        table = pa.Table.from_pandas(out.iloc[start:start + _CHUNK_ROWS], preserve_index=False)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        payloads.append(sink.getvalue().to_pybytes())
    return pd.DataFrame({"kind": "rows", "payload": payloads})


_PANDAS_TYPES = {"long": "Int64", "int": "Int32", "boolean": "boolean"}


def _typed(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with every column of STAGE_SCHEMA, typed so that Arrow takes missing values
    as nulls (a column of NaN would not become binary or text)."""
    results = results.reindex(columns=STAGE_SCHEMA.names)
    for spark_field in STAGE_SCHEMA:
        column = results[spark_field.name]
        kind = _PANDAS_TYPES.get(spark_field.dataType.simpleString())
        results[spark_field.name] = (column.astype(kind) if kind
                                     else column.astype(object).where(column.notna(), None))
    return results


def _result(kind: str, **values: Any) -> pd.DataFrame:
    return pd.DataFrame([{"kind": kind, **values}])


def _no_state() -> pd.DataFrame:
    return pd.DataFrame({"operator": [], "key": [], "value": []})


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


def _message(task: TaskSpec, exc: BaseException) -> str:
    """The error as the driver reports it: what failed and where, then the Python traceback of
    the user's code (not the JVM's)."""
    where = f"pipeline {task.pipeline!r}, batch {task.batch_id}"
    text = str(exc) if isinstance(exc, OperatorError) else f"{where}: {type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc
    trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    return f"{text}\n\nTraceback on the Spark executor:\n{trace}"
