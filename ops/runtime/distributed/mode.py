"""Distributed mode: a batch's operators run on Spark executors (see the package), its sinks and
checkpoint are written right after, one batch after another.

Each batch is checkpointed as it is written: its state lives only in ``_state``, where the next
batch's tasks read it, so the pipeline's checkpoint policy (driver mode's) does not apply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from state import (
    BatchPlan,
    Checkpoint,
    ConfigError,
    delta_io,
    fault_point,
    next_checkpoint_id,
    takes_state_files,
)

from ...columns import ORDER_COLUMN, ROW_COLUMN
from ...sinks import FileSink
from ...sources import FrameSlice
from ..dead_letters import write_dead_letters
from ..failures import OperatorFailure, failed
from ..reports import BatchReport
from .driver_side import run_stages
from .output import StageOutput
from .stages import Stage, stages_of, writes_state_files
from .tasks import StateFiles, TaskSpec
from .typed_state import prepare_table, typed_names

if TYPE_CHECKING:  # annotations only: the run settles its storage through recovery, which
    from ..run import Run  # reads the stages (ops.runtime.storage)

log = logging.getLogger(__name__)


class DistributedMode:
    """Runs a recovered run's batches on executors (see the module docstring)."""

    name = "distributed"

    def __init__(self, run: Run):
        self.run = run
        pipeline, policy = run.pipeline, run.pipeline.checkpoint
        if run.clocks:  # timers are kept on executors: the last checkpoint says when one is due
            run.planner.wake = lambda now: run.last.wake_at if run.last else None
        if policy != type(policy)():  # the pipeline asked for another than the default
            log.info("%s: distributed mode checkpoints every batch (its state lives only in "
                     "_state); the pipeline's checkpoint_every applies in driver mode",
                     pipeline.name)
        if run.metrics is not None:
            run.metrics.forget_state_keys(pipeline.id)  # the tasks hold the state now

    # the loop's steps (see ..executor) ----------------------------------------------------------
    def batch(self, plan: BatchPlan, replayed: bool, read_ahead: bool) -> None:
        """Run one batch on executors, write its sinks and commit its checkpoint (with the
        state its tasks changed): the next batch reads that state from ``_state``. (Its input
        is read by Spark when the batch runs: nothing to read ahead.)"""
        run, started = self.run, time.perf_counter()
        run.beat.doing(f"{run.pipeline.name}: running batch {plan.batch_id} on executors")
        source = run.pipeline.source
        sliced = (source.read_frame(run.ctx.reading(plan), *plan.ranges[source.name])
                  if source.name in plan.ranges else FrameSlice.empty(run.spark, source.schema))
        targets = self.sink_targets()
        stages = stages_of(run.pipeline.stream.operators)
        try:
            output = run_stages(run.spark, run.layout, self.as_of, sliced.good,
                                self.specs(plan, stages, targets), stages)
        except OperatorFailure as error:  # the second time, it says how to get past it
            failed(run.ctx, plan.batch_id, error.operator, error.rows, error)
        try:
            write_dead_letters(run.ctx, plan.batch_id, source.name, sliced.rejected)
            self.write_sinks(plan, output, targets)
            checkpoint, seconds = self.commit(plan, output)
        finally:
            output.release()
        run.committed(checkpoint, seconds)
        run.report_batch(BatchReport(
            plan.batch_id, output.rows_in + len(sliced.rejected), output.rows_out,
            len(sliced.rejected), output.keys, time.perf_counter() - started, replayed,
            mode="distributed", behind=len(run.planner.pending)))
        run.report_checkpoint(checkpoint)

    def idle(self) -> None:
        """No input: every batch run is checkpointed already."""

    def finish(self) -> None:
        """The last batch ran, and was checkpointed with it."""

    def settle(self, error: BaseException) -> None:
        """Nothing is written behind: nothing to wait for."""

    def close(self) -> None:
        """No thread of its own to stop."""

    # a batch's parts ---------------------------------------------------------------------------
    @property
    def as_of(self) -> int | None:
        """The checkpoint whose state the batch's tasks read."""
        return self.run.last.checkpoint_id if self.run.last else None

    def sink_targets(self) -> dict[str, tuple[FileSink, Any]]:
        """The sinks whose files the last stage's tasks write (those that let them), with
        where they write them."""
        run = self.run
        return {sink.name: (sink, target) for sink in run.pipeline.sinks
                if isinstance(sink, FileSink) and (target := sink.file_target(run.ctx)) is not None}

    def state_files(self, stages: list[Stage]) -> StateFiles | None:
        """Where tasks read their keys' state from ``_state``'s files (where delta-rs reads the
        table), and whether they write what they changed as its files (where delta-rs appends
        to it); ``None``: neither."""
        run, as_of = self.run, self.as_of
        if any(typed_names(stage, run.storage) for stage in stages):  # its tasks always read and write files
            if not writes_state_files(stages):
                raise ConfigError(f"pipeline {run.pipeline.name!r}: typed state (state_type=) runs "
                                  "on executors only beside operators without windows, sessions "
                                  "or timers in this release: run in driver mode")
            prepare_table(run.layout)
        elif as_of is None or not delta_io.serves(run.layout.state):
            if as_of is not None and any(op.declares().entries for stage in stages
                                         for op in stage.operators):
                raise ConfigError(f"pipeline {run.pipeline.name!r}: state of many rows per key "
                                  "(a StatefulProcessor's ListState or MapState) is read on "
                                  f"executors from _state's files, and delta-rs does not read "
                                  f"{run.layout.state}: run in driver mode")
            return None
        writes = writes_state_files(stages) and takes_state_files(run.layout)
        return StateFiles(run.layout.state, as_of, delta_io.storage_environment(run.layout.state),
                          checkpoint_id=next_checkpoint_id(run.last) if writes else None)

    def specs(self, plan: BatchPlan, stages: list[Stage],
              targets: dict[str, tuple[FileSink, Any]]) -> Callable[[Stage], TaskSpec]:
        """What each stage's tasks need for batch ``plan`` (see TaskSpec)."""
        run = self.run
        pipeline, source, files = run.pipeline, run.pipeline.source, self.state_files(stages)
        groups = pipeline.key_groups
        buckets = min(groups, int(run.spark.conf.get("spark.sql.shuffle.partitions") or groups))

        def spec(stage: Stage) -> TaskSpec:
            return TaskSpec(pipeline.id, plan.batch_id, source.schema.key_fields,
                            dict(plan.ranges), groups, buckets, stage, batch_time=plan.time_ms,
                            operators=pipeline.stateful_operators, state_files=files,
                            state_types=run.storage,
                            sink_files=tuple(target for _, target in targets.values())
                            if stage is stages[-1] else ())
        return spec

    def write_sinks(self, plan: BatchPlan, output: StageOutput,
                    targets: dict[str, tuple[FileSink, Any]]) -> None:
        """The batch's sinks: the files its tasks wrote committed, or its rows written."""
        run = self.run
        rows = output.rows.withColumnRenamed(ORDER_COLUMN, ROW_COLUMN)
        for sink in run.pipeline.sinks:
            if output.rows_out and sink.name in output.sink_files:
                file_sink, target = targets[sink.name]
                file_sink.commit_files(run.ctx, target, plan.batch_id, output.sink_files[sink.name])
            elif output.rows_out:
                sink.write_frame(run.ctx, plan.batch_id, rows)
            fault_point("after_sink_write")

    def commit(self, plan: BatchPlan, output: StageOutput) -> tuple[Checkpoint, float]:
        """The run is past batch ``plan``: its checkpoint, committed with the state the tasks
        changed, and the seconds the commit took."""
        run = self.run
        run.planner.advance(plan)
        run.hooks.ctx.batch_id = plan.batch_id
        checkpoint = run.new_checkpoint(run.hooks.call("on_checkpoint"), {}, output.wake_at)
        committing = time.perf_counter()
        entries = dict(entry for op in run.pipeline.stream.operators for entry in op.declares().entries)
        run.setup.checkpoints.commit_changes(checkpoint, output.changed_state(run.spark, entries))
        return checkpoint, time.perf_counter() - committing
