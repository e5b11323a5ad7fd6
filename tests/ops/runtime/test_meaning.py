"""What a checkpoint records of its state's meaning, which changes of a pipeline stop a run, and
how a migration's edits are planned (no Spark: descriptions and plans are plain data)."""

import pandas as pd
import pytest

import ops as sp
from ops.operating.migrate import Migration, plan
from ops.runtime.meaning import Remedy, describe, differences, refusal
from state import WATERMARK, Checkpoint, MigrationError
from state.offline.migration import _edited

SCHEMA = {"k": "string", "x": "long", "ts": "timestamp"}


def _sum(op, md, data):
    return data


def _operators(*, name="sum", key="k", state=0, codec="json", ttl=None, event_time=None):
    stream = sp.read.from_callback("in", key=key, schema=SCHEMA)
    return stream.map(_sum, state=state, name=name, codec=codec, ttl=ttl,
                      event_time=event_time).operators


def _found(then, now, **tracked):
    return {(d.name, d.remedy) for d in differences(describe(then), describe(now), **tracked)}


def test_each_state_name_is_described_with_its_operator_keys_codec_and_shape():
    described = describe(_operators(ttl="1h", state={"n": 0, "sum": 0.0}))
    assert described["sum"] == {
        "operator": "sum", "kind": "keyed", "keys": ["k"], "role": "values", "class": "Map",
        "codec": "json", "shape": {"value": "dict with n, sum"}, "shared": []}
    assert described["sum__timers"]["role"] == "timers"
    assert described["sum__timers"]["shared"] == [WATERMARK]
    assert described["sum__expiry"]["ttl_ms"] == 3_600_000
    windowed = sp.read.from_callback("in", schema=SCHEMA).group_by("k").window(
        sp.tumbling("ts", "1min")).aggregate({"total": sp.sum_("x"), "n": sp.count()}, name="w")
    (entry,) = describe(windowed.operators).values()
    assert entry["shape"] == {"aggregates": {"total": "sum(x)", "n": "count(*)"},
                              "window": "windows of 60000 ms every 60000 ms"}
    assert entry["shared"] == ["__clock__"] and entry["class"] == "WindowAggregate"
    assert describe(sp.read.from_callback("in", schema=SCHEMA).map(len).operators) == {}


def test_what_stops_a_run_and_what_passes():
    base = _operators()
    assert _found(base, _operators(name="total")) == {("sum", Remedy.DROP_OR_RENAME),
                                                      ("total", Remedy.NONE)}
    assert _found(base, _operators(key="x")) == {("sum", Remedy.REKEY)}
    assert _found(base, _operators(state=0.0)) == {("sum", Remedy.TRANSFORM)}
    assert _found(base, _operators(codec="pickle")) == {("sum", Remedy.RECODE)}
    assert _found(base, _operators(ttl="1h")) == {("sum__timers", Remedy.NONE),
                                                 ("sum__expiry", Remedy.NONE)}
    assert _found(_operators(ttl="1h"), _operators(ttl="2h")) == {("sum__expiry", Remedy.NONE)}
    # TTL deadlines left behind would expire keys if a TTL came back: dropped explicitly
    assert _found(_operators(ttl="1h"), base) == {("sum__timers", Remedy.DROP_OR_RENAME),
                                                 ("sum__expiry", Remedy.DROP_OR_RENAME)}
    # a removed operator is one difference, its timers and deadlines go with it
    assert _found(_operators(ttl="1h"), []) == {("sum", Remedy.DROP_OR_RENAME)}
    assert _found(base, base, tracked_then=["seen"], tracked_now=[]) == {
        ("seen", Remedy.DROP_OR_RENAME)}
    assert _found(base, base, tracked_then=[], tracked_now=["seen"]) == {("seen", Remedy.NONE)}


def test_the_refusal_names_each_difference_and_only_the_ways_forward_that_apply():
    found = differences(describe(_operators()), describe(_operators(name="total")))
    message = refusal("p", 3, found)
    assert message.startswith("pipeline 'p' no longer matches what checkpoint 3 recorded")
    assert "'sum': Map 'sum': no operator keeps it now (removed or renamed; new now: 'total')" in message
    assert "rename={'sum': <new name>}" in message and "drop=['sum']" in message
    assert "rekey" not in message and "transform" not in message
    rekeyed = refusal("p", 3, differences(describe(_operators()), describe(_operators(key="x"))))
    assert "was keyed by (k), now keyed by (x)" in rekeyed
    assert "rekey={'sum': <new key of an old key>})" in rekeyed and "rename" not in rekeyed


