"""Every Nexmark query lakestream expresses, in distributed mode, against the brute-force
answer: the small stream's two commits read in one batch (the fixed cost of a distributed
batch is most of such a test's time; state across batches on executors is what
tests/ops/runtime/test_modes.py and the crash tests hold)."""

import pytest

from tests.bench.answers import EXPRESSED, assert_brute_force_answer


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPRESSED)
def test_each_expressed_query_gives_the_brute_force_answer_on_executors(spark, tmp_path, nexmark, name):
    assert_brute_force_answer(spark, str(tmp_path), nexmark, name, "distributed", max_versions=None)
