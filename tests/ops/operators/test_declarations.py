"""Every operator declares its state: stateless, keyed (by which columns) or unkeyed."""

import ops as sp
from ops import StateKind


def keyed_stream():
    return sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long", "ts": "timestamp"})


def unkeyed_stream():
    return sp.read.from_callback("in", schema={"k": "string", "x": "long"})


def last(stream):
    return stream.operators[-1].declares()


def keep_state(op, md, data):
    return data


def test_maps_follow_the_stream_key():
    assert last(keyed_stream().map(keep_state, state=0)) == sp.StateDeclaration(
        StateKind.KEYED, ("k",), ("keep_state",))
    assert last(unkeyed_stream().map(keep_state, state=0)).kind is StateKind.UNKEYED
    assert last(keyed_stream().map(lambda data: data)).kind is StateKind.STATELESS
    assert last(keyed_stream().filter(lambda data: data["x"] > 0)).kind is StateKind.STATELESS


def test_aggregations_tables_and_joins_are_keyed_by_their_own_columns():
    grouped = last(unkeyed_stream().group_by("k").agg(n=sp.count()))
    assert (grouped.kind, grouped.keys, grouped.names) == (StateKind.KEYED, ("k",), ("aggregate",))
    assert last(unkeyed_stream().as_table("k")).keys == ("k",)
    window = last(keyed_stream().group_by("k").window(sp.tumbling("ts", "1min")).agg(n=sp.count()))
    assert (window.kind, window.keys, window.shared) == (StateKind.KEYED, ("k",), ("__clock__",))
    session = last(keyed_stream().group_by("k").window(sp.session("ts", "5min")).agg(n=sp.count()))
    assert session.shared == ("__clock__",)
    joined = last(sp.read.from_callback("l", schema={"u": "string", "a": "long"}, )
                  .merge(sp.read.from_callback("r", schema={"u": "string", "b": "long"}))
                  .join_tables(on="u", left=("l", ("a",)), right=("r", ("b",))))
    assert (joined.kind, joined.keys) == (StateKind.KEYED, ("u",))
    lookup = last(keyed_stream().join_table("/nowhere", on="k"))
    assert lookup.kind is StateKind.STATELESS


def test_an_operator_that_declares_nothing_is_unkeyed_so_it_sees_the_whole_batch():
    class Counter(sp.Operator):
        name = "counter"

        def apply(self, scope, frame):
            return frame

    assert Counter().declares() == sp.StateDeclaration(StateKind.UNKEYED, (), ("counter",))


def test_only_table_operators_can_feed_a_state_table():
    assert keyed_stream().map(keep_state, state=0).operators[-1].table_keys is None
    assert unkeyed_stream().group_by("k").agg(n=sp.count()).operators[-1].table_keys == ("k",)
