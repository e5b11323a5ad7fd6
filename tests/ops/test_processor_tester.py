"""``ops.testing.ProcessorTester`` drives a Spark ``StatefulProcessor`` batch by batch with no
Spark session: the cases of ``tests/tws/cases.py`` give Spark 4.2's own rows
(``tests/tws/expected/``), each batch read back from what the one before stored."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from pyspark.sql.streaming import StatefulProcessor

from ops.testing import ManualClock, ProcessorTester
from tests.ops.operators.test_processor_time import RecentPages
from tests.tws.cases import BATCHES, CASES
from tests.tws.spark_reference import EXPECTED

RUNNABLE = [case for case in CASES if case.time_mode == "None"]
EVENT_TIME = [case for case in CASES if case.time_mode == "EventTime" and case.then is None]


def rows_of(output: pd.DataFrame) -> list[dict]:
    records = [{name: (value.item() if hasattr(value, "item") else value)
                for name, value in record.items()} for record in output.to_dict("records")]
    return sorted(records, key=json.dumps)


@pytest.mark.parametrize("case", RUNNABLE, ids=lambda case: case.name)
def test_the_tester_gives_spark_s_rows_batch_by_batch(case):
    expected = json.loads((EXPECTED / f"{case.name}.json").read_text())["batches"]
    form = "rows" if case.form == "rows" else "pandas"
    tester = ProcessorTester(case.processor(), case.output_schema, keys=["k"], form=form,
                             initial_state=case.initial_state or None)
    for batch, spark_s in zip(BATCHES, expected):
        assert rows_of(tester.test(batch)) == sorted(spark_s["rows"], key=json.dumps)


@pytest.mark.parametrize("case", EVENT_TIME, ids=lambda case: case.name)
def test_the_tester_follows_the_watermark_and_fires_event_time_timers(case):
    """Spark's rows where it emitted any, in order; the last from a batch with no input, run
    (as the runtime runs one) once the watermark passed a timer."""
    expected = [batch["rows"] for batch in json.loads(
        (EXPECTED / f"{case.name}.json").read_text())["batches"] if batch["rows"]]
    tester = ProcessorTester(case.processor(), case.output_schema, keys=["k"],
                             time_mode=case.time_mode, watermark=("ts", case.watermark))
    found, watermarks = [], []
    for batch in [*BATCHES, []]:
        frame = pd.DataFrame(batch)
        if batch:
            frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
        output = tester.test(frame)
        found += [rows_of(output)] if len(output) else []
        watermarks.append(tester.watermark)
    assert found == [sorted(rows, key=json.dumps) for rows in expected]
    midnight = pd.Timestamp("2026-01-01T00:00:00Z").value // 1_000_000
    assert watermarks == [midnight + ms for ms in (0, 2_000, 9_000, 18_000, 29_000, 29_000)]


def test_the_tester_runs_on_its_manual_clock():
    clock = ManualClock("2026-01-01T00:00:00Z")
    tester = ProcessorTester(RecentPages(), "k string, last string, seen string, visits string, "
                             "count long", keys=["k"], time_mode="ProcessingTime", clock=clock)
    tester.test([{"k": "a", "page": "home"}])
    clock.advance("61s")  # home's TTL has passed
    assert tester.test([{"k": "a", "page": "cart"}])["seen"].tolist() == [""]
    clock.advance("2min")
    assert tester.test([]).empty  # cart expired too: the key is woken and its record cut
    assert tester.state() == {"a": {"count": (2,)}}


def test_the_tester_starts_no_spark():
    script = (
        "import pyspark, sys\n"
        "from ops.testing import ProcessorTester\n"
        "from tests.tws.cases import BATCHES, ItemCounts\n"
        "tester = ProcessorTester(ItemCounts(), 'k string, items string', keys=['k'])\n"
        "for batch in BATCHES: tester.test(batch)\n"
        "assert pyspark.SparkContext._active_spark_context is None\n"
        "print(sorted(tester.state().items()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("[('a', {'items': {('r',): (1,)}}), "
                                   "('b', {'items': {('r',): (1,)}}), "
                                   "('c', {'items': {('p',): (2,)}})]")


class FirstRow(StatefulProcessor):
    """Reads its key's first row by label, as a processor written for Spark may."""

    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):
        for frame in rows:
            yield pd.DataFrame({"k": [key[0]], "first": [int(frame.loc[0, "x"])]})


def test_a_key_s_frame_is_indexed_from_zero_as_spark_s_are():
    tester = ProcessorTester(FirstRow(), "k string, first long", keys=["k"])
    output = tester.test([{"k": "a", "x": 1}, {"k": "b", "x": 2}, {"k": "a", "x": 3}])
    assert sorted(output.itertuples(index=False, name=None)) == [("a", 1), ("b", 2)]
