"""Small readers shared by tests."""

import urllib.request

import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from ops import Pipeline
from ops.runtime import DEAD_LETTER_SCHEMA
from state import delta_io
from state.lake import tables


def sink_rows(spark, pipeline: Pipeline, warehouse: str, sink: str = "sums"):
    """A Delta sink's rows in batch and row order, as pandas."""
    return pipeline.read_sink(spark, sink, warehouse)


def sink_column(spark, pipeline: Pipeline, warehouse: str, column: str, sink: str = "sums"):
    return [int(v) for v in sink_rows(spark, pipeline, warehouse, sink)[column]]


def dead_letters(spark, pipeline: Pipeline, warehouse: str):
    """The pipeline's dead letters by position (none: the table is created by the first one)."""
    path = pipeline.layout(warehouse).dead_letters
    if not tables.exists(spark, path):
        return pd.DataFrame(columns=DEAD_LETTER_SCHEMA.names)
    return tables.read(spark, path).orderBy("position").toPandas()


def last_commit(path: str, by: str = "delta-rs") -> list[dict]:
    """The actions of the Delta table's last commit, which ``by`` made (delta-rs, or Spark)."""
    actions = delta_io.commit_actions(path, delta_io.latest_version(path))
    info = next(action["commitInfo"] for action in actions if "commitInfo" in action)
    assert by in info.get("clientVersion", info.get("engineInfo", "")), info
    return actions


def scraped(url: str) -> dict[tuple[str, tuple], float]:
    """The samples a Prometheus endpoint serves, read as a scrape would (text format, no
    token): ``{(name, sorted label items): value}``."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def spark_jobs(spark) -> int:
    """How many jobs the session's Spark context has started so far (its DAG scheduler's
    count, which Spark's status listener follows): the same number before and after a step
    means the step ran no Spark job."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())
