"""Spark ``StatefulProcessor``s run unchanged by ``group_by(...).transform_with_state``: the
cases of ``tests/tws/cases.py`` give Spark 4.2's own rows (``tests/tws/expected/``) batch by
batch, across a restart from the checkpoint, in the pandas and the Row form; and what this
release does not run yet is refused with the reason."""

import json
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql.streaming import StatefulProcessor

import ops as sp
from ops.errors import OperatorError, PipelineDefinitionError
from ops.testing import ManualClock, run_records
from tests.helpers import sink_rows
from tests.tws.cases import BATCHES, CASES, LastThree, RunningCount
from tests.tws.spark_reference import EXPECTED

SCHEMA = {"k": "string", "item": "string", "x": "long", "ts": "timestamp"}


def pipeline(case, name=None, mode="driver"):
    stream = sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1)
    if case.watermark:
        stream = stream.withWatermark("ts", case.watermark)
    grouped = stream.group_by("k")
    port = (grouped.transformWithState if case.form == "rows" else grouped.transformWithStateInPandas)
    built = port(case.processor(), case.output_schema, timeMode=case.time_mode,
                 initialState=case.initial_state or None,
                 eventTimeColumnName=case.event_time or "")
    if case.then is not None:  # chained: the second's event time is the first's output's
        then, schema = case.then
        built = built.group_by("k").transformWithStateInPandas(then(), schema, timeMode="EventTime")
    return built.write.to_delta("out").named(name or case.name).with_mode(mode)


def by_batch(frame: pd.DataFrame, columns: list[str]) -> list[list[dict]]:
    """The sink's rows per batch, each batch's rows sorted (Spark's order across keys is its
    partitioning's)."""
    batches = []
    for _, rows in frame.groupby("_batch_id", sort=True):
        records = [{column: _plain(row[column]) for column in columns} for _, row in rows.iterrows()]
        batches.append(sorted(records, key=json.dumps))
    return batches


def _plain(value):
    """A sink's value as Spark's reference file writes it (times in UTC, without the zone)."""
    if isinstance(value, pd.Timestamp):
        return value.tz_convert(None).isoformat() if value.tzinfo else value.isoformat()
    return value.item() if hasattr(value, "item") else value


