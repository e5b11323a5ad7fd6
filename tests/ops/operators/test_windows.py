"""Event-time windows: explicit batches in, expected rows out per batch (late and out-of-order
data, grace, hopping, final vs changes), batching independence, and a restart mid-stream."""

import json

import pandas as pd
import pytest

import ops as sp
from ops import BatchScope
from state import PipelineLayout, StateStore
from state.lake import tables


def at(text):
    return pd.Timestamp(f"2026-01-01 {text}", tz="UTC")


def events(*rows):
    return pd.DataFrame([{"k": k, "ts": at(t), "x": x} for k, t, x in rows])


class Feeder:
    """Runs one window (or session) operator over batches with in-memory state (nothing
    checkpointed) and returns each batch's rows as tuples, nulls as None."""

    def __init__(self, window, emit="changes", kind=sp.WindowAggregate, having=None,
                 per_record=False, **aggs):
        self.op = kind(name="w", keys=("k",), window=window,
                       aggs=tuple((aggs or {"n": sp.count()}).items()), emit=emit,
                       having=having, per_record=per_record)
        self.store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
        self.batch = 0

    def feed(self, frame):
        self.batch += 1
        out = self.op.apply(BatchScope("p", self.batch, ("k",), self.store), frame)
        return [(r["k"], r["window_start"].strftime("%H:%M:%S"),
                 None if pd.isna(r["window_end"]) else r["window_end"].strftime("%H:%M:%S"),
                 *(None if pd.isna(r[n]) else r[n] for n, _ in self.op.aggs), r["_change"])
                for r in out.to_dict("records")]


def test_tumbling_changes_with_late_and_out_of_order_data(caplog):
    feeder = Feeder(sp.tumbling("ts", "1min"))
    assert feeder.feed(events(("a", "00:00:10", 1), ("a", "00:00:50", 1), ("a", "00:01:05", 1))) == [
        ("a", "00:00:00", "00:01:00", 2, "insert"), ("a", "00:01:00", "00:02:00", 1, "insert")]
    # 00:00:30 arrives after stream time reached 00:01:05: its window ended at 00:01:00 -> late
    assert feeder.feed(events(("a", "00:00:30", 1), ("a", "00:01:30", 1))) == [
        ("a", "00:01:00", "00:02:00", 2, "update")]
    assert "1 late record(s) dropped" in caplog.text
    assert feeder.store.operator("w").get("__clock__")["late"] == 1


def test_grace_period_admits_out_of_order_records():
    feeder = Feeder(sp.tumbling("ts", "1min", grace="30s"))
    feeder.feed(events(("a", "00:00:10", 1), ("a", "00:01:05", 1)))
    assert feeder.feed(events(("a", "00:00:30", 1))) == [("a", "00:00:00", "00:01:00", 2, "update")]
    assert feeder.feed(events(("b", "00:01:40", 1), ("a", "00:00:40", 1))) == [
        ("b", "00:01:00", "00:02:00", 1, "insert")]  # stream time 00:01:40 >= 00:01:00 + 30s


def test_final_emits_each_window_once_when_it_closes():
    feeder = Feeder(sp.tumbling("ts", "1min"), emit="final", total=sp.sum_("x"))
    assert feeder.feed(events(("a", "00:00:10", 1), ("a", "00:00:50", 2))) == []
    assert feeder.feed(events(("a", "00:01:05", 5), ("b", "00:01:10", 1))) == [
        ("a", "00:00:00", "00:01:00", 3, "insert")]
    assert feeder.feed(events(("a", "00:02:00", 1))) == [
        ("a", "00:01:00", "00:02:00", 5, "insert"), ("b", "00:01:00", "00:02:00", 1, "insert")]
    held = [key for key in feeder.store.operator("w").held_keys() if key != "__clock__"]
    assert held == [("a", int(at("00:02:00").timestamp() * 1000))]  # closed ones dropped


