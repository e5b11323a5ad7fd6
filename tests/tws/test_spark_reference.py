"""The checked-in spec of issue 66 (``tests/tws/expected/``, Spark's rows per batch for each
case of ``tests/tws/cases.py``, written by ``python -m tests.tws.spark_reference``; its
``--check`` runs Spark again) is whole and says what the plan relies on."""

import json

from tests.tws.cases import BATCHES, CASES
from tests.tws.spark_reference import EXPECTED


def test_every_case_has_spark_s_rows_for_every_batch_of_input():
    for case in CASES:
        found = json.loads((EXPECTED / f"{case.name}.json").read_text())
        assert (found["case"], found["restart_after"]) == (case.name, case.restart_after)
        ids = [batch["batch_id"] for batch in found["batches"]]
        assert ids == list(range(len(ids))) and len(ids) >= len(BATCHES), case.name


def test_the_spec_records_what_spark_does_with_timers_and_input_in_one_batch():
    """Spark calls handleInputRows before the batch's due timers, so a key with input in the
    batch that would fire it moves its timer first (a and b of sum_until_quiet never fire);
    only c, quiet since 00:00:20, fires at 00:00:25, in a batch with no input, once the
    watermark (the latest event time less 2 s) passes it."""
    batches = json.loads((EXPECTED / "sum_until_quiet.json").read_text())["batches"]
    fired = [(batch["batch_id"], row["k"], row["total"]) for batch in batches for row in batch["rows"]]
    assert fired == [(6, "c", 13)] and len(batches) == len(BATCHES) + 2  # two without input
