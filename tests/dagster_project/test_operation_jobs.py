"""Operations jobs from the shell (``dagster job execute``), and reset/replay reproducing sinks."""

import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

import ops as sp
from assets import SparkResource, WarehouseResource, make_operation_jobs
from dagster_project import defs
from dagster_project.pipelines import running_sum_keyed
from state.faults import InjectedCrash, crash_at
from tests.helpers import sink_column

ROOT = Path(__file__).resolve().parents[2]
BATCHES = [[{"x": 1, "y": 0}, {"x": 2, "y": 1}], [{"x": 3, "y": 0}], [{"x": 4, "y": 1}, {"x": 5, "y": 0}]]


def dagster_job(job: str, config: dict | None, env: dict, tmp_path) -> str:
    """``dagster job execute -m dagster_project -j <job>``; returns its output, fails loudly."""
    command = [str(Path(sys.executable).with_name("dagster")), "job", "execute",
               "-m", "dagster_project", "-j", job]
    if config is not None:
        config_file = tmp_path / f"{job}.yaml"
        config_file.write_text(yaml.safe_dump(config))
        command += ["-c", str(config_file)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "RUN_SUCCESS" in output, output[-4000:]
    return output


def dagster_job_in_process(job: str, config: dict, spark, env: dict) -> None:
    """The same job with the same run config, executed by Dagster in this process, under the
    project's instance config (``$DAGSTER_HOME`` of ``env``), on the test's own Spark session,
    against ``env``'s warehouse. For the jobs whose shell run would only repeat the command-line
    path the shell runs here take already, each a cold Python and JVM (~20 s)."""
    resources = {"spark": SparkResource(master=spark.sparkContext.master, shuffle_partitions=int(
                     spark.conf.get("spark.sql.shuffle.partitions"))),
                 "warehouse": WarehouseResource(path=env["LAKESTREAM_WAREHOUSE"])}
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        result = defs.resolve_job_def(job).execute_in_process(
            run_config=config, instance=instance, resources=resources)
        assert result.success
        assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.SUCCESS


@pytest.fixture
def dagster_env(child_env, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return dict(child_env, DAGSTER_HOME=str(home))


def _config(op: str, **values) -> dict:
    return {"ops": {f"{op}_op": {"config": values}}}


def test_operations_jobs_from_the_shell(spark, warehouse, dagster_env, tmp_path):
    for rows in BATCHES:  # three runs: checkpoints 1, 2, 3
        running_sum_keyed.publish(spark, rows, warehouse)
        running_sum_keyed.run_once(spark, warehouse)
    totals = sink_column(spark, running_sum_keyed, warehouse, "total")
    assert totals == [1, 2, 4, 6, 9]
    state_before = sp.read_state(spark, running_sum_keyed, "running_sum", warehouse=warehouse)

    described = dagster_job("describe", _config("describe", pipeline="running_sum"), dagster_env, tmp_path)
    assert "running_sum: checkpoint 3 (batch 3, epoch 0); source lag 0" in described

    dagster_job_in_process("reset_to_checkpoint", _config(
        "reset_to_checkpoint", pipeline="running_sum", checkpoint_id=1), spark, dagster_env)
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 2]
    at_one = sp.read_state(spark, running_sum_keyed, "running_sum", warehouse=warehouse)
    assert dict(zip(at_one["key"], at_one["value"])) == {0: 1, 1: 2}

    rerun = running_sum_keyed.run_once(spark, warehouse)  # the same input again, same result
    assert rerun.rows_in == 3
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == totals

    with pytest.raises(sp.StreamError, match="checkpoint 2 was abandoned by an earlier reset"):
        sp.reset_to_checkpoint(spark, running_sum_keyed, 2, warehouse)
    dagster_job_in_process("replay", _config("replay", pipeline="running_sum", checkpoint_id=1),
                           spark, dagster_env)
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == totals
    state_after = sp.read_state(spark, running_sum_keyed, "running_sum", warehouse=warehouse)
    assert state_after[["key", "value"]].equals(state_before[["key", "value"]])

    dagster_job_in_process("compact", _config("compact", pipeline="all"), spark, dagster_env)
    compacted = sp.read_state(spark, running_sum_keyed, "running_sum", warehouse=warehouse)
    assert compacted[["key", "value"]].equals(state_before[["key", "value"]])
    dagster_job_in_process("vacuum", _config("vacuum", pipeline="running_sum", retention_hours=0),
                           spark, dagster_env)
    # Recovery from the shell: a fresh process that knows only what the warehouse holds.
    dagster_job("recover", _config("recover", pipeline="running_sum"), dagster_env, tmp_path)
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == totals
    assert sp.checkpoint_problems(spark, running_sum_keyed, warehouse) == []


def test_unknown_pipeline_is_refused_by_name(dagster_env, tmp_path):
    command = [str(Path(sys.executable).with_name("dagster")), "job", "execute", "-m",
               "dagster_project", "-j", "describe", "-c", str(tmp_path / "c.yaml")]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(_config("describe", pipeline="nope")))
    done = subprocess.run(command, cwd=ROOT, env=dagster_env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert ("unknown pipeline 'nope'; choose one of "
            "['running_sum', 'running_sum_unkeyed', 'item_totals', 'all']") in done.stdout + done.stderr


def test_discard_plans_job_drops_what_no_checkpoint_covers(spark, warehouse, dagster_env):
    running_sum_keyed.publish(spark, BATCHES[0], warehouse)
    running_sum_keyed.run_once(spark, warehouse)                                  # checkpoint 1
    running_sum_keyed.publish(spark, BATCHES[1], warehouse)
    with crash_at("after_sink_write", nth=2), pytest.raises(InjectedCrash):  # console, then Delta
        running_sum_keyed.run_once(spark, warehouse)  # batch 2 planned and written, not checkpointed
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 2, 4]

    config = _config("discard_plans", pipeline="running_sum")
    dagster_job_in_process("discard_plans", config, spark, dagster_env)
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 2]   # batch 2's rows gone
    assert running_sum_keyed.run_once(spark, warehouse).rows_in == 1            # planned again
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 2, 4]

    resources = {"spark": SparkResource(master=spark.sparkContext.master, shuffle_partitions=2),
                 "warehouse": WarehouseResource(path=warehouse)}
    again = defs.resolve_job_def("discard_plans").execute_in_process(
        run_config=config, resources=resources, raise_on_error=False)
    assert not again.success
    assert "there is nothing to discard" in again.failure_data_for_node("discard_plans_op").error.message