def test_a_clock_saved_by_an_earlier_release_with_its_open_window_list_still_works():
    feeder = Feeder(sp.tumbling("ts", "1min"), emit="final")
    feeder.feed(events(("a", "00:00:10", 1), ("b", "00:00:20", 1)))
    state = feeder.store.operator("w")
    # earlier releases listed the open windows in the clock; they are now found in the state
    state.set("__clock__", {**state.get("__clock__"), "open": [["a", 0]]})
    assert feeder.feed(events(("a", "00:01:30", 1))) == [
        ("a", "00:00:00", "00:01:00", 1, "insert"), ("b", "00:00:00", "00:01:00", 1, "insert")]
    assert "open" not in state.get("__clock__")


def test_hopping_windows_hold_each_record_in_every_window_covering_it():
    feeder = Feeder(sp.hopping("ts", "2min", "1min"))
    assert feeder.feed(events(("a", "00:01:30", 1))) == [
        ("a", "00:00:00", "00:02:00", 1, "insert"), ("a", "00:01:00", "00:03:00", 1, "insert")]


def test_final_results_do_not_depend_on_batching():
    rows = [("a", "00:00:10", 1), ("b", "00:00:20", 2), ("a", "00:01:10", 3), ("a", "00:00:40", 4),
            ("b", "00:02:30", 5), ("a", "00:01:50", 6), ("a", "00:00:55", 7), ("c", "00:05:00", 8)]
    window = sp.tumbling("ts", "1min", grace="20s")
    one = Feeder(window, emit="final", total=sp.sum_("x")).feed(events(*rows))
    split = Feeder(window, emit="final", total=sp.sum_("x"))
    many = [row for start in range(0, len(rows), 3) for row in split.feed(events(*rows[start:start + 3]))]
    assert sorted(one) == sorted(many)
    assert ("a", "00:00:00", "00:01:00", 5, "insert") in one  # 00:00:55 was later than its grace


def test_bad_window_definitions_are_refused():
    with pytest.raises(sp.PipelineDefinitionError, match="multiple of its advance"):
        sp.hopping("ts", "5min", "2min")
    with pytest.raises(sp.PipelineDefinitionError, match="emit must be"):
        sp.WindowAggregate(name="w", keys=("k",), window=sp.tumbling("ts", "1min"),
                           aggs=(("n", sp.count()),), emit="sometimes")


def test_windowed_table_survives_a_restart_mid_stream(spark, warehouse):
    pipeline = (sp.read.from_callback("clicks", schema={"k": "string", "ts": "timestamp", "x": "long"},
                                      max_versions=1)
                .group_by("k").window(sp.tumbling("ts", "1min")).agg(emit="final", total=sp.sum_("x"))
                .write.to_table("per_minute")).named("clicks_per_minute")
    for rows in (["00:00:10", "00:00:20"], ["00:01:10"], ["00:02:10"]):
        pipeline.publish(spark, [{"k": "a", "ts": at(t).isoformat(), "x": 1} for t in rows], warehouse)
    pipeline.run_once(spark, warehouse, max_batches=1)
    pipeline.run_once(spark, warehouse)  # a new run: the open window comes back from the checkpoint
    table = pipeline.read_sink(spark, "per_minute", warehouse)
    assert [(str(r.window_start.time()), r.total) for r in table.itertuples()] == [
        ("00:00:00", 2), ("00:01:00", 1)]