def _checkpoint(operators, tracked=None):
    return Checkpoint(checkpoint_id=4, batch_id=4, tracked=tracked or {},
                      operators=describe(operators))


def test_a_rename_moves_values_timers_and_deadlines_and_a_transform_the_values_only():
    then = _checkpoint(_operators(ttl="1h"), tracked={"seen": "1"})
    now = describe(_operators(name="total", ttl="1h", state=0.0))
    edits, tracked = plan(then, now, ["count"], Migration(
        rename={"sum": "total", "seen": "count"}, transform={"total": float}))
    moved = {edit.name: (edit.to, edit.value, edit.key) for edit in edits}
    assert moved == {"sum": ("total", float, None), "sum__timers": ("total__timers", None, None),
                     "sum__expiry": ("total__expiry", None, None)}
    assert [edit.fixed for edit in edits if edit.name == "sum__timers"] == [frozenset([WATERMARK])]
    assert tracked == {"count": "1"}


def test_a_plan_refuses_what_it_leaves_unresolved_and_names_that_are_not_there():
    then = _checkpoint(_operators())
    with pytest.raises(MigrationError, match=r"'sum': Map 'total': its values were int, now "
                                             r"float: give transform=\{'total': fn\}"):
        plan(then, describe(_operators(name="total", state=0.0)), [],
             Migration(rename={"sum": "total"}))
    with pytest.raises(MigrationError, match=r"'sum' \('sum''s values\): no operator keeps it"):
        plan(then, describe(_operators(name="total")), [], Migration())
    with pytest.raises(MigrationError, match=r"(?s)rename 'nope'.*rename to 'gone'"):
        plan(then, describe(_operators()), [], Migration(rename={"nope": "x", "sum": "gone"}))
    # dropping it instead is a plan: its state goes
    (edit,) = plan(then, describe(_operators(name="total")), [], Migration(drop=["sum"]))[0]
    assert (edit.name, edit.moves) == ("sum", False)
    # a codec change alone needs only the migration (it re-encodes)
    (edit,) = plan(then, describe(_operators(codec="pickle")), [], Migration())[0]
    assert (edit.codec, edit.new_codec, edit.to) == ("json", "pickle", "sum")


class _Pairs(sp.Operator):
    """A user operator whose shape holds a tuple: it must compare equal to its recorded self."""

    name = "pairs"

    def state_shape(self):
        return {"fields": ("a", "b"), 3: "three"}

    def apply(self, scope, frame):
        return frame


def test_a_shape_compares_equal_to_its_record_after_json():
    recorded = Checkpoint.from_json(_checkpoint([_Pairs()]).to_json()).operators
    assert [d for d in differences(recorded, describe([_Pairs()])) if d.blocking] == []


def test_tracked_variables_and_operators_are_never_confused():
    then = _checkpoint(_operators(), tracked={"sum": "1", "seen": "2", "rows": "3"})
    with pytest.raises(MigrationError, match="'sum' is both an operator's state and a tracked"):
        plan(then, describe(_operators()), ["seen", "rows"], Migration(drop=["sum"]))
    with pytest.raises(MigrationError, match="'seen' cannot become 'rows'"):
        plan(then, describe(_operators()), ["sum", "rows"], Migration(rename={"seen": "rows"}))


def test_a_rekey_is_for_a_map_and_must_give_keys_of_its_form():
    windowed = sp.read.from_callback("in", schema=SCHEMA).group_by("k").window(
        sp.tumbling("ts", "1min")).aggregate({"n": sp.count()}, name="w").operators
    regrouped = sp.read.from_callback("in", schema=SCHEMA).group_by("x").window(
        sp.tumbling("ts", "1min")).aggregate({"n": sp.count()}, name="w").operators
    with pytest.raises(MigrationError, match="re-key only a map's state"):
        plan(_checkpoint(windowed), describe(regrouped), [], Migration(rekey={"w": str}))
    (edit,) = plan(_checkpoint(_operators()), describe(_operators(key="x")), [],
                   Migration(rekey={"sum": lambda k: (k, 1)}))[0]
    rows = pd.DataFrame({"key": ['"a"'], "value": ["1"]})
    with pytest.raises(MigrationError, match=r"returned \('a', 1\), but the operator's keys "
                                             r"have 1 part"):
        _edited(edit, rows)

