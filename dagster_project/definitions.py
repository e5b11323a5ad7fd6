"""The composition root: every asset, job, sensor, schedule and resource, built from factories."""


import dagster as dg

from assets import (
    SparkResource,
    WarehouseResource,
    make_continuous_job,
    make_maintenance_schedules,
    make_operation_jobs,
    make_pipeline_assets,
    make_pipeline_checks,
    make_pipeline_job,
    make_pipeline_sensor,
    needs_sensor,
    resources_for_deployment,
)

from .pipelines import EXAMPLES, SEED_ROWS, item_totals


@dg.asset(group_name="pipelines", kinds={"delta"},
          description="Publishes the KX example's seven records to each example pipeline, once.")
def running_sum_seed(context: dg.AssetExecutionContext, spark: SparkResource,
                     warehouse: WarehouseResource) -> dg.MaterializeResult:
    session = spark.lazy_session()  # a publish is a delta-rs append: no JVM
    for pipeline in EXAMPLES:
        report = pipeline.publish(session, SEED_ROWS, warehouse.root, dedupe_id="kx-seed")
        context.log.info(f"published seed rows to {pipeline.name} (inbox version {report.version})")
    return dg.MaterializeResult(metadata={"records": len(SEED_ROWS)})


# Every pipeline of the code location: the two KX examples, and the Kafka example (a state table
# over a topic, run with `python -m dagster_project.kafka_example`, or by its sensor on the
# topic's offsets when that is turned on). The examples read the inbox running_sum_seed writes:
# they depend on it, so they run by declarative automation once it is materialised (and by their
# sensors for what else is published to their inboxes).
PIPELINES = (*EXAMPLES, item_totals)
assets_by_pipeline = make_pipeline_assets(
    PIPELINES, deps={pipeline.id: [running_sum_seed] for pipeline in EXAMPLES})
pipeline_assets = {p.id: assets_by_pipeline[p.id] for p in EXAMPLES}
checks = [check for pipeline in PIPELINES for check in make_pipeline_checks(pipeline)]
jobs_by_pipeline = {p.id: make_pipeline_job(p, assets_by_pipeline[p.id]) for p in PIPELINES}
sensors = [make_pipeline_sensor(p, jobs_by_pipeline[p.id]) for p in PIPELINES
           if needs_sensor(p, PIPELINES)]
operation_jobs = make_operation_jobs(PIPELINES)
# live_<pipeline>: the pipeline run continuously until the run is terminated from the UI
live_jobs = [make_continuous_job(p) for p in PIPELINES]

running_sum_job = dg.define_asset_job(
    "running_sum_job", selection=[running_sum_seed, *pipeline_assets.values()],
    description="The KX running-sum example: publish the seed rows, run both pipelines.",
    # one process, one Spark session: steps in separate processes would each start a JVM
    executor_def=dg.in_process_executor)

defs = dg.Definitions(
    assets=[running_sum_seed, *assets_by_pipeline.values()],
    asset_checks=checks,
    jobs=[running_sum_job, *jobs_by_pipeline.values(), *live_jobs, *operation_jobs],
    sensors=sensors,
    schedules=make_maintenance_schedules(operation_jobs),
    resources=resources_for_deployment(),
    executor=dg.in_process_executor,
)
