"""Workload 5: what a Dagster-launched run costs when it finds no new data, and with one small
batch (the KX example's seven records), end to end.

*cold*: ``dagster job execute`` in a new process, as a schedule or a shell would launch it: Python
and Dagster start, the JVM starts, recovery, (the batch), exit. *warm*: the same job executed in a
process whose Spark session is already up, as with ``dagster dev``'s in-process executor
reusing a session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from assets import SparkResource, WarehouseResource
from dagster_project import defs
from dagster_project.pipelines import SEED_ROWS, running_sum_keyed

from _common import peak_memory

ROOT = Path(__file__).resolve().parents[1]
JOB = f"run_{running_sum_keyed.name}"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def cold_run(job: str, env: dict) -> dict:
    """``dagster job execute`` in a child process; wall time and the child tree's peak RSS."""
    result: dict = {}
    started = time.perf_counter()
    child = subprocess.Popen([str(Path(sys.executable).with_name("dagster")), "job", "execute",
                              "-m", "dagster_project", "-j", job], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with peak_memory(result, pid=child.pid):
        _, errors = child.communicate(timeout=900)
    result["seconds"] = time.perf_counter() - started
    assert child.returncode == 0, errors[-3000:]
    return result


def warm_run(spark, job, instance, resources) -> dict:
    result: dict = {}
    with peak_memory(result, spark):
        started = time.perf_counter()
        outcome = job.execute_in_process(run_config=QUIET, instance=instance, resources=resources)
        result["seconds"] = time.perf_counter() - started
    assert outcome.success
    return result


def overhead(spark, workdir: str) -> list[dict]:
    warehouse, home = f"{workdir}/overhead_wh", Path(workdir) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), LAKESTREAM_WAREHOUSE=warehouse,
               LAKESTREAM_SPARK_MASTER="local[2]", PYTHONPATH=str(ROOT))
    rows = [{"mode": "cold", "run": "first run: seed + both examples (creates tables)",
             **cold_run("running_sum_job", env)},
            {"mode": "cold", "run": "no new data", **cold_run(JOB, env)}]
    running_sum_keyed.publish(spark, SEED_ROWS, warehouse)
    rows.append({"mode": "cold", "run": "one batch of 7 records", **cold_run(JOB, env)})

    job = defs.resolve_job_def(JOB)
    resources = {"spark": SparkResource(master="local[2]", shuffle_partitions=2),
                 "warehouse": WarehouseResource(path=warehouse)}
    with dg.DagsterInstance.ephemeral() as instance:
        warm_run(spark, job, instance, resources)            # first in-process run: imports, plans
        rows.append({"mode": "warm", "run": "no new data", **warm_run(spark, job, instance, resources)})
        running_sum_keyed.publish(spark, SEED_ROWS, warehouse)
        rows.append({"mode": "warm", "run": "one batch of 7 records",
                     **warm_run(spark, job, instance, resources)})
    return rows
