"""Bad records never take good ones down with them: they land in dead letters with a reason."""

import logging

from dagster_project.pipelines import running_sum_keyed
from ops.testing import run_records
from tests.helpers import dead_letters, sink_column


def test_missing_key_and_non_numeric_x_go_to_dead_letters(spark, warehouse, caplog):
    records = [{"x": 1, "y": 0}, {"x": 2}, {"x": "ten", "y": 0}, {"x": 3, "y": None},
               {"x": 4, "y": 0}]
    with caplog.at_level(logging.WARNING):
        report = running_sum_keyed.publish(spark, records, warehouse)

    assert report.accepted == 2
    assert report.rejected == [(1, "key field 'y' is missing or null"),
                               (2, "field 'x' 'ten' is not an integer; expected long"),
                               (3, "key field 'y' is missing or null")]
    assert "3 of 5 records are invalid" in caplog.text

    run = running_sum_keyed.run_once(spark, warehouse)
    assert run.dead_letters == 3 and run.rows_out == 2
    assert sink_column(spark, running_sum_keyed, warehouse, "total") == [1, 5]
    letters = dead_letters(spark, running_sum_keyed, warehouse)
    assert list(letters["reason"]) == [r for _, r in report.rejected]
    assert list(letters["raw"]) == ['{"x":2}', '{"x":"ten","y":0}', '{"x":3,"y":null}']
    assert set(letters["batch_id"]) == {1}


def test_replayed_run_does_not_duplicate_dead_letters(spark, warehouse):
    running_sum_keyed.publish(spark, [{"x": "bad", "y": 1}], warehouse)
    running_sum_keyed.run_once(spark, warehouse)
    running_sum_keyed.run_once(spark, warehouse)
    assert len(dead_letters(spark, running_sum_keyed, warehouse)) == 1


def test_a_crash_after_the_sinks_were_written_leaves_each_dead_letter_once(spark, warehouse):
    result = run_records(running_sum_keyed, [{"x": "bad", "y": 1}, {"x": 1, "y": 1}], spark=spark,
                         warehouse=warehouse, crash_at_step="after_sink_write")
    assert result.dead_letters["raw"].tolist() == ['{"x":"bad","y":1}']
    assert result.outputs["sums"]["total"].tolist() == [1]
