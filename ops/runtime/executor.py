"""The micro-batch executor: recover, then plan, run, write and checkpoint until drained.

Exactly-once rests on four rules: a batch's slice never changes once planned (plans are recorded
first and reused on replay); operators are deterministic given (slice, state); every sink write is
idempotent by batch id; the checkpoint commit is the only commit point.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state import (
    DEFAULT_KEY_GROUPS,
    BatchPlan,
    BatchPlans,
    Checkpoint,
    CheckpointLog,
    ConfigError,
    HookContext,
    PipelineChangedError,
    StateStore,
    TransactionWarmer,
    delta_io,
    fault_point,
    migrate_state,
    new_checkpoint,
    next_checkpoint_id,
    restore_all,
    save_all,
    tables,
    takes_state_files,
    warming,
)
from state.faults import InjectedCrash
from state.migration import dropped

from ..clock import SYSTEM_CLOCK, Clock
from ..columns import ORDER_COLUMN, ROW_COLUMN
from ..context import BatchScope, RunContext
from ..operators import StateKind
from ..operators.timing import wake_at
from ..sinks import FileSink
from ..sources import FrameSlice, Slice
from ..spark.heartbeat import Heartbeat
from .continuous import Continuous
from .dead_letters import write_dead_letters
from .distributed import Stage, StateFiles, TaskSpec, run_stages, stages_of, writes_state_files
from .failures import OperatorFailure, failed
from .meaning import Remedy, describe, differences, refusal
from .metrics import RunMetrics
from .modes import AUTO_DISTRIBUTED_ROWS
from .reports import BatchReport, CheckpointReport, RunReport, distinct_keys

if TYPE_CHECKING:
    from .protocol import RunnablePipeline

log = logging.getLogger(__name__)

_PLAN_AHEAD = 32  # most batches planned (and recorded) in one commit


@dataclass(frozen=True)
class _Output:
    """A batch computed but not yet written."""

    report: BatchReport  # seconds set once written
    started: float
    frame: pd.DataFrame
    rejected: pd.DataFrame
    source: str
    encoded: Future  # the state the batch changed, encoded (sinks wait: a bad value writes nothing)


@dataclass(frozen=True)
class _Pending:
    """A checkpoint taken in memory (hooks called, record built), its rows being encoded."""

    checkpoint: Checkpoint
    rows: Future


class _Run:
    """One run of one pipeline; the public entry point is :func:`run_pipeline`.

    Write-behind: a batch's writes run in two writer threads while the main thread plans, reads
    and computes the next batch, so Spark writes while pandas computes. The sink lane writes
    each batch's dead letters and sinks, batch after batch; the commit lane commits each
    checkpoint once the sinks of the batches it covers are written. So durable effects keep the
    protocol's order (a checkpoint never covers a batch whose output is not written), while a
    batch's sinks may be written as the checkpoint before it commits: a crash then replays that
    batch, whose idempotent writes add nothing. The next batch's operators wait only for the
    pending checkpoint's state rows to be encoded (they change state) and, when the pipeline
    has lifecycle hooks, for that checkpoint to commit: hooks see ``on_post_checkpoint`` before
    the next batch's operators run.
    """

    def __init__(self, pipeline: RunnablePipeline, spark: SparkSession, warehouse: str | None,
                 warmer: TransactionWarmer, report: RunReport,
                 progress: Callable[[BatchReport], None] | None,
                 checkpointed: Callable[[CheckpointReport], None] | None = None,
                 continuous: Continuous | None = None, clock: Clock = SYSTEM_CLOCK,
                 allow_dropped_state: bool = False, metrics: RunMetrics | None = None):
        self.pipeline = pipeline
        self.metrics = metrics
        if metrics is not None:
            metrics.forget_state_keys(pipeline.id)  # what an earlier run held is not this run's
        self.meaning = describe(pipeline.stream.operators)  # recorded with each checkpoint
        self.allow_dropped_state = allow_dropped_state
        self.clock = clock  # processing time: a batch's time, and whether a timer is due
        self.warmer = warmer
        self.report = report
        self.progress = progress
        self.checkpointed = checkpointed
        self.continuous = continuous
        self.beat = Heartbeat(log)
        self.spark = spark
        self.layout = pipeline.layout(warehouse)
        self.checkpoints = CheckpointLog(spark, self.layout)
        self.plans = BatchPlans(spark, self.layout)
        self.hooks = pipeline.all_hooks()
        self.hook_ctx = HookContext(spark, self.layout, uuid.uuid4().hex, self.checkpoints)
        self.last: Checkpoint | None = None
        self.encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-encode")
        # Two lanes, so a batch's sinks are written while the checkpoint before it commits
        self.sink_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-sinks")
        self.commit_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-commit")
        # Reads the next planned batch while this one's operators run; the source's only user
        # meanwhile (a source is read one slice at a time, and plans are made between batches)
        self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-read")
        self.ahead: tuple[BatchPlan, Future] | None = None  # the next batch's read under way
        self.encoding: Future | None = None  # the pending checkpoint's state rows
        self.batch_encoding: Future | None = None  # the last batch's changed state
        self.written: deque[tuple[Future, _Output]] = deque()  # sink writes not yet reported
        self.committing: tuple[Future, _Pending] | None = None
        self.clocks = [d.clock for op in pipeline.stream.operators if (d := op.declares()).clock]
        self.woken = False  # a batch with no input ran for timers in this run
        self.distributed = False
        self.batch_time = 0  # the last batch's processing time (epoch ms)

    def call_hooks(self, method: str, *args: Any) -> dict[str, Any]:
        """Call ``method`` on every hook, in order; return their results by marker key."""
        results = {key: getattr(hook, method)(self.hook_ctx, *args) for key, hook in self.hooks}
        fault_point(f"hook_{method}")
        return results

    # 1. recover -------------------------------------------------------------------------------
    def recover(self) -> None:
        """Read the last checkpoint; restore tracked variables; let hooks truncate global state.

        A pipeline's own tables are created by their first commit, not here: the state table by
        the first checkpoint, the plans table by the first plan, dead letters by the first
        rejected record. Creating them empty first cost a fresh pipeline a second or two (an
        empty commit each, then a full reading of each new snapshot before its first
        idempotent append)."""
        self.beat.doing(f"{self.pipeline.name}: recovering its last checkpoint")
        tables.clear_staging(self.layout.staging)
        self.last = self.checkpoints.latest()
        if self.last:
            self.check_key_groups(self.last)
            self.last = self.check_meaning(self.last)
        epoch = self.last.epoch if self.last else 0
        self.ctx = RunContext(self.spark, self.layout, epoch, run_id=self.hook_ctx.run_id)
        self.pipeline.source.setup(self.ctx)
        if self.last and self.last.reset_to_batch is not None:
            self.last = self.finish_reset(self.last, self.last.reset_to_batch)
        self.store = StateStore(self.spark, self.layout, self.last.checkpoint_id if self.last else None,
                                key_groups=self.last.key_groups if self.last else DEFAULT_KEY_GROUPS)
        self.batch_id = self.last.batch_id if self.last else 0
        self.offsets: dict[str, Any] = dict(self.last.offsets) if self.last else {}
        self.pending_plans = self.plans.after(self.batch_id, epoch)
        self.replaying = bool(self.pending_plans)  # plans left by a run that died: a replay
        restore_all(self.pipeline.tracked, self.last.tracked if self.last else {})
        self.hook_ctx.checkpoint_id = self.last.checkpoint_id if self.last else None
        self.hook_ctx.batch_id = self.batch_id
        markers = self.last.markers if self.last else {}
        for key, hook in self.hooks:
            hook.on_recover(self.hook_ctx, markers.get(key))
        fault_point("hook_on_recover")
        if self.last:
            self.warmer.note(self.layout.state)  # the next checkpoint commit is near
            log.info("%s: recovered checkpoint %d (batch %d); %d planned batch(es) to replay",
                     self.pipeline.name, self.last.checkpoint_id, self.last.batch_id,
                     len(self.pending_plans))

    def check_key_groups(self, last: Checkpoint) -> None:
        """The pipeline must hash keys into the key groups its first checkpoint fixed."""
        if last.key_groups != self.pipeline.key_groups:
            raise ConfigError(
                f"pipeline {self.pipeline.name!r} was created with {last.key_groups} key groups "
                f"and is now defined with {self.pipeline.key_groups}; the number is fixed at "
                f"creation (keys would change groups): use .with_key_groups({last.key_groups})")

    def check_meaning(self, last: Checkpoint) -> Checkpoint:
        """The pipeline must read its state as ``last`` recorded it (:mod:`.meaning`): a
        difference that would misread or leave state behind stops the run, listing each and the
        ways forward; others are logged. With ``allow_dropped_state``, state no operator keeps
        now is dropped first, by a migration (a new checkpoint, returned)."""
        if last.operators is None:
            log.info("%s: checkpoint %d was written before checkpoints recorded what their state "
                     "means; the next checkpoint records it", self.pipeline.name, last.checkpoint_id)
            return last
        tracked = [variable.name for variable in self.pipeline.tracked]
        found = differences(last.operators, self.meaning, last.tracked, tracked)
        for difference in found:
            if not difference.blocking:
                log.info("%s: state %r: %s", self.pipeline.name, difference.name, difference.what)
        blocking = [d for d in found if d.blocking]
        if not blocking:
            return last
        if not (self.allow_dropped_state
                and all(d.remedy is Remedy.DROP_OR_RENAME for d in blocking)):
            raise PipelineChangedError(refusal(self.pipeline.id, last.checkpoint_id, found))
        return self.drop_left_behind(last, tracked)

    def drop_left_behind(self, last: Checkpoint, tracked: list[str]) -> Checkpoint:
        """Drop the state of ``last`` that no operator (or tracked variable) of the pipeline
        keeps now, as a migration; return its checkpoint."""
        assert last.operators is not None
        names = sorted(set(last.operators) - set(self.meaning))
        migrated = migrate_state(
            self.spark, self.layout, dropped(names), operators=self.meaning,
            tracked={name: value for name, value in last.tracked.items() if name in tracked},
            label=f"allow_dropped_state: dropped {', '.join(names) or 'tracked variables'}",
            run_id=self.hook_ctx.run_id)
        log.warning("%s: allow_dropped_state: dropped the state no operator keeps now (%s; "
                    "%d key(s)) as checkpoint %d; reset_to_checkpoint(%d) brings it back",
                    self.pipeline.name, ", ".join(names + sorted(set(last.tracked) - set(tracked))),
                    sum(migrated.deleted.values()), migrated.checkpoint.checkpoint_id,
                    last.checkpoint_id)
        return migrated.checkpoint

    def finish_reset(self, reset: Checkpoint, after: int) -> Checkpoint:
        """After a reset to an older checkpoint (``reset``, back to batch ``after``): remove what
        the abandoned batches wrote to sinks and dead letters, then commit a plain copy of the
        reset checkpoint to say it is done, and return it. Until then no batch runs, so every
        row past the reset point is the abandoned timeline's and the cleanup can safely be
        redone after a crash."""
        for sink in self.pipeline.sinks:
            sink.discard_after(self.ctx, after)
        tables.delete_where(self.spark, self.layout.dead_letters, F.col("batch_id") > after)
        fault_point("reset_cleanup")
        done = dataclasses.replace(reset, checkpoint_id=reset.checkpoint_id + 1,
                                   reset_to_batch=None, resumed_from=None, run_id=self.ctx.run_id,
                                   created_at=time.time())
        self.checkpoints.commit(done, pd.DataFrame())
        log.info("%s: reset to batch %d finished; sinks hold no later batch", self.pipeline.name,
                 after)
        return done

    # 2. plan ----------------------------------------------------------------------------------
    def plan_next(self, budget: int) -> tuple[BatchPlan, bool] | None:
        """The recorded plan of the next batch (a replay), else a new one; None when drained.

        New plans are made up to ``budget`` batches ahead and recorded in one commit, so a run
        that drains a backlog pays for one plan commit, not one per batch.
        """
        batch_id = self.batch_id + 1
        if batch_id in self.pending_plans:
            return self.pending_plans.pop(batch_id), self.replaying
        self.replaying = False
        self.beat.doing(f"{self.pipeline.name}: planning batch {batch_id}")
        source = self.pipeline.source
        slices: list[tuple[Any, Any] | None] = list(source.plan(
            self.ctx, self.offsets.get(source.name), limit=max(1, min(budget, _PLAN_AHEAD))))
        self.measure_lag()
        if not slices and self.timers_due():
            slices, self.woken = [None], True  # one batch with no input, for its timers
        if not slices:
            return None
        pinned = {}
        for operator in self.pipeline.stream.operators:
            pinned.update(operator.plan_inputs(self.spark))
        now = self.clock.now()
        plans = [BatchPlan(batch_id + n, {**({source.name: bounds} if bounds else {}), **pinned},
                           planned_at=now) for n, bounds in enumerate(slices)]
        self.pending_plans = self.plans.record(plans, self.ctx.epoch, self.ctx.run_id)
        fault_point("after_plan")
        return self.pending_plans.pop(batch_id), False

    def measure_lag(self) -> None:
        """Report the source's lag to the run's metrics, when due: only between batches'
        reads (the source then has no other user), at most every ``lag_every_seconds``, and
        never where asking runs a Spark job. Metrics never stop a run: a failed ask is logged."""
        source = self.pipeline.source
        if (self.metrics is None or source.lag_needs_spark
                or not self.metrics.take_lag_turn(self.pipeline.id)):
            return
        try:
            self.metrics.source_lag(self.pipeline.id, source.name,
                                    source.lag_by_part(self.ctx, self.offsets.get(source.name)))
        except Exception:  # the source's own error reaches the run when it reads
            log.warning("%s: asking the source's lag for the metrics failed", self.pipeline.name,
                        exc_info=True)

    def timers_due(self) -> bool:
        """Whether a timer or a TTL is due now, with no batch for it yet in this run (one
        batch with no input per run fires them: a function that always sets a timer already
        due cannot keep a run going)."""
        if self.woken or not self.clocks:
            return False
        now = int(self.clock.now() * 1000)
        wake = self.wake_at(now) if not self.distributed else (
            self.last.wake_at if self.last else None)
        return wake is not None and wake <= now

    def wake_at(self, batch_time: int) -> int | None:
        """Driver mode: when a batch with no input would next fire a timer (see
        :func:`ops.operators.timing.wake_at`), over every operator with timers."""
        times = [wake_at(clock, self.store, batch_time) for clock in self.clocks]
        return min((t for t in times if t is not None), default=None)

    def read(self, plan: BatchPlan) -> Slice:
        """The batch's input: read ahead while the batch before it ran, else read now."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead[0] == plan:
            return ahead[1].result()
        return self.read_now(plan)

    def read_next(self, batch_id: int) -> None:
        """Start reading the batch planned after ``batch_id``, if one is, so that its input is
        ready when it runs: reading (files, Arrow, the network) mostly waits, and a batch's
        operators mostly compute."""
        plan = self.pending_plans.get(batch_id + 1)
        if plan is not None:
            self.ahead = plan, self.reader.submit(self.read_now, plan)

    def read_now(self, plan: BatchPlan) -> Slice:
        """The batch's input: its planned slice, or no rows (a batch for timers)."""
        source = self.pipeline.source
        if source.name not in plan.ranges:
            return Slice(source.schema.frame([], []), Slice.no_rejects())
        return source.read(self.ctx, *plan.ranges[source.name])

    def scope(self, plan: BatchPlan) -> BatchScope:
        """What the operators see of batch ``plan`` on the driver."""
        return BatchScope(self.pipeline.id, plan.batch_id, self.pipeline.source.schema.key_fields,
                          self.store, plan.ranges, batch_time=plan.time_ms,
                          operators=self.pipeline.stateful_operators)

    # 3. run operators ------------------------------------------------------------------------
    def run_batch(self, plan: BatchPlan, replayed: bool, read_ahead: bool = True) -> _Output:
        """Read the batch's slice and run the operators on it; nothing is written yet. With
        ``read_ahead``, the next planned batch is read meanwhile."""
        started = time.perf_counter()
        self.beat.doing(f"{self.pipeline.name}: running batch {plan.batch_id}")
        self.warmer.warm()  # the tables this batch appends to, while it reads and computes
        source = self.pipeline.source
        sliced = self.read(plan)
        if read_ahead:
            self.read_next(plan.batch_id)
        self.take_encoded()
        if self.hooks:
            self.finish_checkpoint()
        frame = sliced.good
        scope = self.scope(plan)
        self.batch_time = plan.time_ms
        keys: dict[tuple[str, ...], int] = {}  # distinct keys per keying, over keyed operators
        with _collector_paused():
            for operator in self.pipeline.stream.operators:
                declared = operator.declares()
                if declared.kind is StateKind.KEYED and declared.keys not in keys:
                    keys[declared.keys] = distinct_keys(frame, declared.keys)
                try:
                    frame = operator.apply(scope, frame)
                except Exception as error:  # the second time, it says how to get past it
                    failed(self.ctx, plan.batch_id, operator.name, frame, error)
        self.batch_id = self.hook_ctx.batch_id = plan.batch_id
        self.offsets.update(plan.end_positions())
        report = BatchReport(plan.batch_id, len(sliced.good) + len(sliced.rejected), len(frame),
                             len(sliced.rejected), max(keys.values(), default=0), 0.0, replayed,
                             behind=len(self.pending_plans))
        # encoded in a thread while the next batch is read; this batch's sinks wait for it
        self.batch_encoding = self.encoder.submit(self.store.encode_changes)
        return _Output(report, started, frame, sliced.rejected, source.name, self.batch_encoding)

    # 3'. distributed mode: operators on executors, sinks and checkpoint right after ------------
    def choose_mode(self) -> str:
        """The pipeline's mode, with ``auto`` settled by the size of the run's first batch."""
        mode = self.pipeline.mode
        if mode == "distributed" or mode == "auto":
            self.check_distributable()
        if mode != "auto":
            return mode
        planned = self.plan_next(1)
        if planned is None:
            return "driver"
        plan = planned[0]
        self.pending_plans[plan.batch_id] = plan  # the loop takes it again
        self.replaying = planned[1]
        source = self.pipeline.source
        rows = source.read_frame(self.ctx, *plan.ranges[source.name]).good.count()
        chosen = "distributed" if rows >= AUTO_DISTRIBUTED_ROWS else "driver"
        log.info("%s: mode auto: first batch has %d rows -> %s (distributed from %d)",
                 self.pipeline.name, rows, chosen, AUTO_DISTRIBUTED_ROWS)
        return chosen

    def check_distributable(self) -> None:
        """Refuse what cannot run on executors, before any batch runs."""
        if self.pipeline.tracked:
            raise ConfigError(
                f"pipeline {self.pipeline.name!r}: tracked variables live in the driver's "
                "process, and distributed mode runs operators on executors; keep such values in "
                "managed state (sp.get/sp.set) or run in driver mode")
        for operator in self.pipeline.stream.operators:
            if operator.needs_spark:
                raise ConfigError(
                    f"pipeline {self.pipeline.name!r}: operator {operator.name!r} reads tables "
                    "through Spark while it runs, which executors cannot: run in driver mode")

    def run_distributed(self, plan: BatchPlan, replayed: bool) -> None:
        """Run one batch on executors, write its sinks and commit its checkpoint (with the
        state its tasks changed): the next batch reads that state from ``_state``."""
        started = time.perf_counter()
        self.beat.doing(f"{self.pipeline.name}: running batch {plan.batch_id} on executors")
        source = self.pipeline.source
        sliced = (source.read_frame(self.ctx, *plan.ranges[source.name])
                  if source.name in plan.ranges else FrameSlice.empty(self.spark, source.schema))

        groups = self.pipeline.key_groups
        buckets = min(groups, int(self.spark.conf.get("spark.sql.shuffle.partitions") or groups))

        as_of = self.last.checkpoint_id if self.last else None
        stages = stages_of(self.pipeline.stream.operators)
        # tasks read their keys' state from _state's files where delta-rs reads the table, and
        # write what they changed as its files where delta-rs appends to it
        files = None
        if as_of is not None and delta_io.serves(self.layout.state):
            writes = writes_state_files(stages) and takes_state_files(self.layout)
            files = StateFiles(self.layout.state, as_of, delta_io.storage_environment(self.layout.state),
                               checkpoint_id=next_checkpoint_id(self.last) if writes else None)

        # the last stage's tasks write the files of the sinks that let them
        targets = {sink.name: (sink, target) for sink in self.pipeline.sinks
                   if isinstance(sink, FileSink) and (target := sink.file_target(self.ctx)) is not None}

        def spec(stage: Stage) -> TaskSpec:
            return TaskSpec(self.pipeline.id, plan.batch_id, source.schema.key_fields,
                            dict(plan.ranges), groups, buckets, stage, batch_time=plan.time_ms,
                            operators=self.pipeline.stateful_operators, state_files=files,
                            sink_files=tuple(target for _, target in targets.values())
                            if stage is stages[-1] else ())

        try:
            output = run_stages(self.spark, self.layout, as_of, sliced.good, spec, stages)
        except OperatorFailure as error:  # the second time, it says how to get past it
            failed(self.ctx, plan.batch_id, error.operator, error.rows, error)
        try:
            write_dead_letters(self.ctx, plan.batch_id, source.name, sliced.rejected)
            rows = output.rows.withColumnRenamed(ORDER_COLUMN, ROW_COLUMN)
            for sink in self.pipeline.sinks:
                if output.rows_out and sink.name in output.sink_files:
                    file_sink, target = targets[sink.name]
                    file_sink.commit_files(self.ctx, target, plan.batch_id,
                                           output.sink_files[sink.name])
                elif output.rows_out:
                    sink.write_frame(self.ctx, plan.batch_id, rows)
                fault_point("after_sink_write")
            self.batch_id = self.hook_ctx.batch_id = plan.batch_id
            self.offsets.update(plan.end_positions())
            checkpoint = new_checkpoint(
                self.last, batch_id=self.batch_id, offsets=dict(self.offsets), tracked={},
                markers=self.call_hooks("on_checkpoint"), run_id=self.ctx.run_id,
                key_groups=self.pipeline.key_groups, wake_at=output.wake_at,
                operators=self.meaning)
            committing = time.perf_counter()
            self.checkpoints.commit_changes(checkpoint, output.changed_state(self.spark))
            self.report.checkpoint_seconds.append(time.perf_counter() - committing)
            if self.metrics is not None:
                self.metrics.checkpoint(self.pipeline.id, checkpoint.checkpoint_id,
                                        self.report.checkpoint_seconds[-1])
        finally:
            output.release()
        self.last = checkpoint
        self.hook_ctx.checkpoint_id = checkpoint.checkpoint_id
        self.call_hooks("on_post_checkpoint", checkpoint.checkpoint_id)
        self.report_batch(BatchReport(
            plan.batch_id, output.rows_in + len(sliced.rejected), output.rows_out,
            len(sliced.rejected), output.keys, time.perf_counter() - started, replayed,
            mode="distributed", behind=len(self.pending_plans)))
        self.report_checkpoint(checkpoint)

    # 4.-5. write sinks, checkpoint (in the writer threads) --------------------------------------
    def write_behind(self, output: _Output) -> None:
        """Start writing ``output``'s sinks, after the previous batch's."""
        self.report_written()  # an earlier batch's failed write stops the run here
        previous = self.written[-1][0] if self.written else None
        self.written.append((self.sink_lane.submit(self.write, output, previous), output))

    def commit_behind(self, pending: _Pending) -> None:
        """Start committing ``pending``, once the sinks of the batches it covers are written."""
        sinks = self.written[-1][0] if self.written else None
        self.committing = self.commit_lane.submit(self.commit, pending, sinks), pending

    def write(self, output: _Output, previous: Future | None) -> float:
        """Sink lane: dead letters and sinks of one batch, once the batch before is written;
        returns when they were done (``time.perf_counter``)."""
        if previous is not None:
            previous.result()  # it failed: so does this batch, and every checkpoint after it
        output.encoded.result()  # state that cannot be stored: nothing of the batch is written
        batch_id = output.report.batch_id
        write_dead_letters(self.ctx, batch_id, output.source, output.rejected)
        for sink in self.pipeline.sinks:
            sink.write(self.ctx, batch_id, output.frame)
            fault_point("after_sink_write")
        self.warmer.warm()  # the next batch appends to the same tables
        return time.perf_counter()

    def commit(self, pending: _Pending, sinks: Future | None) -> float:
        """Commit lane: the checkpoint, once the sinks of the batches it covers are written;
        returns the seconds it took."""
        if sinks is not None:
            sinks.result()
        started = time.perf_counter()
        self.checkpoints.commit(pending.checkpoint, pending.rows.result())
        self.warmer.warm()
        return time.perf_counter() - started

    def finish_checkpoint(self) -> None:
        """Wait for the checkpoint under way (raising its error, or its sinks'), call the
        ``on_post_checkpoint`` hooks, and report the batches written meanwhile."""
        committed = None
        if self.committing is not None:
            (committing, pending), self.committing = self.committing, None
            self.beat.doing(f"{self.pipeline.name}: committing checkpoint "
                            f"{pending.checkpoint.checkpoint_id}")
            self.report.checkpoint_seconds.append(committing.result())
            self.last = committed = pending.checkpoint
            if self.metrics is not None:
                self.metrics.checkpoint(self.pipeline.id, committed.checkpoint_id,
                                        self.report.checkpoint_seconds[-1])
            self.hook_ctx.checkpoint_id = pending.checkpoint.checkpoint_id
            self.call_hooks("on_post_checkpoint", pending.checkpoint.checkpoint_id)
        self.report_written()
        if committed is not None:
            self.report_checkpoint(committed)

    def report_written(self, wait: bool = False) -> None:
        """Report each batch whose sinks are written, in order (all of them with ``wait``);
        raise a failed write's error."""
        while self.written and (wait or self.written[0][0].done()):
            writing, output = self.written.popleft()
            self.report_batch(dataclasses.replace(output.report,
                                                  seconds=writing.result() - output.started))

    def report_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Tell ``checkpointed`` which batches ``checkpoint`` covers; a continuous run then
        forgets them (it keeps counts, not a list that grows for as long as it runs)."""
        covered = self.report.covered_by(checkpoint.checkpoint_id, checkpoint.batch_id,
                                         forget=self.continuous is not None)
        if self.checkpointed is not None:
            self.checkpointed(covered)

    def report_batch(self, batch: BatchReport) -> None:
        self.report.add(batch)
        if self.metrics is not None:
            self.metrics.batch(self.pipeline.id, batch)
            if not self.distributed:  # on executors, state is held by the tasks
                self.metrics.state_keys_held(self.pipeline.id, self.store.keys_held())
        log.info("%s batch %d (%s): %d rows in, %d out, %d keys, %d dead letters, %.0f rows/s%s",
                 self.pipeline.name, batch.batch_id, batch.mode, batch.rows_in, batch.rows_out,
                 batch.keys, batch.dead_letters, batch.rows_per_second,
                 " (replay)" if batch.replayed else "")
        if self.progress:
            self.progress(batch)

    def take_checkpoint(self) -> _Pending:
        """The checkpoint after the last batch run, taken in memory: hooks return markers, the
        record is built, and the changed state rows are encoded in a thread. Call only once
        the previous checkpoint finished (its id comes next)."""
        markers = self.call_hooks("on_checkpoint")
        checkpoint = new_checkpoint(self.last, batch_id=self.batch_id, offsets=dict(self.offsets),
                                    tracked=save_all(self.pipeline.tracked), markers=markers,
                                    run_id=self.ctx.run_id, key_groups=self.pipeline.key_groups,
                                    wake_at=self.wake_at(self.batch_time), operators=self.meaning)
        self.encoding = self.encoder.submit(self.store.take_changes)
        return _Pending(checkpoint, self.encoding)

    def take_encoded(self) -> None:
        """Before operators change state again: the last batch's changes are encoded (raising
        what its state cannot be stored as) and the pending checkpoint has taken its rows, so
        the store counts changes for the next one."""
        batch, self.batch_encoding = self.batch_encoding, None
        if batch is not None:
            batch.result()
        encoding, self.encoding = self.encoding, None
        if encoding is not None:
            encoding.result()

    def settle(self, error: BaseException) -> None:
        """After ``error``: let the writes under way finish (what they make durable is valid),
        and log rather than raise their own errors, which ``error`` supersedes."""
        while self.committing is not None or self.written:
            try:
                self.finish_checkpoint()
                self.report_written(wait=True)
            except (Exception, InjectedCrash) as failure:
                if failure is not error:  # an encoding error reaches both threads
                    log.exception("%s: writes under way failed too", self.pipeline.name)

    def close_sinks(self) -> None:
        """The run is over: each sink releases what it held (after the writer threads were
        told to stop: a write still under way fails, and its batch is replayed)."""
        if not hasattr(self, "ctx"):
            return  # recovery failed before the run's context existed: no sink was used
        for sink in self.pipeline.sinks:
            try:
                sink.close(self.ctx)
            except Exception:
                log.exception("%s: closing sink %s failed", self.pipeline.name, sink.name)

    def call_hooks_quietly(self, method: str, *args: Any) -> None:
        """``on_error``/``on_teardown``: one failing hook must neither stop the others nor hide
        the run's own error, so failures are logged, not raised."""
        for key, hook in self.hooks:
            try:
                getattr(hook, method)(self.hook_ctx, *args)
            except Exception:
                log.exception("%s: %s hook %s failed", self.pipeline.name, method, key)


