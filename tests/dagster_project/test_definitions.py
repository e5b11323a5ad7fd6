"""The Dagster code location loads, and the example job materialises real Delta output."""

import dagster as dg

from assets import SparkResource, WarehouseResource
from assets.operation_jobs import OPERATIONS
from dagster_project import defs
from dagster_project.pipelines import running_sum_keyed, running_sum_unkeyed
from tests.helpers import sink_column, spark_jobs

# the tester's default selection (with source assets) warns of a beta parameter
EVERY = dg.AssetSelection.all() | dg.AssetSelection.all_asset_checks()
CHECKS = ("checkpoint_consistent", "global_tables_within_marker", "dead_letters_below_threshold")


def test_definitions_load():
    repo = defs.get_repository_def()
    assert repo.has_job("running_sum_job")
    keys = {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()}
    assert {"running_sum_seed", "running_sum", "running_sum_unkeyed", "running_sum/sums",
            "running_sum_unkeyed/sums", "item_totals", "item_totals/item_totals"} == keys
    graph = repo.asset_graph
    assert graph.get(dg.AssetKey(["running_sum", "sums"])).parent_keys == {dg.AssetKey("running_sum")}
    assert graph.get(dg.AssetKey("running_sum")).parent_keys == {dg.AssetKey("running_sum_seed")}
    checks = {(key.asset_key.to_user_string(), key.name) for key in graph.asset_check_keys}
    assert ("running_sum", "checkpoint_consistent") in checks and len(checks) == 9
    # the per-pipeline job runs the asset's checks after it
    assert len(repo.get_job("run_running_sum").asset_layer.asset_graph.asset_check_keys) == 3
    assert {s.name for s in repo.sensor_defs} == {
        "default_automation_condition_sensor", "running_sum_sensor", "running_sum_unkeyed_sensor",
        "item_totals_sensor"}


def test_examples_run_by_declarative_automation_once_the_seed_is_published():
    graph = defs.get_repository_def().asset_graph
    # the seed is published when asked, never by itself
    assert graph.get(dg.AssetKey("running_sum_seed")).automation_condition is None
    assert graph.get(dg.AssetKey("running_sum")).automation_condition.get_label() == "eager"
    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=EVERY)
        assert first.total_requested == 0  # the seed they read is missing
        instance.report_runless_asset_event(dg.AssetMaterialization("running_sum_seed"))
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=EVERY,
                                                   cursor=first.cursor)
        # item_totals materialised by a run that left its checks out: they run on their own
        instance.report_runless_asset_event(dg.AssetMaterialization("item_totals"))
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=EVERY,
                                                  cursor=second.cursor)
    examples = ("running_sum", "running_sum_unkeyed")
    assert _requested(second) == {*examples, *(f"{p}:{check}" for p in examples for check in CHECKS)}
    assert _requested(third) == {f"item_totals:{check}" for check in CHECKS}


def _requested(result) -> set[str]:
    return {key.to_user_string() for key in (r.key for r in result.results if r.true_subset.size)}


def test_running_sum_job_writes_the_example_sums(spark, warehouse):
    job = defs.resolve_job_def("running_sum_job")
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    jobs = spark_jobs(spark)
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, resources=resources)
        assert result.success
        again = job.execute_in_process(instance=instance, resources=resources)
        assert again.success
        materialisations = again.asset_materializations_for_node("running_sum")
        assert materialisations[0].metadata["batches"].value == 0  # nothing new the second time
    # driver mode on a local disk: the seed's publish, the batches, the metadata and the checks
    # all went through delta-rs (the running session would have run any job asked of Spark)
    assert spark_jobs(spark) == jobs

    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 3, 6, 1, 3, 6, 10]
    assert sink_column(spark, running_sum_unkeyed, warehouse, "total") == [1, 3, 6, 7, 9, 12, 16]
    first = {m.asset_key.to_user_string(): m.metadata
             for m in result.asset_materializations_for_node("running_sum")}
    run = first["running_sum"]
    assert run["batches"].value == 1 and run["rows_out"].value == 7
    assert (run["checkpoint_id"].value, run["last_batch_id"].value, run["source_lag"].value) == (1, 1, 0)
    sums = first["running_sum/sums"]
    assert sums["dagster/row_count"].value == 7 and run["dagster/row_count"].value == 7
    columns = {c.name: c.type for c in sums["dagster/column_schema"].schema.columns}
    assert {"x": "bigint", "y": "bigint", "total": "bigint"}.items() <= columns.items()
    preview = [record.data for record in sums["preview"].records]
    assert len(preview) == 7 and {"x": 1, "y": 0, "total": 1}.items() <= preview[0].items()
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 6 and all(check.passed for check in checks)


def _materialise(pipeline, instance, warehouse, **check_config):
    from assets import make_pipeline_checks
    from dagster_project.definitions import pipeline_assets

    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    run_config = {"ops": {f"{pipeline.id}_dead_letters_below_threshold": {"config": check_config}}} \
        if check_config else None
    result = dg.materialize([pipeline_assets[pipeline.id], *make_pipeline_checks(pipeline)],
                            instance=instance, resources=resources, run_config=run_config)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    return result.asset_materializations_for_node(pipeline.id)[0].metadata, checks


