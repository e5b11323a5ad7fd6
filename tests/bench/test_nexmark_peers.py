"""The peers' Nexmark arms: Spark Structured Streaming's answer to every query it runs as a
stream checked against the brute-force one; Flink's query text rewritten only in its source
and sink DDL; a Flink changelog folded into its rows; and, where PyFlink is installed
(``bench/install_peers``), Flink's own answers checked the same way."""

import doctest
import re

import pandas as pd
import pytest

from bench.nexmark import flink, flink_answers, oracle, spark_streaming
from bench.nexmark.queries import QUERIES
from bench.nexmark.streams import all_of
from tests.bench.answers import EXPRESSED

ALL = [query.name for query in QUERIES]


@pytest.mark.slow  # a Spark streaming query each: the full tier's
@pytest.mark.parametrize("name", sorted(spark_streaming.QUERIES, key=lambda n: int(n[1:])))
def test_spark_structured_streaming_gives_the_brute_force_answer(spark, tmp_path, nexmark, name):
    folder, batches = nexmark
    got = spark_streaming.run(spark, name, folder, str(tmp_path / name))
    expected = oracle.answer(name, batches)
    assert len(expected) > 0 and got.seconds > 0
    assert oracle.same_rows(got.rows, expected) is None, oracle.same_rows(got.rows, expected)


def test_every_expressed_query_spark_does_not_run_names_the_rule_that_refuses_it():
    assert set(spark_streaming.REFUSED) == set(EXPRESSED) - set(spark_streaming.QUERIES)


@pytest.mark.parametrize("name", ALL)
def test_the_flink_text_keeps_its_insert_and_sink_columns_and_changes_only_the_connector(name, tmp_path):
    statements = flink.statements(name)
    sinks = [s for s in statements if flink._SINK.match(s)]
    assert len(sinks) == 1 and sum(s.upper().startswith("INSERT") for s in statements) == 1
    rewritten = flink.sink_ddl(sinks[0], tmp_path / "out", "parquet")
    declared = rewritten.split(" WITH ('connector' = 'filesystem'")[0]  # up to the columns' ")"
    assert sinks[0].startswith(declared) and declared.endswith(")")
    assert re.match(r"\s*(PARTITIONED BY \([^)]*\)\s*)?WITH \(", sinks[0][len(declared):])
    assert rewritten.endswith(f"'path' = '{(tmp_path / 'out').as_uri()}', 'format' = 'parquet')")


def test_a_changelog_folds_into_the_rows_it_leaves_in_any_file_order():
    changes = [{"op": "c", "after": {"k": 1, "n": 1}}, {"op": "d", "before": {"k": 1, "n": 1}},
               {"op": "c", "after": {"k": 1, "n": 2}}, {"op": "c", "after": {"k": 2, "n": 1}}]
    forward, backward = flink_answers.fold(changes), flink_answers.fold(changes[::-1])
    for rows in (forward, backward):
        assert sorted(map(tuple, rows.to_numpy())) == [(1, 2), (2, 1)]


@pytest.mark.parametrize("module", [flink_answers, spark_streaming])
def test_the_modules_examples_hold(module):
    assert doctest.testmod(module).failed == 0


@pytest.mark.slow
@pytest.mark.skipif(not flink_answers.FLINK_PYTHON.exists(), reason="PyFlink not installed: "
                    "bash bench/install_peers")
@pytest.mark.parametrize("name", ["q0", "q4", "q5", "q7", "q9", "q11", "q19"])
def test_flink_gives_the_brute_force_answer(tmp_path, nexmark, name):
    folder, batches = nexmark
    run = flink_answers.run(name, folder, str(tmp_path))
    got = flink_answers.as_oracle(name, run.rows, all_of(batches, "bid")["dateTime"].max())
    expected = flink_answers.expected_of_flink(name, batches)
    assert isinstance(got, pd.DataFrame) and len(expected) > 0
    assert oracle.same_rows(got, expected) is None, oracle.same_rows(got, expected)
