"""The micro-batch executor: recover, then plan, run, write and checkpoint until drained.

Exactly-once rests on four rules: a batch's slice never changes once planned (plans are recorded
first and reused on replay); operators are deterministic given (slice, state); every sink write is
idempotent by batch id; the checkpoint commit is the only commit point.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from state import (BatchPlan, BatchPlans, Checkpoint, CheckpointLog, HookContext, StateStore,
                   TransactionWarmer, fault_point, new_checkpoint, restore_all, save_all, tables,
                   warming)

from ._context import RunContext
from .operators import BatchScope

log = logging.getLogger(__name__)

_PLAN_AHEAD = 32  # most batches planned (and recorded) in one commit
DEAD_LETTER_SCHEMA = StructType([
    StructField("batch_id", LongType(), False),
    StructField("source", StringType(), False),
    StructField("position", StringType(), False),
    StructField("reason", StringType(), False),
    StructField("raw", StringType(), True),
])


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    batch_id: int
    rows_in: int
    rows_out: int
    dead_letters: int
    keys: int
    seconds: float
    replayed: bool

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RunReport:
    """What a run did, for logs and the Dagster UI."""

    pipeline: str
    batches: list[BatchReport] = field(default_factory=list)
    checkpoint_id: int | None = None
    last_batch_id: int | None = None
    seconds: float = 0.0
    checkpoint_seconds: list[float] = field(default_factory=list)

    @property
    def rows_in(self) -> int:
        return sum(b.rows_in for b in self.batches)

    @property
    def rows_out(self) -> int:
        return sum(b.rows_out for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def keys_touched(self) -> int:
        return sum(b.keys for b in self.batches)


class _Run:
    """One run of one pipeline; the public entry point is :func:`run_pipeline`."""

    def __init__(self, pipeline, spark: SparkSession, warehouse: str | None,
                 warmer: TransactionWarmer):
        self.pipeline = pipeline
        self.warmer = warmer
        self.spark = spark
        self.layout = pipeline.layout(warehouse)
        self.checkpoints = CheckpointLog(spark, self.layout)
        self.plans = BatchPlans(spark, self.layout)
        self.hooks = pipeline.all_hooks()
        self.hook_ctx = HookContext(spark, self.layout, uuid.uuid4().hex, self.checkpoints)
        self.last: Checkpoint | None = None
        # The next checkpoint's state rows, encoded in a thread while the sinks write
        self.encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-encode")
        self.state_rows: Future | None = None

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
        tables.clear_staging(self.layout.staging)
        self.last = self.checkpoints.latest()
        epoch = self.last.epoch if self.last else 0
        self.ctx = RunContext(self.spark, self.layout, epoch, run_id=self.hook_ctx.run_id)
        self.pipeline.source.setup(self.ctx)
        if self.last and self.last.reset_to_batch is not None:
            self.finish_reset()
        self.store = StateStore(self.spark, self.layout, self.last.checkpoint_id if self.last else None)
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

    def finish_reset(self) -> None:
        """After a reset to an older checkpoint: remove what the abandoned batches wrote to sinks
        and dead letters, then commit a plain copy of the reset checkpoint to say it is done.
        Until then no batch runs, so every row past the reset point is the abandoned timeline's
        and the cleanup can safely be redone after a crash."""
        after = self.last.reset_to_batch
        for sink in self.pipeline.sinks:
            sink.discard_after(self.ctx, after)
        tables.delete_where(self.spark, self.layout.dead_letters, F.col("batch_id") > after)
        fault_point("reset_cleanup")
        done = dataclasses.replace(self.last, checkpoint_id=self.last.checkpoint_id + 1,
                                   reset_to_batch=None, resumed_from=None, run_id=self.ctx.run_id,
                                   created_at=time.time())
        self.checkpoints.commit(done, pd.DataFrame())
        log.info("%s: reset to batch %d finished; sinks hold no later batch", self.pipeline.name,
                 after)
        self.last = done

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
        source = self.pipeline.source
        slices = source.plan(self.ctx, self.offsets.get(source.name),
                             limit=max(1, min(budget, _PLAN_AHEAD)))
        if not slices:
            return None
        pinned = {}
        for operator in self.pipeline.stream.operators:
            pinned.update(operator.plan_inputs(self.spark))
        plans = [BatchPlan(batch_id + n, {source.name: bounds, **pinned})
                 for n, bounds in enumerate(slices)]
        self.pending_plans = self.plans.record(plans, self.ctx.epoch, self.ctx.run_id)
        fault_point("after_plan")
        return self.pending_plans.pop(batch_id), False

    # 3.-4. run operators, write sinks ---------------------------------------------------------
    def run_batch(self, plan: BatchPlan, replayed: bool,
                  checkpoint_follows: bool = False) -> BatchReport:
        started = time.perf_counter()
        self.warmer.warm()  # the tables this batch appends to, while it reads and computes
        source = self.pipeline.source
        start, end = plan.ranges[source.name]
        sliced = source.read(self.ctx, start, end)
        frame = sliced.good
        scope = BatchScope(self.pipeline.name, plan.batch_id, source.schema.key_fields, self.store,
                           plan.ranges)
        for operator in self.pipeline.stream.operators:
            frame = operator.apply(scope, frame)
        if checkpoint_follows:  # the state is final for this batch: encode it meanwhile
            self.state_rows = self.encoder.submit(self.store.changed_rows)
        self.write_dead_letters(plan.batch_id, source.name, sliced.rejected)
        for sink in self.pipeline.sinks:
            sink.write(self.ctx, plan.batch_id, frame)
            fault_point("after_sink_write")
        self.batch_id = self.hook_ctx.batch_id = plan.batch_id
        self.offsets.update(plan.end_positions())
        keys = len(sliced.good[list(scope.key_fields)].drop_duplicates()) if scope.key_fields else 0
        return BatchReport(plan.batch_id, len(sliced.good) + len(sliced.rejected), len(frame),
                           len(sliced.rejected), keys, time.perf_counter() - started, replayed)

    def write_dead_letters(self, batch_id: int, source: str, rejected: pd.DataFrame) -> None:
        if rejected.empty:
            return
        rows = rejected.assign(batch_id=batch_id, source=source)
        log.warning("%s batch %d: %d record(s) to dead letters; first: %s", self.pipeline.name,
                    batch_id, len(rows), rows["reason"].iloc[0])
        tables.append(tables.to_frame(self.spark, rows[DEAD_LETTER_SCHEMA.names],
                                      DEAD_LETTER_SCHEMA),
                      self.layout.dead_letters, txn=self.ctx.txn("dead_letters", batch_id))

    # 5. checkpoint ----------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """1. hooks return markers; 2. one commit of changed state + record; 3. post hooks."""
        markers = self.call_hooks("on_checkpoint")
        checkpoint = new_checkpoint(self.last, batch_id=self.batch_id, offsets=dict(self.offsets),
                                    tracked=save_all(self.pipeline.tracked), markers=markers,
                                    run_id=self.ctx.run_id)
        rows, self.state_rows = self.state_rows, None
        self.checkpoints.commit(checkpoint, rows.result() if rows else self.store.changed_rows())
        self.store.mark_checkpointed()
        self.last = checkpoint
        self.hook_ctx.checkpoint_id = checkpoint.checkpoint_id
        self.call_hooks("on_post_checkpoint", checkpoint.checkpoint_id)
        return checkpoint

    def call_hooks_quietly(self, method: str, *args: Any) -> None:
        """``on_error``/``on_teardown``: one failing hook must neither stop the others nor hide
        the run's own error, so failures are logged, not raised."""
        for key, hook in self.hooks:
            try:
                getattr(hook, method)(self.hook_ctx, *args)
            except Exception:
                log.exception("%s: %s hook %s failed", self.pipeline.name, method, key)