def run_pipeline(pipeline: RunnablePipeline, spark: SparkSession, *, warehouse: str | None = None,
                 max_batches: int | None = None,
                 progress: Callable[[BatchReport], None] | None = None,
                 checkpointed: Callable[[CheckpointReport], None] | None = None,
                 continuous: Continuous | None = None, clock: Clock = SYSTEM_CLOCK,
                 allow_dropped_state: bool = False, metrics: RunMetrics | None = None) -> RunReport:
    """Run ``pipeline`` until its source is drained (or ``max_batches`` batches ran); with
    ``continuous``, poll for new input every trigger instead, until asked to stop. ``clock``
    gives processing time (a test's :class:`ops.testing.ManualClock`). ``metrics`` hears of
    each batch, checkpoint and, now and then, the source's lag (:mod:`.metrics`).

    A pipeline whose stateful operators no longer mean what its last checkpoint recorded stops
    first with a :class:`state.PipelineChangedError` (see :mod:`.meaning`);
    ``allow_dropped_state=True`` drops the state no operator keeps now instead (Flink's
    ``--allowNonRestoredState``), as a new checkpoint that ``reset_to_checkpoint`` can undo.

    Order: ``on_setup``, recovery (``on_recover``), ``on_start``, batches with checkpoints as the
    pipeline's policy says, a final checkpoint, ``on_finish``; ``on_error`` on failure;
    ``on_teardown`` always. ``progress`` is called with each batch once its writes are durable,
    ``checkpointed`` with each checkpoint once committed.
    """
    started = time.perf_counter()
    report = RunReport(pipeline=pipeline.id)
    with warming(spark) as warmer:
        run = _Run(pipeline, spark, warehouse, warmer, report, progress, checkpointed, continuous,
                   clock, allow_dropped_state, metrics)
        try:
            run.call_hooks("on_setup")
            run.recover()
            run.call_hooks("on_start")
            if run.choose_mode() == "distributed":
                _run_distributed(run, max_batches)
            else:
                _run_batches(run, max_batches)
            run.call_hooks("on_finish")
        except BaseException as error:
            run.settle(error)
            run.call_hooks_quietly("on_error", error)
            raise
        finally:
            run.beat.close()
            run.sink_lane.shutdown(wait=False)
            run.commit_lane.shutdown(wait=False)
            run.encoder.shutdown(wait=False)
            run.reader.shutdown(wait=False, cancel_futures=True)
            run.close_sinks()
            run.call_hooks_quietly("on_teardown")
    report.checkpoint_id = run.last.checkpoint_id if run.last else None
    report.last_batch_id = run.batch_id
    report.seconds = time.perf_counter() - started
    return report


