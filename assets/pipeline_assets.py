"""Asset factory: any pipeline definition becomes a Dagster asset (its main sink)."""


from typing import Sequence

import dagster as dg
from pydantic import Field

from ops import BatchReport, DeltaSink, Pipeline, RunReport

from .resources import SparkResource, WarehouseResource


class PipelineRunConfig(dg.Config):
    """Launchpad config of a pipeline materialisation."""

    max_batches: int | None = Field(
        default=None, description="Stop after this many micro-batches (default: until drained)")


def make_pipeline_asset(pipeline: Pipeline, *, deps: Sequence[dg.AssetsDefinition | str] = (),
                        group_name: str = "pipelines") -> dg.AssetsDefinition:
    """An asset named after ``pipeline`` whose materialisation runs it until its source is drained.

    >>> running_sum_asset = make_pipeline_asset(running_sum_pipeline)
    """
    pipeline.layout()  # fails now, at definition time, if the pipeline has no name

    @dg.asset(name=pipeline.name, deps=list(deps), group_name=group_name, kinds={"spark", "delta"},
              description=f"Runs pipeline {pipeline.name!r} over all new input (exactly-once).")
    def _materialise(context: dg.AssetExecutionContext, config: PipelineRunConfig,
                     spark: SparkResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
        def progress(batch: BatchReport) -> None:
            context.log.info(
                f"batch {batch.batch_id}: {batch.rows_in} rows in, {batch.rows_out} out, "
                f"{batch.dead_letters} dead letters, {batch.rows_per_second:,.0f} rows/s"
                + (" (replayed)" if batch.replayed else ""))

        report = pipeline.run_once(spark.session(), warehouse.root,
                                   max_batches=config.max_batches, progress=progress)
        context.log.info(f"{pipeline.name}: {len(report.batches)} batch(es), checkpoint "
                         f"{report.checkpoint_id}, {report.seconds:.1f}s")
        return dg.MaterializeResult(metadata=run_metadata(pipeline, report, warehouse.root))

    return _materialise


def run_metadata(pipeline: Pipeline, report: RunReport, warehouse: str) -> dict:
    """What the Dagster UI shows for a run."""
    layout = pipeline.layout(warehouse)
    metadata = {
        "batches": len(report.batches),
        "rows_in": report.rows_in,
        "rows_out": report.rows_out,
        "keys_touched": report.keys_touched,
        "dead_letters": report.dead_letters,
        "checkpoint_id": report.checkpoint_id if report.checkpoint_id is not None else -1,
        "last_batch_id": report.last_batch_id or 0,
        "duration_s": round(report.seconds, 3),
        "state_table": dg.MetadataValue.path(layout.state),
        "dead_letter_table": dg.MetadataValue.path(layout.dead_letters),
    }
    for sink in pipeline.sinks:
        if isinstance(sink, DeltaSink):
            metadata[f"sink_{sink.name}"] = dg.MetadataValue.path(sink.location(layout))
    return metadata
