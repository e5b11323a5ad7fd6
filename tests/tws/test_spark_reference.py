"""The checked-in spec of issue 66 is what Spark gives: every case of ``tests/tws/cases.py`` run
again on real Spark (``transformWithStateInPandas`` / ``transformWithState``, RocksDB, a restart
between two queries) gives exactly ``tests/tws/expected/<case>.json`` batch by batch, so a case
edited without its expected rows, or a Spark upgrade that changes them, fails here."""

import json

import pytest

from tests.tws.cases import CASES
from tests.tws.spark_reference import EXPECTED, run_case


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_spark_gives_the_checked_in_rows_of_each_case(spark, case):
    expected = json.loads((EXPECTED / f"{case.name}.json").read_text())
    assert expected["restart_after"] == case.restart_after
    assert run_case(spark, case) == expected["batches"]


def test_the_spec_records_what_spark_does_with_timers_and_input_in_one_batch():
    """Read from the files, not run: Spark calls handleInputRows before the batch's due
    timers, so a key with input in the batch that would fire it moves its timer first (a and b
    of sum_until_quiet never fire); only c, quiet since 00:00:20, fires at 00:00:25, in a batch
    with no input, once the watermark (the latest event time less 2 s) passes it."""
    batches = json.loads((EXPECTED / "sum_until_quiet.json").read_text())["batches"]
    fired = [(batch["batch_id"], row["k"], row["total"]) for batch in batches for row in batch["rows"]]
    assert fired == [(6, "c", 13)] and len(batches) == 7  # five batches of input, two without
