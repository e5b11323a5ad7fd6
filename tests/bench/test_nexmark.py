"""Every Nexmark query lakestream expresses, run on a small generated stream (two Delta
commits of each kind) in driver and distributed mode and checked against the brute-force
answer of ``bench/nexmark/oracle.py``. Driver mode reads a commit per batch, so state crosses
a batch; distributed mode reads both in one (its fixed cost per batch is most of such a
test's time, and state across batches on executors is what tests/ops/runtime/test_modes.py
and the crash tests hold)."""

import doctest

import pytest

from bench.nexmark import generator, lakestream, oracle, python_forms, queries, streams
from bench.nexmark.queries import QUERIES

EXPRESSED = [query.name for query in QUERIES if query.expressed]


@pytest.mark.parametrize("mode", ["driver", pytest.param("distributed", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", EXPRESSED)
def test_each_expressed_query_gives_the_brute_force_answer(spark, tmp_path, nexmark, name, mode):
    folder, batches = nexmark
    got = lakestream.run(spark, queries.query(name), folder, str(tmp_path), mode,
                         max_versions=1 if mode == "driver" else None)
    expected = oracle.answer(name, batches)
    assert len(expected) > 0, f"{name}: the stream is too small to test it"
    assert oracle.same_rows(got.rows, expected) is None, oracle.same_rows(got.rows, expected)


def test_at_least_18_of_the_23_queries_are_expressed_and_the_rest_say_what_is_missing():
    assert len(QUERIES) == 23 and len(EXPRESSED) >= 18
    assert all(query.missing for query in QUERIES if not query.expressed)


@pytest.mark.parametrize("module", [generator, streams, queries, oracle, lakestream, python_forms])
def test_the_modules_examples_hold(module):
    assert doctest.testmod(module).failed == 0
