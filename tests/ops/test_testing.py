"""ops.testing: one call runs a pipeline on records and returns outputs, state and dead letters;
an injected crash at a protocol step, then recovery, gives the same result."""

import pandas as pd
import pytest

import ops as sp
from ops import PipelineDefinitionError
from ops.testing import PROTOCOL_STEPS, ManualClock, run_records

BATCHES = ([{"k": "a", "x": 1}, {"k": "b", "x": 2}],
           [{"k": "a", "x": 3}, {"k": "b", "x": "not a number"}],
           [{"k": "b", "x": 4}, {"x": 5}])


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def pipeline():
    return (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"}, max_versions=1)
            .map(running_sum, state=0).write.to_delta("sums")).named("sums")


def summary(result):
    sums = result.outputs["sums"][["_batch_id", "k", "x", "total"]]
    state = result.state["running_sum"].sort_values("key")[["key", "value"]]
    letters = result.dead_letters[["batch_id", "reason"]]
    return (sums.to_dict("records"), state.to_dict("records"), letters.to_dict("records"))


@pytest.fixture(scope="module")
def expected(spark, tmp_path_factory):
    return summary(run_records(pipeline(), *BATCHES, spark=spark,
                               warehouse=str(tmp_path_factory.mktemp("clean"))))


def test_one_call_gives_outputs_state_and_dead_letters(expected):
    sums, state, letters = expected
    assert [(row["k"], row["total"]) for row in sums] == [("a", 1), ("b", 2), ("a", 4), ("b", 6)]
    assert state == [{"key": "a", "value": 4}, {"key": "b", "value": 6}]
    assert [row["batch_id"] for row in letters] == [2, 3]
    assert "not an integer" in letters[0]["reason"] and "key field 'k'" in letters[1]["reason"]


@pytest.mark.parametrize("step, nth", [("after_plan", 1), ("after_sink_write", 2),
                                       ("before_checkpoint_commit", 2),
                                       ("after_checkpoint_commit", 2), ("hook_on_checkpoint", 3)])
def test_a_crash_at_a_step_then_recovery_gives_the_same_result(spark, tmp_path, expected, step, nth):
    result = run_records(pipeline(), *BATCHES, spark=spark, warehouse=str(tmp_path),
                         crash_at_step=step, crash=nth)
    assert result.crashed_at == step and len(result.reports) == 1  # the first run never reported
    assert result.reports[0].batches  # the recovery run did the rest
    assert summary(result) == expected


def test_unknown_steps_and_sources_without_callbacks_are_refused(spark, tmp_path):
    with pytest.raises(PipelineDefinitionError, match="not a protocol step"):
        run_records(pipeline(), spark=spark, warehouse=str(tmp_path), crash_at_step="later")
    table = sp.read.from_delta(str(tmp_path / "t")).write.to_console().named("t")
    with pytest.raises(PipelineDefinitionError, match="must read sp.read.from_callback"):
        run_records(table, spark=spark, warehouse=str(tmp_path))
    assert PROTOCOL_STEPS.index("after_plan") < PROTOCOL_STEPS.index("after_sink_write")


def remind_after_ten_minutes(op, md, data):
    """Sums x per key and reports the total once the key has been quiet for ten minutes."""
    if md.timer is not None:
        return pd.DataFrame({"k": [md.key], "total": [sp.get(op, md)], "due": [md.timer],
                             "batch_time": [md.batch_time]})
    sp.set(op, md, sp.get(op, md) + int(data["x"].sum()))
    sp.set_timer(op, md, after="10min")
    return None


def test_a_manual_clock_fires_a_processing_time_timer_without_waiting(spark, warehouse):
    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
                .map(remind_after_ten_minutes, state=0, name="quiet", timers=True)
                .write.to_delta("reminders")).named("reminders")
    clock = ManualClock("2026-01-01T00:00:00Z")
    start_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    first = run_records(pipeline, [{"k": 1, "x": 2}, {"k": 1, "x": 3}], spark=spark,
                        warehouse=warehouse, clock=clock)
    assert first.outputs["reminders"].empty
    clock.advance("9min")  # not due yet: the run has nothing to do
    assert run_records(pipeline, spark=spark, warehouse=warehouse, clock=clock).outputs["reminders"].empty
    clock.advance("61s")
    fired = run_records(pipeline, spark=spark, warehouse=warehouse, clock=clock).outputs["reminders"]
    assert fired[["k", "total", "due", "batch_time"]].values.tolist() == [
        [1, 5, start_ms + 600_000, start_ms + 601_000]]
    clock.advance("1h")  # fired once: nothing more
    again = run_records(pipeline, spark=spark, warehouse=warehouse, clock=clock).outputs["reminders"]
    assert len(again) == 1
