"""The shipped instance config shows the engine's progress in the run's logs, and the code
location loads without a deprecation, supersession, beta or preview warning."""

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[2]

# Load the code location as `dagster dev` does, resolving everything it would show, with every
# warning Dagster might give about the definitions turned into an error.
LOAD = """
import warnings
import dagster as dg
for category in (DeprecationWarning, dg.SupersessionWarning, dg.BetaWarning, dg.PreviewWarning):
    warnings.simplefilter("error", category)
import dagster_project
repo = dagster_project.defs.get_repository_def()
repo.get_all_jobs()  # resolves every asset job against the asset graph
repo.asset_graph.get_all_asset_keys()
print(len(repo.sensor_defs), "sensors", len(repo.schedule_defs), "schedules")
"""


def test_engine_logs_reach_the_run_event_log(tmp_path, capfd):
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", tmp_path)

    @dg.op
    def heartbeat():
        logging.getLogger("ops.runtime.heartbeat").info("batch 7 still running after 10 s")
        logging.getLogger("state.recovery").info("recovered at checkpoint 3")
        logging.getLogger("elsewhere").warning("not a logger the instance manages")

    @dg.job
    def beating():
        heartbeat()

    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        result = beating.execute_in_process(instance=instance)
        logged = {entry.user_message for entry in instance.all_logs(result.run_id)}
    assert {"batch 7 still running after 10 s", "recovered at checkpoint 3"} <= logged
    assert "not a logger the instance manages" not in logged
    # the level set on the engine's loggers leaves the console its event lines (DEBUG)
    assert "RUN_SUCCESS" in capfd.readouterr().err


def test_loading_the_code_location_warns_of_nothing(child_env, tmp_path):
    env = dict(child_env, DAGSTER_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]
    assert "4 sensors 2 schedules" in done.stdout


def test_a_materialisation_logs_the_engine_s_lines_once(spark, warehouse, tmp_path):
    from assets import SparkResource, WarehouseResource, make_pipeline_asset
    from dagster_project.pipelines import running_sum_keyed

    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", tmp_path)
    running_sum_keyed.publish(spark, [{"x": 1, "y": 0}, {"x": 2, "y": 1}], warehouse)
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        result = dg.materialize([make_pipeline_asset(running_sum_keyed)], instance=instance,
                                resources=resources)
        logged = [entry.user_message for entry in instance.all_logs(result.run_id)]
    # the engine's line for the batch (logger ops.runtime.run), and not the step's own too
    assert len([line for line in logged if "rows in" in line]) == 1, logged
    assert any(line.startswith("running_sum batch 1") for line in logged), logged
