"""The Dagster code location loads, and the example job materialises real Delta output."""

import dagster as dg

from assets import SparkResource, WarehouseResource
from dagster_project import defs
from dagster_project.pipelines import running_sum_keyed, running_sum_unkeyed
from tests.helpers import sink_column


def test_definitions_load():
    repo = defs.get_repository_def()
    assert repo.has_job("running_sum_job")
    keys = {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()}
    assert {"running_sum_seed", "running_sum", "running_sum_unkeyed"} <= keys


def test_running_sum_job_writes_the_example_sums(spark, warehouse):
    job = defs.resolve_job_def("running_sum_job")
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, resources=resources)
        assert result.success
        again = job.execute_in_process(instance=instance, resources=resources)
        assert again.success
        materialisations = again.asset_materializations_for_node("running_sum")
        assert materialisations[0].metadata["batches"].value == 0  # nothing new the second time

    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 3, 6, 1, 3, 6, 10]
    assert sink_column(spark, running_sum_unkeyed, warehouse, "total") == [1, 3, 6, 7, 9, 12, 16]
    first = result.asset_materializations_for_node("running_sum")[0].metadata
    assert first["batches"].value == 1 and first["rows_out"].value == 7
    assert first["checkpoint_id"].value == 1


def _materialise(asset, instance, warehouse, **config):
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    run_config = {"ops": {asset.op.name: {"config": config}}} if config else None
    result = dg.materialize([asset], instance=instance, resources=resources, run_config=run_config)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    return result.asset_materializations_for_node(asset.op.name)[0].metadata, checks


def test_pipeline_asset_runs_only_new_data_and_checks_itself(spark, warehouse):
    from dagster_project.definitions import pipeline_assets

    asset = pipeline_assets["running_sum"]
    with dg.DagsterInstance.ephemeral() as instance:
        running_sum_keyed.publish(spark, [{"x": 1, "y": 0}, {"x": 2, "y": 0}], warehouse)
        first, checks = _materialise(asset, instance, warehouse)
        assert (first["rows_in"].value, first["source_lag"].value) == (2, 0)
        assert all(c.passed for c in checks.values()) and len(checks) == 3

        running_sum_keyed.publish(spark, [{"x": 5, "y": 0}], warehouse)
        second, _ = _materialise(asset, instance, warehouse)
        assert (second["rows_in"].value, second["batches"].value) == (1, 1)  # only the new record

        running_sum_keyed.publish(spark, [{"x": "bad", "y": 0}, {"x": 1, "y": 1}], warehouse)
        third, checks = _materialise(asset, instance, warehouse, max_dead_letter_ratio=0.1)
    dead = checks["dead_letters_below_threshold"]
    assert third["dead_letters"].value == 1 and not dead.passed
    assert dead.severity == dg.AssetCheckSeverity.WARN
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
    assert table[0].metadata["rows"].value == 2
    assert all(c.passed for c in result.get_asset_check_evaluations())


def test_schedules_carry_valid_config_and_start_stopped():
    repo = defs.get_repository_def()
    for name in ("compact_nightly", "vacuum_weekly"):
        schedule = repo.get_schedule_def(name)
        job = repo.get_job(schedule.job_name)
        run_config = schedule.evaluate_tick(dg.build_schedule_context()).run_requests[0].run_config
        assert dg.validate_run_config(job, run_config)
        assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED


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
