"""The composition root: every asset, job, sensor, schedule and resource, built from factories."""


import dagster as dg

from assets import (
    SparkResource,
    WarehouseResource,
    make_maintenance_schedules,
    make_operation_jobs,
    make_pipeline_asset,
    make_pipeline_job,
    make_pipeline_sensor,
    resources_for_deployment,
)

from .pipelines import EXAMPLES, SEED_ROWS, item_totals


@dg.asset(group_name="pipelines", kinds={"delta"},
          description="Publishes the KX example's seven records to each example pipeline, once.")
def running_sum_seed(context: dg.AssetExecutionContext, spark: SparkResource,
                     warehouse: WarehouseResource) -> dg.MaterializeResult:
    session = spark.session()
    for pipeline in EXAMPLES:
        report = pipeline.publish(session, SEED_ROWS, warehouse.root, dedupe_id="kx-seed")
        context.log.info(f"published seed rows to {pipeline.name} (inbox version {report.version})")
    return dg.MaterializeResult(metadata={"records": len(SEED_ROWS)})


pipeline_assets = {p.name: make_pipeline_asset(p, deps=[running_sum_seed]) for p in EXAMPLES}
pipeline_jobs = [make_pipeline_job(p, pipeline_assets[p.name]) for p in EXAMPLES]
sensors = [make_pipeline_sensor(p, job) for p, job in zip(EXAMPLES, pipeline_jobs)]

# The Kafka example (python -m dagster_project.kafka_example): a state table over a topic, run
# by its own job, and by a sensor on the topic's offsets when that is turned on.
kafka_asset = make_pipeline_asset(item_totals)
kafka_orders_job = make_pipeline_job(item_totals, kafka_asset)  # run_item_totals
sensors.append(make_pipeline_sensor(item_totals, kafka_orders_job))
operation_jobs = make_operation_jobs((*EXAMPLES, item_totals))

running_sum_job = dg.define_asset_job(
    "running_sum_job", selection=[running_sum_seed, *pipeline_assets.values()],
    description="The KX running-sum example: publish the seed rows, run both pipelines.",
    # one process, one Spark session: steps in separate processes would each start a JVM
    executor_def=dg.in_process_executor)

defs = dg.Definitions(
    assets=[running_sum_seed, *pipeline_assets.values(), kafka_asset],
    jobs=[running_sum_job, *pipeline_jobs, kafka_orders_job, *operation_jobs],
    sensors=sensors,
    schedules=make_maintenance_schedules(operation_jobs),
    resources=resources_for_deployment(),
    executor=dg.in_process_executor,
)
