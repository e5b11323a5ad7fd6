"""The KX seed example, reproduced exactly, through the pipeline API on real Spark and Delta."""

import subprocess
import sys
import textwrap

import pytest

from dagster_project.pipelines import SEED_ROWS, running_sum_keyed, running_sum_unkeyed
from tests.helpers import sink_column

KEYED = [1, 3, 6, 1, 3, 6, 10]
UNKEYED = [1, 3, 6, 7, 9, 12, 16]


@pytest.mark.parametrize("pipeline, expected", [(running_sum_keyed, KEYED),
                                                (running_sum_unkeyed, UNKEYED)])
def test_seed_example_in_one_publish(spark, warehouse, capsys, pipeline, expected):
    pipeline.publish(spark, SEED_ROWS, warehouse)
    report = pipeline.run_once(spark, warehouse)

    assert [b.rows_in for b in report.batches] == [7]
    assert sink_column(spark, pipeline, warehouse, "total") == expected
    printed = capsys.readouterr().out.split("batch 1:")[1].splitlines()[2:9]
    assert [int(line.split()[-1]) for line in printed] == expected


def test_seed_example_one_record_per_publish_gives_same_sums(spark, warehouse):
    for row in SEED_ROWS:
        running_sum_keyed.publish(spark, row, warehouse)
    report = running_sum_keyed.run_once(spark, warehouse, max_batches=3)
    assert len(report.batches) == 1  # all seven publishes were waiting: one slice
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == KEYED


def test_sums_continue_across_runs(spark, warehouse):
    running_sum_keyed.publish(spark, SEED_ROWS[:4], warehouse)
    running_sum_keyed.run_once(spark, warehouse)
    running_sum_keyed.publish(spark, SEED_ROWS[4:], warehouse)
    report = running_sum_keyed.run_once(spark, warehouse)

    assert report.checkpoint_id == 2
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == KEYED


def test_no_new_data_runs_no_batch(spark, warehouse):
    running_sum_keyed.publish(spark, SEED_ROWS, warehouse)
    running_sum_keyed.run_once(spark, warehouse)
    again = running_sum_keyed.run_once(spark, warehouse)
    assert again.batches == [] and again.checkpoint_id == 1


def test_sums_survive_a_process_restart(spark, warehouse, child_env):
    """A new process (new JVM, new Spark session) resumes from the checkpoint and continues."""
    script = textwrap.dedent("""
        import ops
        from dagster_project.pipelines import running_sum_keyed as p
        spark = ops.spark_session()
        p.publish(spark, [{"x": 5, "y": 0}, {"x": 5, "y": 1}])
        print("RUN", p.run_once(spark).checkpoint_id)
    """)
    running_sum_keyed.publish(spark, SEED_ROWS, warehouse)
    running_sum_keyed.run_once(spark, warehouse)

    child = subprocess.run([sys.executable, "-c", script], env=child_env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "RUN 2" in child.stdout

    assert sink_column(spark, running_sum_keyed, warehouse, "total") == KEYED + [15, 11]
    running_sum_keyed.publish(spark, [{"x": 1, "y": 1}], warehouse)
    running_sum_keyed.run_once(spark, warehouse)
    assert sink_column(spark, running_sum_keyed, warehouse, "total")[-1] == 12
