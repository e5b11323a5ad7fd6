"""A run of a pipeline: recover, then plan, run, write and checkpoint until drained.

Exactly-once rests on four rules: a batch's slice never changes once planned (plans are recorded
first and reused on replay); operators are deterministic given (slice, state); every sink write is
idempotent by batch id; the checkpoint commit is the only commit point.

:func:`run_pipeline` is the one loop: :mod:`.recovery` says where the run starts,
:mod:`.planning` which batch runs next, and the run's :class:`~.modes.BatchMode` runs it
(:mod:`.driver` or :mod:`.distributed.mode`), writes it and checkpoints it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from state import delta_io
from state.lake import start_in_background, warming

from ..clock import SYSTEM_CLOCK, Clock
from .continuous import Continuous
from .metrics import RunMetrics
from .modes import BatchMode, mode_of
from .planning import PLAN_AHEAD
from .reports import BatchReport, CheckpointReport, RunReport
from .run import Run, RunOptions, Setup

if TYPE_CHECKING:
    from .protocol import RunnablePipeline


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
    if needs_spark(pipeline, warehouse):  # overlap the JVM's start with recovery and planning
        start_in_background(spark)
    options = RunOptions(progress, checkpointed, continuous, clock, allow_dropped_state, metrics)
    if metrics is not None:
        metrics.forget_state_keys(pipeline.id)  # what an earlier run held is not this run's
    with warming(spark) as warmer:
        setup = Setup.of(pipeline, spark, warehouse, warmer)
        run = _ended(setup, options, max_batches)
    report = setup.report
    report.checkpoint_id = run.last.checkpoint_id if run.last else None
    report.last_batch_id = run.planner.batch_id
    report.seconds = time.perf_counter() - started
    return report


def needs_spark(pipeline: RunnablePipeline, warehouse: str | None) -> bool:
    """Whether a run of ``pipeline`` needs Spark whatever its batches hold: in distributed
    mode, with an operator that reads tables through Spark, or with state delta-rs does not
    serve. Otherwise a driver-mode run starts a (lazy) session only if something asks for it
    (:mod:`state.lake.sessions`)."""
    return (pipeline.mode == "distributed"
            or any(op.needs_spark for op in pipeline.stream.operators)
            or not delta_io.serves(pipeline.layout(warehouse).state))


def _ended(setup: Setup, options: RunOptions, max_batches: int | None) -> Run:
    """The run of ``setup``'s pipeline through its hooks' lifecycle (see :func:`run_pipeline`),
    once it ended; a run that fails lets the writes under way finish, then raises."""
    run: Run | None = None  # none until recovered: no sink was used before
    mode: BatchMode | None = None
    try:
        setup.hooks.call("on_setup")
        run = Run(setup, setup.recover(options.allow_dropped_state), options)
        setup.hooks.call("on_start")
        mode = mode_of(run)
        _loop(run, mode, max_batches)
        setup.hooks.call("on_finish")
        return run
    except BaseException as error:
        if mode is not None:
            mode.settle(error)
        setup.hooks.call_quietly("on_error", error)
        raise
    finally:
        setup.beat.close()
        if mode is not None:
            mode.close()
        if run is not None:
            run.close()
        setup.hooks.call_quietly("on_teardown")


def _loop(run: Run, mode: BatchMode, max_batches: int | None) -> None:
    """Plan and run batches until drained (or ``max_batches`` ran); a continuous run polls for
    input instead, until asked to stop."""
    ran, live = 0, run.options.continuous
    while (max_batches is None or ran < max_batches) and not (live and live.stopping()):
        planned = run.planner.plan_next((max_batches - ran) if max_batches is not None
                                        else PLAN_AHEAD)
        if planned is None:
            if live is None:
                break
            mode.idle()
            run.beat.doing(None)
            live.idle()
            run.planner.idle()  # timers may fall due again while it waits
            continue
        mode.batch(*planned, read_ahead=max_batches is None or ran + 1 < max_batches)
        ran += 1
    mode.finish()
