"""One run of one pipeline after recovery: what both batch modes share.

A :class:`Run` holds where the run is (its :class:`~.planning.Planner`), the last checkpoint
and the state store it starts from, builds checkpoint records the same way in either mode, and
reports batches and checkpoints to the caller, the metrics and the log. :class:`Setup` is what
a run has before it recovers; :class:`RunOptions` what its caller asked.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from state import BatchPlans, Checkpoint, CheckpointLog, HookContext, PipelineLayout, new_checkpoint
from state.lake import TransactionWarmer

from ..clock import SYSTEM_CLOCK, Clock
from ..spark.heartbeat import Heartbeat
from .continuous import Continuous
from .hooks import RunHooks
from .metrics import RunMetrics
from .planning import Planner
from .recovery import Recovered, Recovery
from .reports import BatchReport, CheckpointReport, RunReport

if TYPE_CHECKING:
    from .protocol import RunnablePipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """What the caller of :func:`~.executor.run_pipeline` asked of the run, besides the pipeline."""

    progress: Callable[[BatchReport], None] | None = None
    checkpointed: Callable[[CheckpointReport], None] | None = None
    continuous: Continuous | None = None
    clock: Clock = SYSTEM_CLOCK  # processing time: a batch's time, and whether a timer is due
    allow_dropped_state: bool = False
    metrics: RunMetrics | None = None


@dataclass(frozen=True)
class Setup:
    """What a run has before it recovers: the pipeline's tables, its hooks, what it reports."""

    pipeline: RunnablePipeline
    spark: SparkSession
    layout: PipelineLayout
    checkpoints: CheckpointLog
    plans: BatchPlans
    hooks: RunHooks
    warmer: TransactionWarmer
    report: RunReport
    beat: Heartbeat

    @classmethod
    def of(cls, pipeline: RunnablePipeline, spark: SparkSession, warehouse: str | None,
           warmer: TransactionWarmer) -> Setup:
        layout = pipeline.layout(warehouse)
        checkpoints = CheckpointLog(spark, layout)
        hooks = RunHooks(pipeline.id, pipeline.all_hooks(),
                         HookContext(spark, layout, uuid.uuid4().hex, checkpoints))
        return cls(pipeline, spark, layout, checkpoints, BatchPlans(spark, layout), hooks, warmer,
                   RunReport(pipeline=pipeline.id), Heartbeat(log))

    def recover(self, allow_dropped_state: bool) -> Recovered:
        """Recovery (see :mod:`.recovery`)."""
        self.beat.doing(f"{self.pipeline.name}: recovering its last checkpoint")
        return Recovery(self.pipeline, self.spark, self.layout, self.checkpoints, self.plans,
                        self.hooks, self.warmer, allow_dropped_state).recover()


class Run:
    """A recovered run: its position, last checkpoint and state store, and its reports."""

    def __init__(self, setup: Setup, recovered: Recovered, options: RunOptions):
        self.setup, self.options = setup, options
        self.pipeline, self.spark, self.hooks = setup.pipeline, setup.spark, setup.hooks
        self.layout, self.metrics = setup.layout, options.metrics
        self.report, self.beat = setup.report, setup.beat
        self.ctx, self.store, self.last = recovered.ctx, recovered.store, recovered.last
        #: how each state is stored (text or typed columns) and what it means, this whole run
        self.storage, self.meaning = recovered.storage, recovered.meaning
        self.planner = Planner(self.pipeline, self.spark, setup.plans, recovered, options.clock,
                               self.beat, options.metrics)
        #: the clocks of the operators with timers (a batch with no input fires them)
        self.clocks = [d.clock for op in self.pipeline.stream.operators
                       if (d := op.declares()).clock]

    def new_checkpoint(self, markers: dict[str, Any], tracked: dict[str, Any],
                       wake: int | None) -> Checkpoint:
        """The record of the checkpoint after the last batch run, in either mode: the hooks'
        ``markers``, the ``tracked`` variables, and when timers next fire with no input."""
        at = self.planner
        return new_checkpoint(self.last, batch_id=at.batch_id, offsets=dict(at.offsets),
                              tracked=tracked, markers=markers, run_id=self.ctx.run_id,
                              key_groups=self.pipeline.key_groups, wake_at=wake,
                              operators=self.meaning)

    def committed(self, checkpoint: Checkpoint, seconds: float) -> None:
        """``checkpoint`` is committed (in ``seconds``): it is the last, and hooks hear of it."""
        self.report.checkpoint_seconds.append(seconds)
        self.last = checkpoint
        if self.metrics is not None:
            self.metrics.checkpoint(self.pipeline.id, checkpoint.checkpoint_id, seconds)
        self.hooks.ctx.checkpoint_id = checkpoint.checkpoint_id
        self.hooks.call("on_post_checkpoint", checkpoint.checkpoint_id)

    def report_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Tell ``checkpointed`` which batches ``checkpoint`` covers; a continuous run then
        forgets them (it keeps counts, not a list that grows for as long as it runs)."""
        covered = self.report.covered_by(checkpoint.checkpoint_id, checkpoint.batch_id,
                                         forget=self.options.continuous is not None)
        if self.options.checkpointed is not None:
            self.options.checkpointed(covered)

    def report_batch(self, batch: BatchReport) -> None:
        self.report.add(batch)
        if self.metrics is not None:
            self.metrics.batch(self.pipeline.id, batch)
            if batch.mode == "driver":  # on executors, state is held by the tasks
                self.metrics.state_keys_held(self.pipeline.id, self.store.keys_held())
        log.info("%s batch %d (%s): %d rows in, %d out, %d keys, %d dead letters, %.0f rows/s%s",
                 self.pipeline.name, batch.batch_id, batch.mode, batch.rows_in, batch.rows_out,
                 batch.keys, batch.dead_letters, batch.rows_per_second,
                 " (replay)" if batch.replayed else "")
        if self.options.progress:
            self.options.progress(batch)

    def close(self) -> None:
        """The run is over: a read ahead is not waited for, and each sink releases what it
        held (after the writer threads were told to stop: a write still under way fails, and
        its batch is replayed)."""
        self.planner.close()
        for sink in self.pipeline.sinks:
            try:
                sink.close(self.ctx)
            except Exception:
                log.exception("%s: closing sink %s failed", self.pipeline.name, sink.name)
