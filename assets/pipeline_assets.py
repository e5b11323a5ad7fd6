"""Asset factory: any pipeline definition becomes a Dagster asset (its main sink), with checks."""


from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

import ops
from ops import BatchReport, DeltaSink, Pipeline, RunReport, TableSink
from state import PipelineLayout

from .checks import check_results, check_specs
from .resources import SparkResource, WarehouseResource
from .sensors import PIPELINE_TAG

if TYPE_CHECKING:  # dagster exports no public name for what define_asset_job returns
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


class PipelineRunConfig(dg.Config):
    """Launchpad config of a pipeline materialisation."""

    max_batches: int | None = Field(
        default=None, description="Stop after this many micro-batches (default: until drained)")
    max_dead_letter_ratio: float = Field(
        default=0.01, description="Dead letters / records read above which the check fails")
    mode: str | None = Field(
        default=None, description="driver, distributed or auto: where operators run "
                                  "(default: the pipeline's own setting)")


def make_pipeline_asset(pipeline: Pipeline, *, deps: Sequence[dg.AssetsDefinition | str] = (),
                        group_name: str = "pipelines",
                        dead_letter_severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.WARN
                        ) -> dg.AssetsDefinition:
    """An asset named after ``pipeline`` whose materialisation runs it until its source is drained,
    then checks the checkpoint, the global tables and the dead-letter ratio. Each state table
    the pipeline writes is an asset too (``<pipeline>/<table>``), materialised by the same run.

    The assets sit in pool ``lakestream_<name>``; the project's instance config limits every
    pool to one step at a time, so two runs never execute the same pipeline at once.

    >>> import ops as sp
    >>> prices = (sp.read.from_callback("ticks", schema={"sym": "string", "px": "double"})
    ...           .as_table("sym").write.to_table("latest")).named("prices")
    >>> sorted(key.to_user_string() for key in make_pipeline_asset(prices).keys)
    ['prices', 'prices/latest']
    """
    pipeline.layout()  # fails now, at definition time, if the pipeline has no or a bad name
    name = pipeline.id
    key = dg.AssetKey(name)

    state_tables = [sink for sink in pipeline.sinks if isinstance(sink, TableSink)]
    specs = [dg.AssetSpec(key, deps=list(deps), group_name=group_name, kinds={"spark", "delta"},
                          tags={PIPELINE_TAG: name},
                          description=f"Runs pipeline {name!r} over all new input "
                                      "(exactly-once).")]
    specs += [dg.AssetSpec(dg.AssetKey([name, table.name]), deps=[key],
                           group_name=group_name, kinds={"delta"},
                           description=f"State table {table.name!r}: latest value per key; "
                                       f"changes in {table.name}_changelog.")
              for table in state_tables]

    @dg.multi_asset(name=name, specs=specs, check_specs=check_specs(key),
                    pool=f"lakestream_{name}")
    def _materialise(context: dg.AssetExecutionContext, config: PipelineRunConfig,
                     spark: SparkResource, warehouse: WarehouseResource
                     ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        def progress(batch: BatchReport) -> None:
            context.log.info(
                f"batch {batch.batch_id} ({batch.mode}): {batch.rows_in} rows in, {batch.rows_out} out, "
                f"{batch.dead_letters} dead letters, {batch.rows_per_second:,.0f} rows/s"
                + (" (replayed)" if batch.replayed else ""))

        session = spark.session()
        report = pipeline.run_once(session, warehouse.root, max_batches=config.max_batches,
                                   progress=progress, mode=config.mode or spark.mode)
        context.log.info(f"{name}: {len(report.batches)} batch(es), checkpoint "
                         f"{report.checkpoint_id}, {report.seconds:.1f}s")
        metadata = run_metadata(pipeline, report, warehouse.root)
        lag = ops.describe_lag_by_part(session, pipeline, warehouse.root)
        metadata["source_lag"] = sum(lag.values())
        if len(lag) > 1 or pipeline.source.name not in lag:  # per partition (Kafka)
            metadata["source_lag_by_partition"] = dg.MetadataValue.json(lag)
        yield dg.MaterializeResult(asset_key=key, metadata=metadata)
        for table in state_tables:
            yield dg.MaterializeResult(
                asset_key=dg.AssetKey([name, table.name]),
                metadata=_table_metadata(session, table, pipeline.layout(warehouse.root)))
        yield from check_results(session, pipeline, report, warehouse.root,
                                 config.max_dead_letter_ratio, dead_letter_severity)

    return _materialise


def _table_metadata(session: SparkSession, table: TableSink, layout: PipelineLayout) -> dict:
    rows = len(table.read(session, layout))
    return {"rows": rows, "table": dg.MetadataValue.path(table.location(layout)),
            "changelog": dg.MetadataValue.path(table.changelog(layout))}


def make_pipeline_job(pipeline: Pipeline, asset: dg.AssetsDefinition
                      ) -> "UnresolvedAssetJobDefinition":
    """``run_<pipeline>``: materialises the pipeline's asset; tagged so the instance's run
    concurrency limit (one per pipeline) and the sensors can find its runs."""
    return dg.define_asset_job(
        f"run_{pipeline.id}", selection=[asset], tags={PIPELINE_TAG: pipeline.id},
        description=f"Run pipeline {pipeline.id!r} until its source is drained.",
        executor_def=dg.in_process_executor)


def run_metadata(pipeline: Pipeline, report: RunReport, warehouse: str) -> dict:
    """What the Dagster UI shows for a run."""
    layout = pipeline.layout(warehouse)
    metadata = {
        "batches": len(report.batches),
        "rows_in": report.rows_in,
        "rows_out": report.rows_out,
        "keys_touched": report.keys_touched,
        "modes": ", ".join(sorted({batch.mode for batch in report.batches})) or "none",
        "dead_letters": report.dead_letters,
        "checkpoint_id": report.checkpoint_id if report.checkpoint_id is not None else -1,
        "last_batch_id": report.last_batch_id or 0,
        "duration_s": round(report.seconds, 3),
        "rows_per_s": round(report.rows_in / report.seconds, 1) if report.seconds else 0.0,
        "state_table": dg.MetadataValue.path(layout.state),
        "dead_letter_table": dg.MetadataValue.path(layout.dead_letters),
    }
    for sink in pipeline.sinks:
        if isinstance(sink, (DeltaSink, TableSink)):
            metadata[f"sink_{sink.name}"] = dg.MetadataValue.path(sink.location(layout))
        if isinstance(sink, TableSink):
            metadata[f"changelog_{sink.name}"] = dg.MetadataValue.path(sink.changelog(layout))
    return metadata