@pytest.mark.parametrize("mode", ["driver", pytest.param("distributed", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_spark_processor_gives_spark_s_rows_across_a_restart(spark, warehouse, case, mode):
    """Batch by batch where the batches have rows: Spark numbers a batch run only to move
    the watermark (its no-data batch) as it numbers the others; here such a batch is run when
    a timer falls due, numbered as the rest, so the empty batches differ."""
    expected = [batch for batch in json.loads((EXPECTED / f"{case.name}.json").read_text())[
        "batches"] if batch["rows"]]
    columns = list(expected[0]["rows"][0])
    built = pipeline(case, mode=mode)
    for batch in BATCHES[:case.restart_after]:  # the first run: two batches
        built.publish(spark, batch, warehouse)
    first = built.run_once(spark, warehouse)
    restarted = pipeline(case, mode=mode)  # a new run of a new definition, from the checkpoint
    for batch in BATCHES[case.restart_after:]:
        restarted.publish(spark, batch, warehouse)
    second = restarted.run_once(spark, warehouse)
    assert {batch.mode for report in (first, second) for batch in report.batches} == {mode}

    found = by_batch(sink_rows(spark, restarted, warehouse, "out"), columns)
    assert found == [sorted(batch["rows"], key=json.dumps) for batch in expected]


def test_state_lives_in_the_checkpoint_and_another_processor_is_refused(spark, warehouse):
    case = next(case for case in CASES if case.name == "last_three")
    built = pipeline(case, name="switched")
    built.publish(spark, BATCHES[0], warehouse)
    built.run_once(spark, warehouse)
    # a list variable is a state of its own, a row per element, read back by its name
    state = sp.read_state(spark, built, "LastThree.recent", warehouse=warehouse)
    assert sorted(set(state["key"])) == ["a", "b"]
    assert state[state["key"] == "a"]["value"].tolist() == [(1,), (3,)]
    assert sp.read_state(spark, built, "LastThree", warehouse=warehouse).empty  # no value variable

    swapped = (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1).group_by("k")
               .transform_with_state(RunningCount(), "k string, total long", name="LastThree")
               .write.to_delta("out")).named("switched")
    swapped.publish(spark, BATCHES[1], warehouse)
    with pytest.raises(Exception, match="processor"):
        swapped.run_once(spark, warehouse)


class Declaring(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        self.count.update((1, 2))  # two fields for a one-field schema
        yield pd.DataFrame({"k": [key[0]]})


class Outputless(RunningCount):
    def handleInputRows(self, key, rows, timerValues):
        yield pd.DataFrame({"key": [key[0]]})  # not the schema's "k"


class Failing(RunningCount):
    def handleInputRows(self, key, rows, timerValues):
        raise KeyError("no such column")


@pytest.mark.parametrize("processor, message", [
    (Declaring(), r"state 'count': a value of 2 field\(s\) \(1, 2\) for the schema's 1 \('n',\)"),
    (Outputless(), r"key \('a',\): an output frame lacks column\(s\) \['k', 'total'\]"),
    (Failing(), r"'Failing', key \('a',\): handleInputRows raised KeyError: 'no such column'"),
], ids=["bad value", "bad output", "raises"])
def test_a_processor_s_mistake_names_the_operator_key_and_what(spark, warehouse, processor, message):
    built = (sp.read.from_callback("in", key="k", schema=SCHEMA).group_by("k")
             .transform_with_state(processor, "k string, total long")
             .write.to_delta("out")).named("mistakes")
    built.publish(spark, BATCHES[0], warehouse)
    with pytest.raises(OperatorError, match=message):
        built.run_once(spark, warehouse)
    assert not Path(built.layout(warehouse).state).exists()  # nothing of the batch committed


@pytest.mark.parametrize("arguments, message", [
    ({"time_mode": "EventTime"}, r"event time needs a watermark: call .with_watermark"),
    ({"event_time": "ts"}, r"event time needs a watermark"),
    ({"time_mode": "wall"}, "time_mode is one of"),
    ({"output_mode": "complete"}, "output_mode is 'append' or 'update'"),
    ({"initial_state": object()}, "initial_state is a pandas DataFrame or a list of records"),
    ({"initial_state": [{"user": "a"}]}, r"initial state lacks the grouping column\(s\) \['k'\]"),
])
def test_what_does_not_run_yet_is_refused_when_the_pipeline_is_defined(arguments, message):
    grouped = sp.read.from_callback("in", key="k", schema=SCHEMA).group_by("k")
    with pytest.raises(PipelineDefinitionError, match=message):
        grouped.transform_with_state(LastThree(), "k string, recent string, exists boolean",
                                     **arguments)
    with pytest.raises(PipelineDefinitionError, match="instance of pyspark"):
        grouped.transform_with_state(LastThree, "k string")


@pytest.mark.slow
def test_an_initial_state_s_key_without_input_reaches_its_task_once(spark, warehouse):
    """On executors the initial state's rows join the first batch's input, each routed to its
    key's task: a key with no input gets its handleInitialState too, and a replay of the first
    batch (its checkpoint lost) applies it again from the start, not on top."""
    case = next(case for case in CASES if case.initial_state)
    built = pipeline(case, mode="distributed")
    built.publish(spark, BATCHES[0], warehouse)
    built.run_once(spark, warehouse)
    stored = sp.read_state(spark, built, f"{case.processor.__name__}.count", warehouse=warehouse)
    held = dict(zip(stored["key"], stored["value"]))
    assert held["z"] == (5,)  # z: only in the initial state
    assert held["a"][0] > 10  # a: its initial 10 and its rows


class QuietAfterAMinute(StatefulProcessor):
    """Processing time: a key's count, reported once a minute passes with no row of it (its
    timer moved at each row, as a session's end), then forgotten."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        self.count.update(((self.count.get()[0] if self.count.exists() else 0)
                           + sum(map(len, rows)),))
        for due in list(self.handle.listTimers()):
            self.handle.deleteTimer(due)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 60_000)
        yield from ()

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        total = self.count.get()[0]
        self.count.clear()
        yield pd.DataFrame({"k": [key[0]], "total": [total],
                            "fired_at": [expiredTimerInfo.getExpiryTimeInMs()],
                            "now": [timerValues.getCurrentProcessingTimeInMs()]})


@pytest.mark.parametrize("mode", ["driver", pytest.param("distributed", marks=pytest.mark.slow)])
def test_processing_time_timers_fire_in_a_batch_with_no_input(spark, tmp_path, mode):
    built = (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1).group_by("k")
             .transform_with_state(QuietAfterAMinute(), "k string, total long, fired_at long, now long",
                                   time_mode="ProcessingTime")
             .write.to_delta("out")).named("quiet").with_mode(mode)
    clock, warehouse = ManualClock("2026-01-01T00:00:00Z"), str(tmp_path)
    start = int(clock.now() * 1000)
    run_records(built, [{"k": "a", "x": 1}, {"k": "b", "x": 1}], spark=spark, warehouse=warehouse,
                clock=clock)
    clock.advance("30s")  # b's next row moves its timer; a's stays
    run_records(built, [{"k": "b", "x": 1}], spark=spark, warehouse=warehouse, clock=clock)
    clock.advance("45s")  # a's minute has passed (75 s), b's not (45 s): a fires, no input
    fired = run_records(built, spark=spark, warehouse=warehouse, clock=clock)
    assert fired.outputs["out"][["k", "total", "fired_at"]].values.tolist() == [["a", 1, start + 60_000]]
    assert fired.outputs["out"]["now"].tolist() == [start + 75_000]
    clock.advance("1min")
    later = run_records(built, spark=spark, warehouse=warehouse, clock=clock)
    assert later.outputs["out"][["k", "total", "fired_at"]].values.tolist() == \
        [["a", 1, start + 60_000], ["b", 2, start + 90_000]]
    assert later.state["QuietAfterAMinute"].empty  # both counts cleared, no timer left
    assert {batch.mode for report in later.reports for batch in report.batches} == {mode}


def test_timers_with_time_mode_none_are_refused_at_the_call(spark, warehouse):
    built = (sp.read.from_callback("in", key="k", schema=SCHEMA).group_by("k")
             .transform_with_state(QuietAfterAMinute(), "k string, total long, fired_at long, now long")
             .write.to_delta("out")).named("untimed")
    built.publish(spark, BATCHES[0], warehouse)
    with pytest.raises(OperatorError, match="registerTimer: timers need time_mode='processing_time'"):
        built.run_once(spark, warehouse)
