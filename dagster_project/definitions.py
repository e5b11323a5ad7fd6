"""The composition root: every asset, job and resource of the project, built from factories."""


import dagster as dg

from assets import SparkResource, WarehouseResource, make_pipeline_asset

from .pipelines import EXAMPLES, SEED_ROWS


@dg.asset(group_name="pipelines", kinds={"delta"},
          description="Publishes the KX example's seven records to each example pipeline, once.")
def running_sum_seed(context: dg.AssetExecutionContext, spark: SparkResource,
                     warehouse: WarehouseResource) -> dg.MaterializeResult:
    session = spark.session()
    for pipeline in EXAMPLES:
        report = pipeline.publish(session, SEED_ROWS, warehouse.root, dedupe_id="kx-seed")
        context.log.info(f"published seed rows to {pipeline.name} (inbox version {report.version})")
    return dg.MaterializeResult(metadata={"records": len(SEED_ROWS)})


pipeline_assets = [make_pipeline_asset(p, deps=[running_sum_seed]) for p in EXAMPLES]

running_sum_job = dg.define_asset_job(
    "running_sum_job", selection=[running_sum_seed, *pipeline_assets],
    description="The KX running-sum example: publish the seed rows, run both pipelines.",
    # one process, one Spark session: steps in separate processes would each start a JVM
    executor_def=dg.in_process_executor)

defs = dg.Definitions(
    assets=[running_sum_seed, *pipeline_assets],
    jobs=[running_sum_job],
    resources={"spark": SparkResource(), "warehouse": WarehouseResource()},
    executor=dg.in_process_executor,
)
