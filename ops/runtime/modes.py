"""Where a pipeline's operators run: on the driver, on Spark executors, or chosen per run.

``driver``: the batch comes to the driver as pandas and operators keep state in the driver's
memory between checkpoints; fastest while a batch fits one process comfortably
(:mod:`.driver`).
``distributed``: operators run on executors, cogrouped with their keys' state by key group
(:mod:`.distributed`); the driver never holds a batch's rows or state.
``auto``: a run counts its first batch's rows and runs distributed from
:data:`AUTO_DISTRIBUTED_ROWS` rows on (bench/README.md has the measurements behind it).

Each mode is a :class:`BatchMode`: the run's one loop (:mod:`.executor`) plans and hands it
batches.

>>> check_mode("auto")
'auto'
"""

from __future__ import annotations

import logging
from typing import Protocol

from state import BatchPlan, ConfigError

from .distributed import DistributedMode
from .driver import DriverMode
from .run import Run

log = logging.getLogger(__name__)

MODES = ("driver", "distributed", "auto")

#: From this many rows in a run's first batch, ``auto`` runs distributed: where the driver's
#: memory, not its speed, becomes the limit (bench/README.md, "Driver vs distributed").
AUTO_DISTRIBUTED_ROWS = 1_000_000


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`; ``ValueError`` naming them if not."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


class BatchMode(Protocol):
    """How a run's batches run, once planned, and what it does between and after them."""

    name: str

    def batch(self, plan: BatchPlan, replayed: bool, read_ahead: bool) -> None:
        """Run batch ``plan``; ``read_ahead``: another batch may follow it in this run."""

    def idle(self) -> None:
        """A continuous run found no input and is about to wait for some."""

    def finish(self) -> None:
        """No batch follows: make what ran durable."""

    def settle(self, error: BaseException) -> None:
        """The run failed with ``error``: let what is being written finish."""

    def close(self) -> None:
        """The run is over: stop what the mode started."""


def mode_of(run: Run) -> BatchMode:
    """The pipeline's mode for ``run``, with ``auto`` settled by the size of its first batch."""
    mode = run.pipeline.mode
    if mode in ("distributed", "auto"):
        check_distributable(run)
    if mode == "auto":
        mode = _settled(run)
    return DistributedMode(run) if mode == "distributed" else DriverMode(run)


def _settled(run: Run) -> str:
    """``auto``'s choice: distributed when the run's first batch is large."""
    planned = run.planner.plan_next(1)
    if planned is None:
        return "driver"
    plan = planned[0]
    run.planner.put_back(*planned)  # the loop takes it again
    source = run.pipeline.source
    rows = source.read_frame(run.ctx.reading(plan), *plan.ranges[source.name]).good.count()
    chosen = "distributed" if rows >= AUTO_DISTRIBUTED_ROWS else "driver"
    log.info("%s: mode auto: first batch has %d rows -> %s (distributed from %d)",
             run.pipeline.name, rows, chosen, AUTO_DISTRIBUTED_ROWS)
    return chosen


def check_distributable(run: Run) -> None:
    """Refuse what cannot run on executors, before any batch runs."""
    pipeline = run.pipeline
    if pipeline.tracked:
        raise ConfigError(
            f"pipeline {pipeline.name!r}: tracked variables live in the driver's process, and "
            "distributed mode runs operators on executors; keep such values in managed state "
            "(sp.get/sp.set) or run in driver mode")
    for operator in pipeline.stream.operators:
        if operator.needs_spark:
            raise ConfigError(
                f"pipeline {pipeline.name!r}: operator {operator.name!r} reads tables "
                "through Spark while it runs, which executors cannot: run in driver mode")
        if operator.driver_only:
            raise ConfigError(
                f"pipeline {pipeline.name!r}: operator {operator.name!r} "
                f"{operator.driver_only}, which runs on the driver only in this release: run "
                "in driver mode")
        if (operator.declares().clock is not None
                and any(run.storage.of(name) for name in operator.declares().names)):
            raise ConfigError(
                f"pipeline {pipeline.name!r}: operator {operator.name!r} stores its state in "
                "typed columns (state_type=, or inferred from state= before it had them) and has "
                "timers or a TTL, which run on executors with text state only in this release: "
                "run in driver mode, or declare state_type='json' and sp.migrate(spark, "
                "pipeline) converts the state to text")
