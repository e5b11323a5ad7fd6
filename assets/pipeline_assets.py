"""Asset factory: any pipeline definition becomes a Dagster asset, with one asset per sink
downstream of it, all materialised by the one run of the pipeline."""


from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

import ops
from ops import BatchReport, DeltaSink, KafkaSink, Pipeline, RunReport, Sink, TableSink

from .lineage import asset_sinks, sink_key, upstream_keys
from .resources import SparkResource, WarehouseResource
from .sensors import PIPELINE_TAG
from .tables import sink_metadata

if TYPE_CHECKING:  # dagster exports no public name for what define_asset_job returns
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

AssetDep = dg.AssetsDefinition | dg.AssetKey | str
ENGINE_LOGGER = "ops"  # the engine logs on ops.* (and state.*)


class PipelineRunConfig(dg.Config):
    """Launchpad config of a pipeline materialisation (the dead-letter threshold is its check's
    config: :class:`~assets.checks.DeadLetterCheckConfig`)."""

    max_batches: int | None = Field(
        default=None, description="Stop after this many micro-batches (default: until drained)")
    mode: str | None = Field(
        default=None, description="driver, distributed or auto: where operators run "
                                  "(default: the pipeline's own setting)")
    allow_dropped_state: bool = Field(
        default=False, description="Drop the state no operator of the pipeline keeps now "
                                   "instead of failing (a new checkpoint; see the docs, "
                                   "'Changing a running pipeline')")


def make_pipeline_asset(pipeline: Pipeline, *, deps: Sequence[AssetDep] = (),
                        group_name: str = "pipelines",
                        automation_condition: dg.AutomationCondition | None = None
                        ) -> dg.AssetsDefinition:
    """An asset named after ``pipeline`` whose materialisation runs it until its source is
    drained. Each sink is an asset downstream of it, materialised by the same run: a state
    table or a Delta sink ``<pipeline>/<sink>`` (kind delta), a Kafka sink's topic (kind kafka:
    the run writes the topic, exactly once, so Dagster materialises it rather than observing
    an external asset). The asset's checks come from :func:`~assets.checks.make_pipeline_checks`.

    The assets sit in pool ``lakestream_<name>``; the project's instance config limits every
    pool to one step at a time, so two runs never execute the same pipeline at once.

    >>> import ops as sp
    >>> prices = (sp.read.from_callback("ticks", schema={"sym": "string", "px": "double"})
    ...           .as_table("sym").write.to_table("latest").write.to_console()).named("prices")
    >>> sorted(key.to_user_string() for key in make_pipeline_asset(prices).keys)
    ['prices', 'prices/latest']
    """
    pipeline.layout()  # fails now, at definition time, if the pipeline has no or a bad name
    name = pipeline.id
    specs = [dg.AssetSpec(dg.AssetKey(name), deps=list(deps), group_name=group_name,
                          kinds={"spark", "delta"}, tags={PIPELINE_TAG: name},
                          automation_condition=automation_condition,
                          description=f"Runs pipeline {name!r} over all new input "
                                      "(exactly-once).")]
    specs += [_sink_spec(pipeline, sink, group_name) for sink in asset_sinks(pipeline)]

    @dg.multi_asset(name=name, specs=specs, pool=f"lakestream_{name}")
    def _materialise(context: dg.AssetExecutionContext, config: PipelineRunConfig,
                     spark: SparkResource, warehouse: WarehouseResource
                     ) -> Iterator[dg.MaterializeResult]:
        session = _session(context, spark)
        report = pipeline.run_once(session, warehouse.root, max_batches=config.max_batches,
                                   progress=_progress(context), mode=config.mode or spark.mode,
                                   allow_dropped_state=config.allow_dropped_state)
        context.log.info(f"{name}: {len(report.batches)} batch(es), checkpoint "
                         f"{report.checkpoint_id}, {report.seconds:.1f}s")
        layout = pipeline.layout(warehouse.root)
        outputs = {sink.name: sink_metadata(session, sink, layout, report)
                   for sink in asset_sinks(pipeline)}
        metadata = run_metadata(pipeline, report, warehouse.root)
        metadata.update(_source_lag(session, pipeline, warehouse.root))
        metadata.update(_main_output(pipeline, outputs))
        yield dg.MaterializeResult(asset_key=dg.AssetKey(name), metadata=metadata)
        for sink in asset_sinks(pipeline):
            yield dg.MaterializeResult(asset_key=sink_key(pipeline, sink),
                                       metadata=outputs[sink.name])

    return _materialise


def make_pipeline_assets(pipelines: Sequence[Pipeline], *,
                         deps: Mapping[str, Sequence[AssetDep]] | None = None,
                         group_name: str = "pipelines", warehouse: str | None = None
                         ) -> dict[str, dg.AssetsDefinition]:
    """:func:`make_pipeline_asset` for each of ``pipelines``, by name, with the lineage between
    them: a pipeline that reads another's sink (a state table's changelog, a Delta sink, a Kafka
    sink's topic; see :mod:`assets.lineage`) depends on that sink's asset, besides its ``deps``
    (by pipeline name). A pipeline with any upstream asset runs when one is updated
    (``AutomationCondition.eager()``, evaluated by the default automation condition sensor).
    Sink locations are resolved under ``warehouse`` (default: the configured one).

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    >>> sold = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
    ...               catalog=catalog)
    >>> top = sp.sql("CREATE TABLE top AS SELECT n, COUNT(*) AS titles FROM sold GROUP BY n",
    ...              catalog=catalog)
    >>> assets = make_pipeline_assets([sold, top])
    >>> [dep.asset_key.to_user_string() for dep in assets["top"].specs_by_key[dg.AssetKey("top")].deps]
    ['sold/sold']
    """
    made = {}
    for pipeline in pipelines:
        upstream = [*(deps or {}).get(pipeline.id, ()), *upstream_keys(pipeline, pipelines, warehouse)]
        condition = dg.AutomationCondition.eager() if upstream else None
        made[pipeline.id] = make_pipeline_asset(pipeline, deps=upstream, group_name=group_name,
                                                automation_condition=condition)
    return made