def test_pipeline_asset_runs_only_new_data_and_checks_itself(spark, warehouse):
    with dg.DagsterInstance.ephemeral() as instance:
        running_sum_keyed.publish(spark, [{"x": 1, "y": 0}, {"x": 2, "y": 0}], warehouse)
        first, checks = _materialise(running_sum_keyed, instance, warehouse)
        assert (first["rows_in"].value, first["source_lag"].value) == (2, 0)
        assert all(c.passed for c in checks.values()) and len(checks) == 3

        running_sum_keyed.publish(spark, [{"x": 5, "y": 0}], warehouse)
        second, _ = _materialise(running_sum_keyed, instance, warehouse)
        assert (second["rows_in"].value, second["batches"].value) == (1, 1)  # only the new record

        running_sum_keyed.publish(spark, [{"x": "bad", "y": 0}, {"x": 1, "y": 1}], warehouse)
        third, checks = _materialise(running_sum_keyed, instance, warehouse, max_dead_letter_ratio=0.1)
    dead = checks["dead_letters_below_threshold"]
    assert third["dead_letters"].value == 1 and not dead.passed
    assert dead.severity == dg.AssetCheckSeverity.WARN
    assert (third["first_batch_id"].value, third["last_batch_id"].value) == (3, 3)
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 3, 8, 1]


def test_shipped_instance_allows_one_run_per_pipeline(tmp_path):
    import shutil
    from pathlib import Path

    from assets import PIPELINE_TAG
    from dagster_project.definitions import pipeline_assets

    shutil.copy(Path(__file__).resolve().parents[2] / ".dagster_home" / "dagster.yaml", tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        config = instance.get_concurrency_config()
    assert config.pool_config.default_pool_limit == 1
    assert {"key": PIPELINE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in \
        config.run_queue_config.tag_concurrency_limits
    pools = {asset.op.pool for asset in pipeline_assets.values()}
    assert pools == {"lakestream_running_sum", "lakestream_running_sum_unkeyed"}
    # a check run alone waits for the pipeline's run: it reads the tables that run writes
    check_pools = {check.node_def.pool for check in defs.asset_checks or ()}
    assert check_pools == {"lakestream_running_sum", "lakestream_running_sum_unkeyed",
                           "lakestream_item_totals"}


def test_state_tables_are_assets_of_their_own(spark, warehouse):
    import ops as sp
    from assets import make_pipeline_asset

    sales = sp.read.from_callback("sales", schema={"title": "string", "price": "double"})
    pipeline = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
                      streams={"sales": sales})
    pipeline.publish(spark, [{"title": "A", "price": 1}, {"title": "A", "price": 2},
                             {"title": "B", "price": 3}], warehouse)
    asset = make_pipeline_asset(pipeline)
    assert {k.to_user_string() for k in asset.keys} == {"sold", "sold/sold"}
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([asset], instance=instance, resources={
            "spark": SparkResource(master="local[2]"), "warehouse": WarehouseResource(path=warehouse)})
    table = [m for m in result.asset_materializations_for_node("sold")
             if m.asset_key == dg.AssetKey(["sold", "sold"])]
    assert table[0].metadata["dagster/row_count"].value == 2
    rows = sorted((r.data["title"], r.data["n"]) for r in table[0].metadata["preview"].records)
    assert rows == [("A", 2), ("B", 1)]


def test_schedules_carry_valid_config_and_start_stopped():
    repo = defs.get_repository_def()
    for name in ("compact_nightly", "vacuum_weekly"):
        schedule = repo.get_schedule_def(name)
        job = repo.get_job(schedule.job_name)
        run_config = schedule.evaluate_tick(dg.build_schedule_context()).run_requests[0].run_config
        assert dg.validate_run_config(job, run_config)
        assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED


def test_every_operation_is_a_job_of_the_code_location_with_its_config():
    """Each row of the operations table is a one-op job ``dagster job execute -j <name>`` finds,
    its op ``<name>_op``, both described as the row says, its launchpad form the row's config
    class (fields, descriptions, defaults); and no operations job is left out of the table."""
    repo = defs.get_repository_def()
    tagged = {job.name for job in repo.get_all_jobs() if "lakestream/operation" in job.tags}
    assert tagged == {operation.name for operation in OPERATIONS}
    for operation in OPERATIONS:
        job = defs.resolve_job_def(operation.name)
        (node,) = job.nodes
        op = node.definition
        assert (op.name, op.description, job.description) == (
            f"{operation.name}_op", operation.description, operation.description)
        form = op.config_schema.config_type
        assert set(form.fields) == set(operation.config.model_fields), operation.name
        # a shape's key hashes its fields' names, types, descriptions and defaults
        assert form.key == operation.config.to_config_schema().config_type.key, operation.name


def test_deployment_selects_resources(monkeypatch):
    import pytest

    from assets import resources_for_deployment
    from ops import ConfigError

    monkeypatch.setenv("LAKESTREAM_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert resources_for_deployment("cluster")["spark"].master == "spark://127.0.0.1:7077"
    with pytest.raises(ConfigError, match="delta-connect-server is not published"):
        resources_for_deployment("connect")
    monkeypatch.delenv("LAKESTREAM_SPARK_MASTER")
    with pytest.raises(ConfigError, match="needs \\$LAKESTREAM_SPARK_MASTER"):
        resources_for_deployment("cluster")
    with pytest.raises(ConfigError, match="choose one of"):
        resources_for_deployment("mainframe")


def test_the_examples_poll_as_often_as_the_environment_says_and_refuse_a_bad_interval():
    import os
    import subprocess
    import sys

    def sensors_with(value: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", "from dagster_project import defs; print(sorted({s.name: "
             "s.minimum_interval_seconds for s in defs.get_repository_def().sensor_defs}.items()))"],
            env=dict(os.environ, LAKESTREAM_POLL_SECONDS=value), capture_output=True, text=True,
            timeout=120)

    assert "('running_sum_sensor', 4)" in sensors_with("5").stdout
    refused = sensors_with("soon")
    assert refused.returncode != 0
    assert "LAKESTREAM_POLL_SECONDS must be a whole number of seconds, at least 1; got 'soon'" in \
        refused.stderr
