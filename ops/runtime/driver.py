"""Driver mode: a batch's operators run in the driver's Python, its writes behind it.

The batch comes to the driver as pandas and operators keep state in the run's
:class:`~state.StateStore` between checkpoints; sinks and checkpoints are written in threads
(:mod:`.write_behind`) while the next batch is read and computed, and checkpoints are taken as
the pipeline's :class:`~.policy.CheckpointPolicy` says. When the pipeline has lifecycle hooks,
the next batch's operators wait for the checkpoint under way to commit: hooks see
``on_post_checkpoint`` before the next batch's operators run.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd

from state import BatchPlan, Checkpoint, StateRows, fault_point, save_all
from state.faults import InjectedCrash

from ..context import BatchScope
from ..operators import StateKind
from ..operators.timing import wake_at
from .dead_letters import write_dead_letters
from .failures import failed
from .reports import BatchReport, distinct_keys
from .run import Run
from .write_behind import Computed, Taken, WriteBehind

log = logging.getLogger(__name__)


class DriverMode:
    """Runs a recovered run's batches on the driver (see the module docstring)."""

    name = "driver"

    def __init__(self, run: Run):
        self.run = run
        self.lanes = WriteBehind(self.write_sinks, self.commit)
        self.batch_time = 0  # the last batch's processing time (epoch ms)
        self.since_batches, self.since_time = 0, time.monotonic()  # since the last checkpoint
        if run.clocks:
            run.planner.wake = self.wake_at

    # the loop's steps (see .executor) ----------------------------------------------------------
    def batch(self, plan: BatchPlan, replayed: bool, read_ahead: bool) -> None:
        """Run batch ``plan``, start writing it, and checkpoint when the policy says so."""
        output = self.compute(plan, replayed, read_ahead)
        self.since_batches += 1
        self.report_written()  # an earlier batch's failed write stops the run here
        self.lanes.write(output)
        self.finish_checkpoint()  # the previous checkpoint is committed before the next is taken
        if self.run.pipeline.checkpoint.due(self.since_batches, self.seconds_since()):
            self.checkpoint()

    def idle(self) -> None:
        """No input: what ran is checkpointed now, unless the policy waits for time to pass (a
        count alone would leave a trickle of batches unchecked for long)."""
        policy = self.run.pipeline.checkpoint
        if self.since_batches and (policy.every_seconds is None
                                   or policy.due(self.since_batches, self.seconds_since())):
            self.finish_checkpoint()
            self.checkpoint()
        if not self.lanes.commit_under_way:
            self.finish_checkpoint()  # reports it; a commit under way does not hold the poll

    def finish(self) -> None:
        """The last batch ran: checkpoint what ran since the last checkpoint, and wait for
        every write."""
        self.finish_checkpoint()
        if self.since_batches:
            self.lanes.commit(self.take_checkpoint())
            self.finish_checkpoint()
        self.report_written(wait=True)
        self.lanes.take_encoded()

    def settle(self, error: BaseException) -> None:
        """After ``error``: let the writes under way finish (what they make durable is valid),
        and log rather than raise their own errors, which ``error`` supersedes."""
        while self.lanes.busy:
            try:
                self.finish_checkpoint()
                self.report_written(wait=True)
            except (Exception, InjectedCrash) as failure:
                if failure is not error:  # an encoding error reaches both threads
                    log.exception("%s: writes under way failed too", self.run.pipeline.name)

    def close(self) -> None:
        self.lanes.close()

    # 3. run operators --------------------------------------------------------------------------
    def compute(self, plan: BatchPlan, replayed: bool, read_ahead: bool = True) -> Computed:
        """Read the batch's slice and run the operators on it; nothing is written yet. With
        ``read_ahead``, the next planned batch is read meanwhile."""
        run, started = self.run, time.perf_counter()
        run.beat.doing(f"{run.pipeline.name}: running batch {plan.batch_id}")
        run.setup.warmer.warm()  # the tables this batch appends to, while it reads and computes
        sliced = run.planner.read(plan)
        if read_ahead:
            run.planner.read_next(plan.batch_id)
        self.lanes.take_encoded()
        if run.hooks:
            self.finish_checkpoint()
        self.batch_time = plan.time_ms
        frame, keys = self.apply(plan, sliced.good)
        run.planner.advance(plan)
        run.hooks.ctx.batch_id = plan.batch_id
        report = BatchReport(plan.batch_id, len(sliced.good) + len(sliced.rejected), len(frame),
                             len(sliced.rejected), keys, 0.0, replayed,
                             behind=len(run.planner.pending))
        # encoded in a thread while the next batch is read; this batch's sinks wait for it
        encoded = self.lanes.encode_batch(run.store.encode_changes)
        return Computed(report, started, frame, sliced.rejected, run.pipeline.source.name, encoded)

    def apply(self, plan: BatchPlan, frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        """The operators' output for batch ``plan``'s rows, and the most distinct keys any
        keyed operator saw."""
        scope, run = self.scope(plan), self.run
        keys: dict[tuple[str, ...], int] = {}  # distinct keys per keying, over keyed operators
        with _collector_paused():
            for operator in run.pipeline.stream.operators:
                declared = operator.declares()
                if declared.kind is StateKind.KEYED and declared.keys not in keys:
                    keys[declared.keys] = distinct_keys(frame, declared.keys)
                try:
                    frame = operator.apply(scope, frame)
                except Exception as error:  # the second time, it says how to get past it
                    failed(run.ctx, plan.batch_id, operator.name, frame, error)
        return frame, max(keys.values(), default=0)

    def scope(self, plan: BatchPlan) -> BatchScope:
        """What the operators see of batch ``plan`` on the driver."""
        pipeline = self.run.pipeline
        return BatchScope(pipeline.id, plan.batch_id, pipeline.source.schema.key_fields,
                          self.run.store, plan.ranges, batch_time=plan.time_ms,
                          operators=pipeline.stateful_operators)

    def wake_at(self, batch_time: int) -> int | None:
        """When a batch with no input would next fire a timer (see
        :func:`ops.operators.timing.wake_at`), over every operator with timers."""
        times = [wake_at(clock, self.run.store, batch_time) for clock in self.run.clocks]
        return min((t for t in times if t is not None), default=None)

    # 4.-5. write sinks, checkpoint (in the writer threads: see .write_behind) -----------------
    def write_sinks(self, output: Computed) -> None:
        """Sink lane: dead letters and sinks of one batch."""
        run, batch_id = self.run, output.report.batch_id
        write_dead_letters(run.ctx, batch_id, output.source, output.rejected)
        for sink in run.pipeline.sinks:
            sink.write(run.ctx, batch_id, output.frame)
            fault_point("after_sink_write")
        run.setup.warmer.warm()  # the next batch appends to the same tables

    def commit(self, checkpoint: Checkpoint, rows: StateRows) -> None:
        """Commit lane: the checkpoint with its state rows."""
        self.run.setup.checkpoints.commit_changes(checkpoint, rows)
        self.run.setup.warmer.warm()

    def checkpoint(self) -> None:
        """Take a checkpoint and start committing it; the policy counts from now."""
        self.lanes.commit(self.take_checkpoint())
        self.since_batches, self.since_time = 0, time.monotonic()

    def seconds_since(self) -> float:
        return time.monotonic() - self.since_time

    def take_checkpoint(self) -> Taken:
        """The checkpoint after the last batch run, taken in memory: hooks return markers, the
        record is built, and the changed state rows are encoded in a thread. Call only once
        the previous checkpoint finished (its id comes next)."""
        run = self.run
        markers = run.hooks.call("on_checkpoint")
        checkpoint = run.new_checkpoint(markers, save_all(run.pipeline.tracked),
                                        self.wake_at(self.batch_time))
        return Taken(checkpoint, self.lanes.encode_checkpoint(run.store.take_changes))

    def finish_checkpoint(self) -> None:
        """Wait for the checkpoint under way (raising its error, or its sinks'), call the
        ``on_post_checkpoint`` hooks, and report the batches written meanwhile."""
        commit, run = self.lanes.committed(), self.run
        if commit is not None:
            checkpoint = commit.taken.checkpoint
            run.beat.doing(f"{run.pipeline.name}: committing checkpoint "
                           f"{checkpoint.checkpoint_id}")
            run.committed(checkpoint, commit.seconds())
        self.report_written()
        if commit is not None:
            run.report_checkpoint(commit.taken.checkpoint)

    def report_written(self, wait: bool = False) -> None:
        """Report each batch whose sinks are written, in order (all of them with ``wait``);
        raise a failed write's error."""
        for write in self.lanes.written(wait):
            self.run.report_batch(dataclasses.replace(write.output.report, seconds=write.seconds()))


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
