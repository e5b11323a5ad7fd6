"""Planning: which batch runs next, and reading its input (ahead of time when it can).

A batch's slice never changes once planned: the :class:`Planner` hands out the plans a run
that died left (a replay) before making new ones, records new ones before any runs, and keeps
the run's position (the last batch run and the source's offsets after it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from state import BatchPlan, BatchPlans, fault_point

from ..clock import Clock
from ..sources import Slice
from .recovery import Recovered

if TYPE_CHECKING:
    from ..context import RunContext
    from ..spark.heartbeat import Heartbeat
    from .metrics import RunMetrics
    from .protocol import RunnablePipeline

log = logging.getLogger(__name__)

PLAN_AHEAD = 32  # most batches planned (and recorded) in one commit


class Planner:
    """Plans a run's batches and reads their input; knows where the run is.

    ``wake``: when a batch with no input would next fire a timer, given the time now (epoch
    ms); set by the batch mode, which knows where timers are kept. ``None``: no operator has
    timers."""

    def __init__(self, pipeline: RunnablePipeline, spark: SparkSession, plans: BatchPlans,
                 recovered: Recovered, clock: Clock, beat: Heartbeat,
                 metrics: RunMetrics | None = None):
        self.pipeline, self.spark, self.plans = pipeline, spark, plans
        self.ctx: RunContext = recovered.ctx
        self.clock, self.beat, self.metrics = clock, beat, metrics
        self.batch_id = recovered.batch_id  # the last batch run
        self.offsets: dict[str, Any] = dict(recovered.offsets)  # the source's, after it
        self.pending = dict(recovered.pending_plans)  # recorded plans not run yet
        self.replaying = recovered.replaying
        self.woken = False  # a batch with no input ran for timers in this run
        self.wake: Callable[[int], int | None] | None = None
        # Reads the next planned batch while this one's operators run; the source's only user
        # meanwhile (a source is read one slice at a time, and plans are made between batches)
        self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-read")
        self.ahead: tuple[BatchPlan, Future] | None = None  # the next batch's read under way

    def plan_next(self, budget: int) -> tuple[BatchPlan, bool] | None:
        """The recorded plan of the next batch (a replay), else a new one; None when drained.

        New plans are made up to ``budget`` batches ahead and recorded in one commit, so a run
        that drains a backlog pays for one plan commit, not one per batch.
        """
        batch_id = self.batch_id + 1
        if batch_id in self.pending:
            return self.pending.pop(batch_id), self.replaying
        self.replaying = False
        self.beat.doing(f"{self.pipeline.name}: planning batch {batch_id}")
        source = self.pipeline.source
        slices: list[tuple[Any, Any] | None] = list(source.plan(
            self.ctx, self.offsets.get(source.name), limit=max(1, min(budget, PLAN_AHEAD))))
        self.measure_lag()
        if not slices and self.timers_due():
            slices, self.woken = [None], True  # one batch with no input, for its timers
        if not slices:
            return None
        plans = self.new_plans(batch_id, slices)
        self.pending = self.plans.record(plans, self.ctx.epoch, self.ctx.run_id)
        fault_point("after_plan")
        return self.pending.pop(batch_id), False

    def new_plans(self, first: int, slices: list[tuple[Any, Any] | None]) -> list[BatchPlan]:
        """Plans of batches ``first``, ... over ``slices`` (``None``: a batch with no input),
        with the tables operators pin for the batch."""
        pinned = {}
        for operator in self.pipeline.stream.operators:
            pinned.update(operator.plan_inputs(self.spark))
        name, now = self.pipeline.source.name, self.clock.now()
        return [BatchPlan(first + n, {**({name: bounds} if bounds else {}), **pinned},
                          planned_at=now) for n, bounds in enumerate(slices)]

    def put_back(self, plan: BatchPlan, replaying: bool) -> None:
        """Hand ``plan`` out again next (it was planned to look at, not run)."""
        self.pending[plan.batch_id] = plan
        self.replaying = replaying

    def advance(self, plan: BatchPlan) -> None:
        """Batch ``plan`` ran: the run is past it and its slice."""
        self.batch_id = plan.batch_id
        self.offsets.update(plan.end_positions())

    def idle(self) -> None:
        """The run waits for input: timers may fall due again meanwhile."""
        self.woken = False

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
        if self.woken or self.wake is None:
            return False
        now = int(self.clock.now() * 1000)
        wake = self.wake(now)
        return wake is not None and wake <= now

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
        plan = self.pending.get(batch_id + 1)
        if plan is not None:
            self.ahead = plan, self.reader.submit(self.read_now, plan)

    def read_now(self, plan: BatchPlan) -> Slice:
        """The batch's input: its planned slice, or no rows (a batch for timers)."""
        source = self.pipeline.source
        if source.name not in plan.ranges:
            return Slice(source.schema.frame([], []), Slice.no_rejects())
        return source.read(self.ctx.reading(plan), *plan.ranges[source.name])

    def close(self) -> None:
        """The run is over: a read ahead still under way is not waited for."""
        self.reader.shutdown(wait=False, cancel_futures=True)