def _run_batches(run: _Run, max_batches: int | None) -> None:
    policy, live = run.pipeline.checkpoint, run.continuous
    ran, since_batches, since_time = 0, 0, time.monotonic()
    while (max_batches is None or ran < max_batches) and not (live and live.stopping()):
        budget = (max_batches - ran) if max_batches is not None else _PLAN_AHEAD
        planned = run.plan_next(budget)
        if planned is None:
            if live is None:
                break
            # Idle: what ran is checkpointed now, unless the policy waits for time to pass
            # (a count alone would leave a trickle of batches unchecked for long)
            if since_batches and (policy.every_seconds is None
                                  or policy.due(since_batches, time.monotonic() - since_time)):
                run.finish_checkpoint()
                run.commit_behind(run.take_checkpoint())
                since_batches, since_time = 0, time.monotonic()
            if run.committing is None or run.committing[0].done():
                run.finish_checkpoint()  # reports it; a commit under way does not hold the poll
            run.beat.doing(None)
            live.idle()
            run.woken = False  # timers may fall due again while it waits
            continue
        output = run.run_batch(*planned, read_ahead=max_batches is None or ran + 1 < max_batches)
        ran, since_batches = ran + 1, since_batches + 1
        run.write_behind(output)
        run.finish_checkpoint()  # the previous checkpoint is committed before the next is taken
        if policy.due(since_batches, time.monotonic() - since_time):
            run.commit_behind(run.take_checkpoint())
            since_batches, since_time = 0, time.monotonic()
    run.finish_checkpoint()
    if since_batches:
        run.commit_behind(run.take_checkpoint())
        run.finish_checkpoint()
    run.report_written(wait=True)
    run.take_encoded()