def _sink_spec(pipeline: Pipeline, sink: Sink, group_name: str) -> dg.AssetSpec:
    key = sink_key(pipeline, sink)
    upstream = [dg.AssetKey(pipeline.id)]
    if isinstance(sink, KafkaSink):
        return dg.AssetSpec(key, deps=upstream, group_name=group_name, kinds={"kafka"},
                            metadata={"topic": sink.topic, "bootstrap": sink.connection.bootstrap,
                                      "delivery": sink.delivery},
                            description=f"Kafka topic {sink.topic!r}: one transaction per batch "
                                        f"({sink.delivery.replace('_', '-')}).")
    if isinstance(sink, TableSink):
        return dg.AssetSpec(key, deps=upstream, group_name=group_name, kinds={"delta"},
                            description=f"State table {sink.name!r}: latest value per key; "
                                        f"changes in {sink.name}_changelog.")
    assert isinstance(sink, DeltaSink)
    return dg.AssetSpec(key, deps=upstream, group_name=group_name, kinds={"delta"},
                        description=f"Delta table {sink.name!r}: every output row, appended "
                                    "once per batch.")


def _session(context: dg.AssetExecutionContext, spark: SparkResource) -> SparkSession:
    """The Spark session, started only if the run needs it (a driver-mode run on a local disk
    or an object store does not). When the engine's log is not copied into the run's, the run
    says so as one starts: a sensor's run would otherwise show nothing for the 5-20 s the JVM
    takes."""
    if _engine_logged(context):  # the engine logs the start itself
        return spark.lazy_session()
    return spark.lazy_session(
        on_start=lambda: context.log.info("starting Spark (this run needs it; 5-20 s)…"))


def _progress(context: dg.AssetExecutionContext) -> Callable[[BatchReport], None] | None:
    """A line per batch in the run's log, unless the engine's own line per batch is there."""
    if _engine_logged(context):
        return None

    def progress(batch: BatchReport) -> None:
        context.log.info(
            f"batch {batch.batch_id} ({batch.mode}): {batch.rows_in} rows in, {batch.rows_out} out, "
            f"{batch.dead_letters} dead letters, {batch.rows_per_second:,.0f} rows/s"
            + (" (replayed)" if batch.replayed else ""))

    return progress


def _engine_logged(context: dg.AssetExecutionContext) -> bool:
    """Whether the instance copies the engine's log (``ops.*``: Spark start, a line per batch,
    heartbeats) into the run's: ``python_logs.managed_python_loggers`` in ``dagster.yaml``."""
    return ENGINE_LOGGER in context.instance.managed_python_loggers


def _source_lag(session: SparkSession, pipeline: Pipeline, warehouse: str) -> dict:
    lag = ops.describe_lag_by_part(session, pipeline, warehouse)
    metadata: dict = {"source_lag": sum(lag.values())}
    if len(lag) > 1 or pipeline.source.name not in lag:  # per partition (Kafka)
        metadata["source_lag_by_partition"] = dg.MetadataValue.json(lag)
    return metadata


def _main_output(pipeline: Pipeline, outputs: Mapping[str, dict]) -> dict:
    """The row count, schema and preview of the pipeline's first stored sink: the pipeline asset
    stands for its main output, as the asset a user opens first."""
    for sink in pipeline.sinks:
        if isinstance(sink, (TableSink, DeltaSink)):
            return {name: value for name, value in outputs[sink.name].items()
                    if name.startswith("dagster/") or name == "preview"}
    return {}


def make_pipeline_job(pipeline: Pipeline, asset: dg.AssetsDefinition
                      ) -> "UnresolvedAssetJobDefinition":
    """``run_<pipeline>``: materialises the pipeline's asset and runs its checks; tagged so the
    instance's run concurrency limit (one per pipeline) and the sensors can find its runs."""
    return dg.define_asset_job(
        f"run_{pipeline.id}", selection=[asset], tags={PIPELINE_TAG: pipeline.id},
        description=f"Run pipeline {pipeline.id!r} until its source is drained.",
        executor_def=dg.in_process_executor)


def run_metadata(pipeline: Pipeline, report: RunReport, warehouse: str) -> dict:
    """What the Dagster UI shows for a run. ``first_batch_id..last_batch_id`` are the batches it
    ran (the dead-letter check reads them back)."""
    layout = pipeline.layout(warehouse)
    last = report.last_batch_id or 0
    metadata = {
        "batches": len(report.batches),
        "rows_in": report.rows_in,
        "rows_out": report.rows_out,
        "keys_touched": report.keys_touched,
        "modes": ", ".join(sorted({batch.mode for batch in report.batches})) or "none",
        "dead_letters": report.dead_letters,
        "checkpoint_id": report.checkpoint_id if report.checkpoint_id is not None else -1,
        "first_batch_id": last - report.totals.batches + 1 if report.totals.batches else last,
        "last_batch_id": last,
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
