"""Sensors: one per pipeline that reads input from outside Dagster (an inbox, files, a topic or
table no pipeline of the code location writes), requesting a run when that input moves or a
timer of its operators falls due. Input another pipeline's asset writes needs no sensor: the
reading pipeline's asset runs by declarative automation (:func:`needs_sensor`)."""

import time
from collections.abc import Sequence
from typing import Any

import dagster as dg

from ops import Pipeline
from state import PipelineLayout, checkpointed_offsets, wake_time

from .lineage import external_inputs
from .resources import WarehouseResource

PIPELINE_TAG = "lakestream/pipeline"
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
              dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
              dg.DagsterRunStatus.CANCELING]


def needs_sensor(pipeline: Pipeline, pipelines: Sequence[Pipeline],
                 warehouse: str | None = None) -> bool:
    """Whether ``pipeline`` needs a sensor besides declarative automation: it reads input from
    outside ``pipelines`` (see :func:`~assets.lineage.external_inputs`), or keeps timers, which
    fall due with no new input at all.

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    >>> sold = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
    ...               catalog=catalog)
    >>> top = sp.sql("CREATE TABLE top AS SELECT n, COUNT(*) AS titles FROM sold GROUP BY n",
    ...              catalog=catalog)
    >>> needs_sensor(sold, [sold, top]), needs_sensor(top, [sold, top])
    (True, False)
    """
    timers = any(op.declares().clock is not None for op in pipeline.stream.operators)
    return timers or external_inputs(pipeline, pipelines, warehouse)


def make_pipeline_sensor(pipeline: Pipeline, job: Any,
                         *, minimum_interval_seconds: int | None = None,
                         default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
                         ) -> dg.SensorDefinition:
    """A sensor that requests ``job`` (a job or asset job) when ``pipeline``'s source shows new
    input, or when its last checkpoint's ``wake_at`` (the ms after the earliest timer or TTL
    deadline: the first time a batch fires it) has come with no new input: that run is one
    batch with no input, which fires the timers.

    It looks every ``minimum_interval_seconds``, by default the pipeline's own interval
    (``pipeline.with_poll_interval(seconds)``, 30 s unless it says). Dagster's sensor daemon
    evaluates sensors on a loop of 5 s, so a shorter interval gains nothing.

    The run key is the source position (or the deadline), so one position is requested once;
    the cursor moves only to a position that was requested; and while a run of the pipeline is
    queued or in progress the sensor waits (the cursor stays, so the data is requested after
    that run). Local sources and checkpoints are read from the file system, with no Spark session.
    A source that can say how much input is past the last checkpoint's position without Spark
    (Kafka: any partition whose read-committed end passed the checkpoint's offset) is asked
    that instead of comparing positions with the cursor.
    """

    name = pipeline.id

    interval = minimum_interval_seconds
    if interval is None:  # the daemon's 5 s loop ticks a sensor due at exactly a multiple of its
        # period on one loop or the next, at random (measured: a 5 s sensor ticked 5 or 10 s
        # apart); a second less makes the pipeline's interval the time between its ticks
        interval = max(1, pipeline.poll_seconds - 1)

    @dg.sensor(name=f"{name}_sensor", job=job,
               minimum_interval_seconds=interval, default_status=default_status,
               description=f"Runs {name!r} when its source has new input.")
    def _sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource
                ) -> dg.SkipReason | dg.RunRequest:
        position = pipeline.source.probe(pipeline.layout(warehouse.root))
        if position is None:
            return dg.SkipReason(f"{name}: its source has no input yet")
        layout = pipeline.layout(warehouse.root)
        unread = _unread(pipeline, layout)
        fresh = position != context.cursor if unread is None else bool(unread)
        wake = wake_time(layout) if not fresh else None
        if not fresh and (wake is None or wake > time.time() * 1000):
            return dg.SkipReason(f"no new input (source at {position})" + (
                f"; next timer due at {wake} (epoch ms)" if wake is not None else ""))
        in_flight = context.instance.get_run_records(
            dg.RunsFilter(tags={PIPELINE_TAG: name}, statuses=_IN_FLIGHT), limit=1)
        if in_flight:
            return dg.SkipReason(f"run {in_flight[0].dagster_run.run_id} of {name} is "
                                 f"still in flight; source at {position} waits for it")
        if wake is not None:  # no new input: the timers due start the run
            return dg.RunRequest(run_key=f"{name}:{position}:timers@{wake}",
                                 tags={PIPELINE_TAG: name, "lakestream/timers_due": str(wake)})
        context.update_cursor(position)
        tags = {PIPELINE_TAG: name, "lakestream/position": position[:200]}
        if unread:
            tags["lakestream/unread"] = ",".join(f"{p}+{n}" for p, n in sorted(unread.items()))[:200]
        return dg.RunRequest(run_key=f"{name}:{position}", tags=tags)

    return _sensor


def _unread(pipeline: Pipeline, layout: PipelineLayout) -> dict[str, int] | None:
    """The parts of the source with input past the last checkpoint (``None``: the source or
    the checkpoint cannot tell; the sensor compares positions with its cursor instead)."""
    offsets = checkpointed_offsets(layout)
    if offsets is None:
        return None
    unread = pipeline.source.unread(offsets.get(pipeline.source.name))
    return None if unread is None else {part: n for part, n in unread.items() if n > 0}