def test_migrate_state_job_applies_a_declared_migration(spark, warehouse):
    """The job runs a migration declared in code (its transform is a function), and a refused
    one fails the run with the reason, having written nothing."""
    from tests.ops.runtime.migration_child import version_1, version_2

    version_1().publish(spark, BATCHES[0], warehouse)
    version_1().run_once(spark, warehouse)
    to_total = sp.Migration(rename={"sum": "total"}, transform={"total": float}, name="to_total")
    (job,) = [job for job in make_operation_jobs([version_2()], migrations={"to_total": to_total})
              if job.name == "migrate_state"]
    resources = {"spark": SparkResource(master=spark.sparkContext.master, shuffle_partitions=2),
                 "warehouse": WarehouseResource(path=warehouse)}
    refused = job.execute_in_process(
        run_config=_config("migrate_state", pipeline="changing", rename={"sum": "total"}),
        resources=resources, raise_on_error=False)
    assert not refused.success
    assert "give transform={'total': fn}" in refused.failure_data_for_node(
        "migrate_state_op").error.message
    done = job.execute_in_process(
        run_config=_config("migrate_state", pipeline="changing", migration="to_total"),
        resources=resources)
    assert done.success
    state = sp.read_state(spark, version_2(), "total", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == {0: 1.0, 1: 2.0}
    status = sp.describe(spark, version_2(), warehouse)
    assert status.migration == "to_total" and status.state_changes == []
    as_it_was = sp.describe(spark, version_1(), warehouse)  # the old code, after the migration
    assert [change.split(":")[0] for change in as_it_was.state_changes] == ["'total'"]
    assert "  the pipeline as defined now would stop: its state differs" in as_it_was.lines()


def test_state_offline_jobs_bootstrap_export_and_import(spark, warehouse, tmp_path):
    from tests.ops.runtime.migration_child import version_1

    pipeline = version_1()
    (bootstrap, export, import_) = [
        job for name in ("bootstrap_state", "export_state", "import_state")
        for job in make_operation_jobs([pipeline]) if job.name == name]
    seed, folder, there = (str(tmp_path / name) for name in ("seed", "export", "there"))
    spark.createDataFrame([(0, 10), (1, 20)], "y long, total long").write.format("delta").save(seed)

    def resources(root):
        return {"spark": SparkResource(master=spark.sparkContext.master, shuffle_partitions=2),
                "warehouse": WarehouseResource(path=root)}

    assert bootstrap.execute_in_process(run_config=_config(
        "bootstrap_state", pipeline="changing", operator="sum", table=seed, value="total"),
        resources=resources(warehouse)).success
    assert export.execute_in_process(run_config=_config(
        "export_state", pipeline="changing", path=folder), resources=resources(warehouse)).success
    bad = import_.execute_in_process(run_config=_config(
        "import_state", pipeline="changing", path=folder, positions="{nope"),
        resources=resources(there), raise_on_error=False)
    assert "positions is not a JSON object" in bad.failure_data_for_node(
        "import_state_op").error.message
    assert import_.execute_in_process(run_config=_config(
        "import_state", pipeline="changing", path=folder, positions='{"publish": null}'),
        resources=resources(there)).success
    state = sp.read_state(spark, pipeline, "sum", warehouse=there)
    assert dict(zip(state["key"], state["value"])) == {0: 10, 1: 20}
