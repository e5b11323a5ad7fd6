"""Workload 5: what a Dagster-launched run costs when it finds no new data, and with one small
batch (the KX example's seven records), end to end.

*cold*: ``dagster job execute`` in a new process, as a schedule or a shell would launch it: Python
and Dagster start, the JVM starts, recovery, (the batch), exit. *warm*: the same job executed in a
process whose Spark session is already up, as with ``dagster dev``'s in-process executor
reusing a session.

*first batches*: a new pipeline (the Kafka example's SQL state table, over a callback source)
runs batches of five records in a new process right after its Spark session is up: the first
creates the pipeline's tables and is the JVM's first Delta work, the later ones are what a
running pipeline pays. ``python bench/overhead.py --first-batches`` runs that part alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import dagster as dg
from _common import peak_memory

from assets import SparkResource, WarehouseResource
from dagster_project import defs
from dagster_project.pipelines import SEED_ROWS, running_sum_keyed

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
    return rows + first_batches(workdir)


FIRST_BATCHES = 4


def first_batches(workdir: str) -> list[dict]:
    """A new pipeline's first batch against its later ones, in a new process whose Spark session
    just came up (what the Kafka example's ``dagster job execute`` pays); ratio = first/later."""
    child = subprocess.run([sys.executable, __file__, "--first-batches", f"{workdir}/first_wh"],
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stderr[-3000:]
    seconds = json.loads(child.stdout.splitlines()[-1])
    later = median(seconds[1:])
    return [{"mode": "new process", "run": "new SQL state table: first batch of 5 records",
             "seconds": seconds[0]},
            {"mode": "new process", "run": f"the same: later batches (median of {len(seconds) - 1})",
             "seconds": later},
            {"mode": "new process", "run": "first / later (target <= 2)",
             "seconds": round(seconds[0] / later, 1)}]


def _run_first_batches(warehouse: str) -> None:
    """The child of :func:`first_batches`: prints each batch's ``run_once`` seconds as JSON."""
    import ops as sp
    from dagster_project.pipelines import ORDERS

    spark = sp.spark_session()
    orders = sp.read.from_callback("orders", schema={"item": "string", "qty": "long", "price": "double"})
    pipeline = sp.sql("""CREATE TABLE item_totals AS
        SELECT item, COUNT(*) AS orders, SUM(qty) AS qty, SUM(qty * price) AS revenue
        FROM orders GROUP BY item EMIT CHANGES""", streams={"orders": orders}).named("first_batches")
    seconds = []
    for _ in range(FIRST_BATCHES):  # bounded
        pipeline.publish(spark, ORDERS, warehouse)
        started = time.perf_counter()
        pipeline.run_once(spark, warehouse)
        seconds.append(round(time.perf_counter() - started, 3))
    print(json.dumps(seconds))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-batches"]:
        if len(sys.argv) > 2:
            _run_first_batches(sys.argv[2])
        else:
            with tempfile.TemporaryDirectory() as work:
                for row in first_batches(work):
                    print(f"{row['run']:<52} {row['seconds']:>8}")