def run_pipeline(pipeline, spark: SparkSession, *, warehouse: str | None = None,
                 max_batches: int | None = None,
                 progress: Callable[[BatchReport], None] | None = None) -> RunReport:
    """Run ``pipeline`` until its source is drained (or ``max_batches`` batches ran).

    Order: ``on_setup``, recovery (``on_recover``), ``on_start``, batches with checkpoints as the
    pipeline's policy says, a final checkpoint, ``on_finish``; ``on_error`` on failure;
    ``on_teardown`` always.
    """
    started = time.perf_counter()
    report = RunReport(pipeline=pipeline.name)
    with warming(spark) as warmer:
        run = _Run(pipeline, spark, warehouse, warmer)
        try:
            run.call_hooks("on_setup")
            run.recover()
            run.call_hooks("on_start")
            _run_batches(run, report, max_batches, progress)
            run.call_hooks("on_finish")
        except BaseException as error:
            run.call_hooks_quietly("on_error", error)
            raise
        finally:
            run.encoder.shutdown(wait=False)
            run.call_hooks_quietly("on_teardown")
    report.checkpoint_id = run.last.checkpoint_id if run.last else None
    report.last_batch_id = run.batch_id
    report.seconds = time.perf_counter() - started
    return report


def _run_batches(run: _Run, report: RunReport, max_batches: int | None,
                 progress: Callable[[BatchReport], None] | None) -> None:
    policy = run.pipeline.checkpoint
    since_batches, since_time = 0, time.monotonic()
    while max_batches is None or len(report.batches) < max_batches:
        budget = (max_batches - len(report.batches)) if max_batches is not None else _PLAN_AHEAD
        planned = run.plan_next(budget)
        if planned is None:
            break
        follows = policy.due(since_batches + 1, time.monotonic() - since_time)
        batch = run.run_batch(*planned, checkpoint_follows=follows)
        report.batches.append(batch)
        since_batches += 1
        log.info("%s batch %d: %d rows in, %d out, %d dead letters, %.0f rows/s%s",
                 run.pipeline.name, batch.batch_id, batch.rows_in, batch.rows_out,
                 batch.dead_letters, batch.rows_per_second, " (replay)" if batch.replayed else "")
        if progress:
            progress(batch)
        if policy.due(since_batches, time.monotonic() - since_time):
            _timed_checkpoint(run, report)
            since_batches, since_time = 0, time.monotonic()
    if since_batches:
        _timed_checkpoint(run, report)


def _timed_checkpoint(run: _Run, report: RunReport) -> None:
    started = time.perf_counter()
    run.checkpoint()
    report.checkpoint_seconds.append(time.perf_counter() - started)