def test_only_windows_a_checkpoint_held_get_tombstones_when_they_close(spark, warehouse):
    pipeline = (sp.read.from_callback("clicks", schema={"k": "string", "ts": "timestamp", "x": "long"},
                                      max_versions=1)
                .group_by("k").window(sp.tumbling("ts", "1min"))
                .agg(emit="final", name="minutes", total=sp.sum_("x"))
                .write.to_table("per_minute")).named("tombstones")
    # 00:00 is checkpointed open, then closed; 00:01 opens and closes between two checkpoints
    for rows in (["00:00:10"], ["00:01:10", "00:02:30"]):
        pipeline.publish(spark, [{"k": "a", "ts": at(t).isoformat(), "x": 1} for t in rows], warehouse)
    pipeline.run_once(spark, warehouse)
    state = tables.read(spark, pipeline.layout(warehouse).state).where(
        "operator = 'minutes'").toPandas()
    midnight, minute = int(at("00:00:00").timestamp() * 1000), 60_000
    windows = state.assign(start=[json.loads(key)[1] - midnight if key.startswith("[") else None
                                  for key in state["key"]])
    deleted = windows[windows["deleted"]]
    assert deleted["start"].tolist() == [0]  # 00:00 only: 00:01 was never in a checkpoint
    assert set(windows.loc[~windows["deleted"], "start"].dropna()) == {0, 2 * minute}

    pipeline.publish(spark, [{"k": "a", "ts": at("00:03:10").isoformat(), "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)  # a new run reads state back: closed windows stay closed
    table = pipeline.read_sink(spark, "per_minute", warehouse)
    assert [(str(r.window_start.time()), r.total) for r in table.itertuples()] == [
        ("00:00:00", 1), ("00:01:00", 1), ("00:02:00", 1)]
    latest = sp.read_state(spark, pipeline, "minutes", warehouse=warehouse)
    assert [key[1] - midnight for key in latest["key"] if isinstance(key, (list, tuple))] == [3 * minute]


def test_windowed_sql_table(spark, warehouse):
    clicks = sp.read.from_callback("clicks", schema={"page": "string", "ts": "timestamp", "x": "long"})
    pipeline = sp.sql("""CREATE TABLE page_minutes AS SELECT page, COUNT(*) AS views, SUM(x) AS total
                         FROM clicks WINDOW TUMBLING (SIZE 1 MINUTE, GRACE PERIOD 10 SECONDS)
                         GROUP BY page EMIT FINAL""", streams={"clicks": clicks}, timestamp="ts")
    pipeline.publish(spark, [{"page": p, "ts": at(t).isoformat(), "x": x} for p, t, x in [
        ("home", "00:00:05", 1), ("home", "00:00:50", 2), ("docs", "00:00:59", 4),
        ("home", "00:01:05", 8), ("home", "00:00:58", 16),    # within grace: counts
        ("home", "00:01:20", 32), ("home", "00:00:30", 64)]], warehouse)  # past grace: dropped
    pipeline.run_once(spark, warehouse)
    table = pipeline.read_sink(spark, "page_minutes", warehouse)
    assert [(r.page, str(r.window_start.time()), str(r.window_end.time()), r.views, r.total)
            for r in table.itertuples()] == [("docs", "00:00:00", "00:01:00", 1, 4),
                                             ("home", "00:00:00", "00:01:00", 3, 19)]


def SessionFeeder(window, emit="changes", **aggs):
    return Feeder(window, emit, kind=sp.SessionAggregate, **aggs)


def test_sessions_grow_merge_and_close():
    feeder = SessionFeeder(sp.session("ts", "1min", grace="2min"), total=sp.sum_("x"))
    assert feeder.feed(events(("a", "00:00:00", 1), ("a", "00:00:30", 2), ("a", "00:02:00", 4))) == [
        ("a", "00:00:00", "00:00:30", 3, "update"), ("a", "00:02:00", "00:02:00", 4, "update")]
    # 00:01:15 is within a minute of both sessions: they merge. As in ksqlDB, each absorbed
    # session's tombstone (its start and end) comes before the merged session's row, the one
    # whose start the merged session keeps too
    assert feeder.feed(events(("a", "00:01:15", 8))) == [
        ("a", "00:00:00", "00:00:30", None, "delete"), ("a", "00:02:00", "00:02:00", None, "delete"),
        ("a", "00:00:00", "00:02:00", 15, "update")]
    # a record inside a session changes its values only: an update, no tombstone
    assert feeder.feed(events(("a", "00:01:00", 1))) == [("a", "00:00:00", "00:02:00", 16, "update")]


def test_sessions_out_of_order_merge_tombstones_every_replaced_session_per_batch_or_record():
    """Out of order: 00:03:00 and 00:00:00 open two sessions, 00:01:30 then bridges them. Per
    batch, only what was shown before the batch gets a tombstone; per record, every step."""
    rows = (("a", "00:03:00", 1), ("a", "00:00:00", 2), ("a", "00:01:30", 4))
    per_batch = SessionFeeder(sp.session("ts", "2min", grace="5min"), total=sp.sum_("x"))
    assert per_batch.feed(events(*rows[:2])) == [
        ("a", "00:03:00", "00:03:00", 1, "update"), ("a", "00:00:00", "00:00:00", 2, "update")]
    assert per_batch.feed(events(rows[2])) == [
        ("a", "00:00:00", "00:00:00", None, "delete"), ("a", "00:03:00", "00:03:00", None, "delete"),
        ("a", "00:00:00", "00:03:00", 7, "update")]
    per_record = Feeder(sp.session("ts", "2min", grace="5min"), kind=sp.SessionAggregate,
                        per_record=True, total=sp.sum_("x"))
    assert per_record.feed(events(*rows)) == [
        ("a", "00:03:00", "00:03:00", 1, "update"), ("a", "00:00:00", "00:00:00", 2, "update"),
        ("a", "00:00:00", "00:00:00", None, "delete"), ("a", "00:03:00", "00:03:00", None, "delete"),
        ("a", "00:00:00", "00:03:00", 7, "update")]


def test_session_having_hides_sessions_and_tombstones_one_that_stops_passing():
    def big(values):
        return values["total"] >= 3

    changes = Feeder(sp.session("ts", "1min", grace="5min"), kind=sp.SessionAggregate,
                     having=big, total=sp.sum_("x"))
    assert changes.feed(events(("a", "00:00:00", 1), ("b", "00:00:00", 5))) == [
        ("b", "00:00:00", "00:00:00", 5, "update")]
    assert changes.feed(events(("a", "00:00:30", 2), ("b", "00:00:20", -4))) == [
        ("a", "00:00:00", "00:00:30", 3, "update"),     # a passes now
        ("b", "00:00:00", "00:00:00", None, "delete"),  # b's shown row goes; its new one fails
    ]
    # within a's session: the same window, and it fails now: its row goes
    assert changes.feed(events(("a", "00:00:10", -3))) == [("a", "00:00:00", "00:00:30", None, "delete")]
    final = Feeder(sp.session("ts", "1min"), emit="final", kind=sp.SessionAggregate,
                   having=big, total=sp.sum_("x"))
    final.feed(events(("a", "00:00:00", 1), ("b", "00:00:00", 5)))
    assert final.feed(events(("c", "00:05:00", 1))) == [("b", "00:00:00", "00:00:00", 5, "insert")]


def test_session_final_and_late_records(caplog):
    feeder = SessionFeeder(sp.session("ts", "1min"), emit="final")
    assert feeder.feed(events(("a", "00:00:00", 1), ("b", "00:00:10", 1), ("a", "00:00:40", 1))) == []
    assert feeder.feed(events(("a", "00:02:00", 1))) == [
        ("a", "00:00:00", "00:00:40", 2, "insert"), ("b", "00:00:10", "00:00:10", 1, "insert")]
    assert feeder.feed(events(("b", "00:00:20", 1))) == []  # its session closed: late
    assert "1 late record(s) dropped" in caplog.text


def test_session_results_do_not_depend_on_batching():
    rows = [("a", "00:00:00", 1), ("a", "00:00:50", 2), ("b", "00:01:00", 3), ("a", "00:02:30", 4),
            ("a", "00:01:40", 5), ("b", "00:04:00", 6), ("a", "00:09:00", 7)]
    window = sp.session("ts", "1min")
    one = SessionFeeder(window, emit="final", total=sp.sum_("x")).feed(events(*rows))
    split = SessionFeeder(window, emit="final", total=sp.sum_("x"))
    many = [r for start in range(0, len(rows), 2) for r in split.feed(events(*rows[start:start + 2]))]
    assert sorted(one) == sorted(many)
    # 00:01:40 came after stream time closed the first session, so it joined the second one
    assert [r for r in sorted(one) if r[0] == "a"][:2] == [
        ("a", "00:00:00", "00:00:50", 3, "insert"), ("a", "00:01:40", "00:02:30", 9, "insert")]


def test_session_window_in_sql():
    clicks = sp.read.from_callback("clicks", schema={"page": "string", "ts": "timestamp"})
    pipeline = sp.sql("CREATE TABLE visits AS SELECT page, COUNT(*) AS n FROM clicks "
                      "WINDOW SESSION (5 MINUTES, GRACE PERIOD 1 MINUTE) GROUP BY page EMIT FINAL",
                      streams={"clicks": clicks}, timestamp="ts")
    op = pipeline.stream.operators[-1]
    assert isinstance(op, sp.SessionAggregate) and op.emit == "final"
    assert (op.window.gap, op.window.grace) == (pd.Timedelta("5min"), pd.Timedelta("1min"))


def test_session_merge_candidates_and_late_records_follow_kafka_streams_exactly():
    """Kafka Streams' KStreamSessionWindowAggregate with its session store's retention (gap +
    grace) and no record cache: a session merges a record while ``end > stream time before it -
    gap - grace``; a record is dropped only when the session it would make ends before ``stream
    time - gap - grace`` (strictly); EMIT FINAL emits a session once ``end < stream time - gap -
    grace``. Gap 1 min, grace 30 s: stream time 00:01:40 puts the bound at 00:00:10."""
    changes = SessionFeeder(sp.session("ts", "1min", grace="30s"))
    assert changes.feed(events(("a", "00:00:00", 1), ("b", "00:01:40", 1))) == [
        ("a", "00:00:00", "00:00:00", 1, "update"), ("b", "00:01:40", "00:01:40", 1, "update")]
    # 00:00:10 is exactly at the bound: [00:00:00] (end 0 is not past the bound) no longer
    # merges, but the record is not late: it opens a session of its own, as in ksqlDB
    assert changes.feed(events(("a", "00:00:10", 1))) == [("a", "00:00:10", "00:00:10", 1, "update")]
    # again at the bound: [00:00:10] does not merge it either; Kafka's store puts the new
    # session under the same window, overwriting it (a count of 1, not 2)
    assert changes.feed(events(("a", "00:00:10", 1))) == [("a", "00:00:10", "00:00:10", 1, "update")]
    assert changes.feed(events(("a", "00:00:09", 1))) == []  # before the bound: late
    assert changes.store.operator("w").get("__clock__")["late"] == 1
    final = SessionFeeder(sp.session("ts", "1min", grace="30s"), emit="final")
    # stream time 00:01:30 is end + gap + grace of [00:00:00]: ksqlDB emits it only after that
    assert final.feed(events(("a", "00:00:00", 1), ("b", "00:01:30", 1))) == []
    assert final.feed(events(("b", "00:01:31", 1))) == [("a", "00:00:00", "00:00:00", 1, "insert")]


def test_chained_final_windows_close_in_the_batch_the_upstream_passes_the_outer_end():
    """Spark's chained windows (grace 0): the no-data batch after the watermark passes 00:00:10
    closes [00:00:00, 00:00:05) and, with it, the outer [00:00:00, 00:00:10). Here a FINAL
    tumbling window's rows carry the earliest window start it may still emit, so the outer
    window on its window_start closes in that same batch (it waited for a later one)."""
    pipeline = (sp.read.from_callback("hits", schema={"k": "string", "ts": "timestamp", "x": "long"})
                .group_by("k").window(sp.tumbling("ts", "5s")).agg(emit="final", n=sp.count())
                .group_by("k").window(sp.tumbling("window_start", "10s"))
                .agg(emit="final", name="outer", n=sp.sum_("n")).write.to_table("hits_10s"))
    store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)

    def feed(batch, *times):
        frame = events(*(("a", t, 1) for t in times))
        for op in pipeline.stream.operators:
            frame = op.apply(BatchScope("p", batch, ("k",), store), frame)
        return [(r["window_start"].strftime("%H:%M:%S"), r["n"]) for r in frame.to_dict("records")]

    assert feed(1, "00:00:01", "00:00:03") == []
    assert feed(2, "00:00:11") == [("00:00:00", 2)]  # [0, 5) closes upstream; stream time 11
    assert feed(3, "00:00:12", "00:00:26") == [("00:00:10", 2)]  # [10, 15) closes; time 26
