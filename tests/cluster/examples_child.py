"""Child process of the cluster test: run the example pipelines on the Spark that the environment
names (``LAKESTREAM_DEPLOYMENT``, ``LAKESTREAM_SPARK_MASTER``, ``LAKESTREAM_WAREHOUSE``), exactly
as a user would. Nothing here knows whether that is local mode or a cluster.

1. The Dagster job ``running_sum_job`` (the KX running-sum examples), executed in process.
2. Two state tables from SQL, each fed twice so the second run reads state back: ksqlDB's movie
   tickets (GROUP BY, EMIT CHANGES) and a tumbling window with grace (EMIT FINAL).

``LAKESTREAM_MODE`` says where operators run (the job's Spark resource reads it too);
``EXAMPLES_PART`` runs the ``first`` or ``second`` half of the input only, so a test can change
the cluster between them. Prints one JSON line describing the Spark it ran on (and, with
``EXAMPLES_PROBE_PATH``, whether an executor sees that path).
"""

import json
import logging
import os
import sys

import dagster as dg

import ops as sp
from dagster_project import defs

CLICKS = {"page": "string", "ts": "timestamp", "x": "long"}
SALES = {"title": "string", "ticket_total_value": "double"}


def state_table_examples() -> list[tuple[sp.Pipeline, list[list[dict]]]]:
    tickets = sp.sql("CREATE TABLE movie_tickets_sold AS SELECT title, COUNT(ticket_total_value) "
                     "AS tickets_sold, SUM(ticket_total_value) AS revenue FROM sales GROUP BY title "
                     "EMIT CHANGES", streams={"sales": sp.read.from_callback("sales", schema=SALES)})
    minutes = sp.sql("CREATE TABLE page_minutes AS SELECT page, COUNT(*) AS views, SUM(x) AS total "
                     "FROM clicks WINDOW TUMBLING (SIZE 1 MINUTE, GRACE PERIOD 10 SECONDS) "
                     "GROUP BY page EMIT FINAL", timestamp="ts",
                     streams={"clicks": sp.read.from_callback("clicks", schema=CLICKS)})
    titles = ["Aliens", "Heat", "Alien", "Ronin", "Tron"]
    sales = [[{"title": titles[(n * 7 + batch) % 5], "ticket_total_value": float(5 + n % 9)}
              for n in range(40)] for batch in range(2)]
    clicks = [[{"page": ["home", "docs", "blog"][n % 3],
                "ts": f"2026-01-01T00:{(batch * 2 + n // 20):02d}:{(n * 13) % 60:02d}", "x": n}
               for n in range(60)] for batch in range(2)]
    return [(tickets, sales), (minutes, clicks)]


def run_examples(spark, warehouse: str | None = None, resources: dict | None = None,
                 part: str | None = None, mode: str | None = None) -> None:
    """The job, then the state tables; ``resources`` override the deployment's (for in-process
    use by the test itself), by default they come from the environment. ``part``: ``first``
    (the job and the first batch of each state table) or ``second`` (their second batch)."""
    if part != "second":
        with dg.DagsterInstance.ephemeral() as instance:
            result = defs.resolve_job_def("running_sum_job").execute_in_process(
                instance=instance, resources=resources)
        assert result.success, "running_sum_job failed"
    for pipeline, batches in state_table_examples():
        chosen = {"first": batches[:1], "second": batches[1:]}.get(part or "", batches)
        for records in chosen:
            pipeline.publish(spark, records, warehouse)
            pipeline.run_once(spark, warehouse, mode=mode)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # batch log lines
    spark = sp.spark_session()          # the session the job's SparkResource builds too
    run_examples(spark, part=os.environ.get("EXAMPLES_PART"),
                 mode=os.environ.get("LAKESTREAM_MODE"))
    status = spark.sparkContext.statusTracker()
    found = {"master": spark.sparkContext.master,
             "executors": len(status.getExecutorInfos()) - 1}  # minus the driver
    probed = os.environ.get("EXAMPLES_PROBE_PATH")
    if probed:  # whether an executor can see this path (of the driver's disk)
        found["executor_sees_probe"] = spark.sparkContext.parallelize([probed], 1).map(
            os.path.exists).collect()[0]
    print(json.dumps(found))
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
