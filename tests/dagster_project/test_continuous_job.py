"""The continuous job from the shell: ``dagster job execute -j live_running_sum`` runs batches as
input arrives, materialises at checkpoints, serves its Prometheus metrics, and stops cleanly on
the SIGINT a Dagster "terminate" sends, with its run a success."""

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import yaml

from assets import PIPELINE_TAG
from dagster_project import defs
from dagster_project.pipelines import running_sum_keyed
from state import CheckpointLog
from tests.helpers import scraped, sink_column

ROOT = Path(__file__).resolve().parents[2]


def _wait_until(condition, seconds, what, output):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what}: {output()[-3000:]}"
        time.sleep(0.2)


def test_the_job_carries_the_pipeline_tag_so_sensors_and_limits_see_it():
    job = defs.resolve_job_def("live_running_sum")
    assert job.tags[PIPELINE_TAG] == "running_sum"


def test_live_job_runs_new_input_and_stops_on_sigint(spark, warehouse, child_env, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    config = tmp_path / "live.yaml"
    config.write_text(yaml.safe_dump({"ops": {"running_sum_continuously": {"config": {
        "trigger": "200ms", "max_seconds": 240, "materialize_every_s": 0.0, "metrics_port": 0}}}}))
    log = tmp_path / "live.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster")), "job", "execute", "-m",
             "dagster_project", "-j", "live_running_sum", "-c", str(config)],
            cwd=ROOT, env=dict(child_env, DAGSTER_HOME=str(home)), stdout=out,
            stderr=subprocess.STDOUT, text=True)
    try:
        output = log.read_text
        running_sum_keyed.publish(spark, [{"x": 1, "y": 0}, {"x": 2, "y": 1}], warehouse)
        _wait_until(lambda: "batch 1:" in output(), 180, "first batch", output)
        running_sum_keyed.publish(spark, [{"x": 3, "y": 0}], warehouse)
        _wait_until(lambda: "batch 2:" in output(), 60, "second batch", output)
        url = re.search(r"Prometheus metrics at (http://127\.0\.0\.1:\d+/metrics)", output()).group(1)
        rows_in = ("lakestream_rows_in_total", (("pipeline", "running_sum"),))
        _wait_until(lambda: scraped(url).get(rows_in) == 3, 60, "3 rows in the run's metrics",
                    lambda: str(scraped(url)))
        _wait_until(lambda: output().count("ASSET_MATERIALIZATION") >= 2, 60,
                    "materialisations at checkpoints", output)
        process.send_signal(signal.SIGINT)  # what Dagster's "terminate" sends the run
        assert process.wait(120) == 0, output()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert "received SIGINT" in text and "RUN_SUCCESS" in text, text[-4000:]
    assert "batch 1: 2 rows in, 2 out, 2 keys" in text
    assert CheckpointLog(spark, running_sum_keyed.layout(warehouse)).latest().batch_id == 2
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 2, 4]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_run_records()
        assert run.dagster_run.status == dg.DagsterRunStatus.SUCCESS
        assert run.dagster_run.tags[PIPELINE_TAG] == "running_sum"
