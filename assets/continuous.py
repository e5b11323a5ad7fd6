"""A job per pipeline that runs it continuously until terminated (``live_<pipeline>``).

The run keeps one Spark session, the state cache and the plans warm, and runs a batch whenever
the source has new input (``pipeline.run_continuously``). It logs a line per batch, and reports
the pipeline's asset materialised at checkpoints (at most one every ``materialize_every_s``, so
a run of a batch a second does not bury the asset's history). "Terminate" in the Dagster UI
sends the run's process SIGINT: the batch in flight and its checkpoint finish, then the run
ends successfully.

Only one writer runs a pipeline at a time: the run carries the pipeline's tag (the instance's
tag concurrency limit allows one such run, and the pipeline's sensor skips while one is in
flight) and its op sits in the pipeline's pool (one step at a time, for untagged runs too).
"""

import contextlib
import time

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

import ops
from ops import BatchReport, CheckpointReport, Pipeline

from .resources import SparkResource, WarehouseResource
from .sensors import PIPELINE_TAG


class ContinuousRunConfig(dg.Config):
    """Launchpad config of a continuous run."""

    trigger: str = Field(default="500ms",
                         description="How often an idle run polls its source ('500ms', '2s')")
    max_seconds: float | None = Field(
        default=None, description="Stop after this long (default: run until terminated)")
    materialize_every_s: float = Field(
        default=10.0, description="At most one asset materialisation per this many seconds "
                                  "(each at a checkpoint)")
    allow_dropped_state: bool = Field(
        default=False, description="Drop the state no operator of the pipeline keeps now "
                                   "instead of failing (a new checkpoint)")
    metrics_port: int | None = Field(
        default=None, description="Serve the run's Prometheus metrics at "
                                  "http://<metrics_host>:<port>/metrics (0: a free port, logged; "
                                  "default: no endpoint)")
    metrics_host: str = Field(default="127.0.0.1",
                              description="The address the metrics endpoint listens on")


def make_continuous_job(pipeline: Pipeline) -> dg.JobDefinition:
    """``live_<pipeline>``: runs ``pipeline`` continuously until terminated.

    >>> import ops as sp
    >>> prices = (sp.read.from_callback("ticks", schema={"sym": "string", "px": "double"})
    ...           .as_table("sym").write.to_table("latest")).named("prices")
    >>> make_continuous_job(prices).name
    'live_prices'
    """
    name = pipeline.id

    @dg.op(name=f"{name}_continuously", pool=f"lakestream_{name}",
           description=f"Runs {name!r} continuously: a batch whenever its source has new input.")
    def run_continuously(context: dg.OpExecutionContext, config: ContinuousRunConfig,
                         spark: SparkResource, warehouse: WarehouseResource) -> None:
        context.log.info(f"{name}: starting Spark (the first start in a process takes 10-30 s)")
        session = spark.session()
        reporter = _Reporter(context, pipeline, session, warehouse.root, config.materialize_every_s)
        context.log.info(f"{name}: running continuously, polling every {config.trigger}; "
                         "terminate the run to stop it after the batch in flight")
        metrics = ops.RunMetrics() if config.metrics_port is not None else None
        with (metrics.serving(config.metrics_port or 0, config.metrics_host) if metrics
              else contextlib.nullcontext()) as endpoint:
            if endpoint is not None:
                context.log.info(f"{name}: Prometheus metrics at {endpoint.url}")
            report = pipeline.run_continuously(
                session, warehouse.root, trigger=config.trigger, max_seconds=config.max_seconds,
                progress=reporter.batch, checkpointed=reporter.checkpoint, mode=spark.mode,
                allow_dropped_state=config.allow_dropped_state, metrics=metrics)
        reporter.materialize(report.checkpoint_id, report.last_batch_id, force=True)
        context.log.info(f"{name}: stopped after {report.totals.batches} batch(es), "
                         f"{report.rows_in} rows, checkpoint {report.checkpoint_id}")

    @dg.job(name=f"live_{name}", tags={PIPELINE_TAG: name}, executor_def=dg.in_process_executor,
            description=f"Run pipeline {name!r} continuously until terminated.")
    def live() -> None:
        run_continuously()

    return live


class _Reporter:
    """Turns a continuous run's batches into log lines and its checkpoints into (throttled)
    materialisations of the pipeline's asset."""

    def __init__(self, context: dg.OpExecutionContext, pipeline: Pipeline,
                 session: SparkSession, warehouse: str, every_s: float):
        self.context, self.pipeline, self.session = context, pipeline, session
        self.warehouse, self.every_s = warehouse, every_s
        self.last_reported = 0.0
        self.rows_since = 0

    def batch(self, batch: BatchReport) -> None:
        self.context.log.info(
            f"batch {batch.batch_id}: {batch.rows_in} rows in, {batch.rows_out} out, "
            f"{batch.keys} keys, {batch.seconds:.2f} s, {batch.behind} planned batch(es) behind"
            + (" (replayed)" if batch.replayed else ""))

    def checkpoint(self, checkpoint: CheckpointReport) -> None:
        self.rows_since += checkpoint.rows_in
        self.materialize(checkpoint.checkpoint_id, checkpoint.batch_id)

    def materialize(self, checkpoint_id: int | None, batch_id: int | None,
                    force: bool = False) -> None:
        now = time.monotonic()
        if checkpoint_id is None or (not force and now - self.last_reported < self.every_s):
            return
        lag = ops.describe_lag_by_part(self.session, self.pipeline, self.warehouse)
        self.context.log_event(dg.AssetMaterialization(
            asset_key=self.pipeline.id,
            description=f"checkpoint {checkpoint_id} of a continuous run",
            metadata={"checkpoint_id": checkpoint_id, "last_batch_id": batch_id or 0,
                      "rows_since_last_report": self.rows_since,
                      "source_lag": sum(lag.values())}))
        self.last_reported, self.rows_since = now, 0