def _run_distributed(run: _Run, max_batches: int | None) -> None:
    """Distributed mode: each batch is checkpointed as it is written (its state lives only in
    ``_state``, where the next batch's tasks read it), so batches run one after another."""
    ran, run.distributed, live = 0, True, run.continuous
    policy = run.pipeline.checkpoint
    if policy != type(policy)():  # the pipeline asked for another than the default
        log.info("%s: distributed mode checkpoints every batch (its state lives only in _state); "
                 "the pipeline's checkpoint_every applies in driver mode", run.pipeline.name)
    if run.metrics is not None:
        run.metrics.forget_state_keys(run.pipeline.id)  # the tasks hold the state now
    while (max_batches is None or ran < max_batches) and not (live and live.stopping()):
        planned = run.plan_next((max_batches - ran) if max_batches is not None else _PLAN_AHEAD)
        if planned is None:
            if live is None:
                break
            run.beat.doing(None)
            live.idle()
            run.woken = False
            continue
        run.run_distributed(*planned)
        ran += 1


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while operators run. They allocate a few small
    objects per key and window, and every few hundred allocations the collector would walk the
    young objects, and now and then the whole state store: a third of a windowed batch's
    operator time (0.22 s against 0.15 s for 500k events). Nothing is lost by waiting: cyclic
    garbage the operators made is collected once the collector runs again."""
    if not gc.isenabled():  # the application turned it off: leave it off
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
