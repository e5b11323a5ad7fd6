"""Driver and distributed mode give the same sinks, state, changelogs and dead letters for every
kind of operator, and the report says where each batch ran."""

import dataclasses

import pandas as pd
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

import ops as sp
from ops.testing import run_records
from state.lake import tables
from tests.ops.runtime.same_results import assert_same_results, comparable

SCHEMA = {"k": "string", "x": "long", "ts": "timestamp"}


def records(batch, n, keys):
    return [{"k": f"k{(i * 7 + batch) % keys}", "x": (i * 13 + batch) % 11 - 3,
             "ts": f"2026-01-01T00:{(batch * 5 + i // 4) % 60:02d}:{(i * 17) % 60:02d}Z"}
            for i in range(n)]


BATCHES = [records(0, 60, 9),
           records(1, 40, 12) + [{"k": None, "x": 1}, {"k": "k1", "x": 2, "ts": "2026-01-01T00:59:00Z"}]]


def run_batch_by_batch(spark, pipeline, warehouse, batches=BATCHES):
    """One run per batch, so state crosses checkpoints; what the last run left, every report."""
    runs = [run_records(pipeline, batch, spark=spark, warehouse=warehouse) for batch in batches]
    return dataclasses.replace(runs[-1], reports=[r for run in runs for r in run.reports])


def running(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def running_vectorized(op, md, data):
    previous = sp.get(op, md)
    totals = data.groupby("k", sort=False)["x"].cumsum() + data["k"].map(previous)
    sp.set(op, md, totals.groupby(data["k"]).last())
    return data.assign(total=totals)


def rows_seen(op, md, data):  # unkeyed state: one value for the stream
    seen = sp.get(op, md) + len(data)
    sp.set(op, md, seen)
    return data.assign(seen=seen)


def source(key="k"):
    return sp.read.from_callback("events", schema=SCHEMA, key=key)


# Each pipeline chains two operator kinds (two stages), so four cover them all.
PIPELINES = {
    "per_key_map, filter, group_by": lambda: source().map(running, state=0)
    .filter(lambda d: d["x"] > -2).group_by("k").agg(n=sp.count(), total=sp.sum_("total"))
    .write.to_table("totals"),
    "vectorized_map, window": lambda: source()
    .map(running_vectorized, state=0, vectorized=True)
    .group_by("k").window(sp.tumbling("ts", "5min", grace="1min"))
    .agg(n=sp.count(), top=sp.max_("total")).write.to_table("windows"),
    "unkeyed_map, session": lambda: source(key=None).map(rows_seen, state=0)
    .group_by("k").window(sp.session("ts", "2min")).agg(n=sp.count(), seen=sp.max_("seen"))
    .write.to_table("sessions"),
    "stateless map, as_table": lambda: source().map(lambda d: d[["k", "x"]]).as_table("k")
    .write.to_table("latest"),
}


@pytest.fixture
def three_partitions(spark):
    """Distributed stages split into three buckets (windows' stream time into three ranges)."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_distributed_mode_gives_the_driver_modes_results(spark, tmp_path, name, three_partitions):
    runs = {}
    pipeline = PIPELINES[name]().named("modes_" + name.split(",")[0].replace(" ", "_"))
    for mode in ("driver", "distributed"):
        runs[mode] = run_batch_by_batch(spark, pipeline.with_mode(mode), str(tmp_path / mode))
    assert_same_results(spark, pipeline, runs["driver"], runs["distributed"])
    assert any(len(frame) for frame in runs["driver"].outputs.values())
    batches = [batch for report in runs["distributed"].reports for batch in report.batches]
    assert {batch.mode for batch in batches} == {"distributed"}
    driver = [batch for report in runs["driver"].reports for batch in report.batches]
    assert [(b.rows_in, b.rows_out, b.dead_letters, b.keys) for b in batches] == \
        [(b.rows_in, b.rows_out, b.dead_letters, b.keys) for b in driver]
    assert batches[0].keys == 9  # every keyed kind reports the keys it saw
    if "window" in name or "session" in name:  # some records were late, counted alike
        clocks = [value for frame in runs["distributed"].state.values()
                  for key, value in zip(frame["key"], frame["value"]) if key == "__clock__"]
        assert len(clocks) == 1 and clocks[0]["late"] > 0


def test_a_table_join_runs_on_executors_with_the_same_result(spark, tmp_path):
    def pipeline(mode):
        left = sp.read.from_callback("orders", schema={"user": "string", "total": "double"},
                                     key="user")
        right = sp.read.from_callback("users", schema={"user": "string", "name": "string"},
                                      key="user")
        return (left.merge(right).join_tables(on="user", left=("orders", ("total",)),
                                              right=("users", ("name",)), how="left")
                .write.to_table("joined").named("modes_join").with_mode(mode))

    tables = {}
    for mode in ("driver", "distributed"):
        joined, warehouse = pipeline(mode), str(tmp_path / mode)
        joined.publish(spark, [{"user": "u1", "total": 3.0}, {"user": "u2", "total": 1.5}],
                       warehouse, source="orders")
        joined.publish(spark, [{"user": "u1", "name": "Ann"}], warehouse, source="users")
        joined.run_once(spark, warehouse)
        joined.publish(spark, [{"user": "u2", "name": "Bo"}, {"user": "u1", "total": 4.0}],
                       warehouse, source="users")
        joined.run_once(spark, warehouse)
        tables[mode] = joined.read_sink(spark, "joined", warehouse)
    assert tables["driver"].drop(columns=["_batch_id"]).to_dict("records") == \
        tables["distributed"].drop(columns=["_batch_id"]).to_dict("records")


def test_a_function_failing_on_an_executor_names_operator_key_and_traceback(spark, tmp_path):
    def explode(op, md, data):
        if md.key == "k3":
            raise ValueError("no k3 here")
        return data

    pipeline = (source().map(explode, state=0, name="exploder").write.to_delta("out")
                .named("modes_failing").with_mode("distributed"))
    with pytest.raises(sp.OperatorError) as failure:
        run_records(pipeline, BATCHES[0], spark=spark, warehouse=str(tmp_path))
    message = str(failure.value)
    assert "operator 'exploder'" in message and "key 'k3'" in message
    assert "no k3 here" in message and 'in explode' in message  # the executor's traceback
    assert "at org.apache" not in message  # not the JVM's
    assert sp.describe(spark, pipeline, str(tmp_path)).checkpoint_id is None


def test_tracked_variables_and_table_lookups_are_refused_in_distributed_mode(spark, tmp_path):
    counter = sp.track("counter", 0)
    tracked = source().write.to_delta("out").named("modes_tracked").track(counter)
    with pytest.raises(sp.ConfigError, match="tracked variables"):
        tracked.run_once(spark, str(tmp_path), mode="distributed")
    lookup = (source().join_table(str(tmp_path / "none"), on="k").write.to_delta("out")
              .named("modes_lookup").with_mode("distributed"))
    with pytest.raises(sp.ConfigError, match="driver mode"):
        lookup.run_once(spark, str(tmp_path))


def test_auto_mode_picks_by_the_first_batchs_size(spark, tmp_path, monkeypatch):
    pipeline = source().write.to_delta("out").named("modes_auto").with_mode("auto")  # no operators
    run = run_records(pipeline, BATCHES[0], spark=spark, warehouse=str(tmp_path / "small"))
    assert run.reports[0].batches[0].mode == "driver"
    monkeypatch.setattr("ops.runtime.modes.AUTO_DISTRIBUTED_ROWS", 10)
    run = run_records(pipeline, BATCHES[0], spark=spark, warehouse=str(tmp_path / "large"))
    assert run.reports[0].batches[0].mode == "distributed"
    assert len(run.outputs["out"]) == len(BATCHES[0])  # rows pass through


def test_a_bad_mode_is_refused_with_the_choices():
    with pytest.raises(sp.PipelineDefinitionError, match="driver, distributed, auto"):
        source().write.to_delta("out").named("p").with_mode("cluster")


def test_a_pipeline_switches_modes_between_runs(spark, tmp_path):
    warehouse = str(tmp_path / "switch")
    pipeline = PIPELINES["vectorized_map, window"]().named("modes_switch")
    for number, batch in enumerate(BATCHES):
        pipeline.publish(spark, batch, warehouse)
        pipeline.run_once(spark, warehouse, mode="distributed" if number % 2 else "driver")
    oracle = run_records(pipeline, *BATCHES, spark=spark, warehouse=str(tmp_path / "oracle"))
    got = pipeline.read_sink(spark, "windows", warehouse)
    pd.testing.assert_frame_equal(got.drop(columns=["_batch_id"]),
                                  oracle.outputs["windows"].drop(columns=["_batch_id"]),
                                  check_dtype=False)


@pytest.mark.parametrize("order_by", [("x",), ()], ids=["order_by", "the_tables_order"])
def test_a_delta_source_is_read_by_executors_in_the_drivers_order(spark, tmp_path, order_by):
    source_path = str(tmp_path / "input")
    written = []
    for batch in range(2):
        xs = [batch * 30 + (i * 7) % 30 for i in range(30)]  # not sorted: the files keep this order
        keys = [f"k{(i * 5 + batch) % 7}" if i != 3 else None for i in range(30)]
        rows = pd.DataFrame({"k": keys, "x": xs})
        writer = spark.createDataFrame(rows, "k string, x long").coalesce(2).write.format("delta")
        writer.mode("append").option("delta.enableChangeDataFeed", "true").save(source_path)
        written += [x for k, x in zip(keys, xs) if k is not None]
    stream = sp.read.from_delta(source_path, key="k", order_by=order_by, max_versions=1)
    pipeline = stream.map(running, state=0).write.to_delta("out").named("modes_delta_source")
    runs = {mode: run_records_from_delta(spark, pipeline.with_mode(mode), str(tmp_path / mode))
            for mode in ("driver", "distributed")}
    for part in ("out", "dead letters"):
        pd.testing.assert_frame_equal(comparable(runs["distributed"][part]),
                                      comparable(runs["driver"][part]), obj=part)
    assert len(runs["driver"]["dead letters"]) == 2 and len(runs["driver"]["out"]) == 58
    delivered = runs["distributed"]["out"].sort_values(["_batch_id", "_row"])["x"].tolist()
    assert delivered == (sorted(written) if order_by else written)


def run_records_from_delta(spark, pipeline, warehouse):
    report = pipeline.run_once(spark, warehouse)
    assert [batch.mode for batch in report.batches] == [pipeline.mode] * 2
    dead = tables.read(spark, pipeline.layout(warehouse).dead_letters).toPandas()
    return {"out": pipeline.read_sink(spark, "out", warehouse),
            "dead letters": dead.drop(columns=["run_id", "written_at"], errors="ignore")}


def test_each_bucket_gets_a_shuffle_partition_of_its_own(spark):
    from pyspark.sql import functions as F

    from ops.runtime.distributed import partition_tags
    for partitions in (1, 3, 8, 17):
        tags = partition_tags(partitions)
        placed = (spark.createDataFrame([(t,) for t in tags], "tag int").repartition(partitions, "tag")
                  .select("tag", F.spark_partition_id().alias("partition")).collect())
        assert sorted((tags.index(row["tag"]), row["partition"]) for row in placed) == \
            [(p, p) for p in range(partitions)]


# Times: an instant column (Delta's and Spark's ``timestamp``) is UTC instants for the functions
# in both modes, and so reaches a sink with one type whichever mode wrote a batch.
#: winter and summer times (another offset in a zone with daylight saving time) and a null one
TIMED_BATCHES = [[{"k": "a", "ts": "2026-01-01T00:00:10Z", "x": 1},
                  {"k": "b", "ts": "2026-07-01T12:00:00Z", "x": 2},
                  {"k": "a", "ts": "2026-01-01T00:00:50Z", "x": 3}],
                 [{"k": "b", "ts": "2026-01-01T00:01:10Z", "x": 4},
                  {"k": "a", "x": 5},
                  {"k": "a", "ts": "2026-07-01T12:00:20Z", "x": 6}]]
INSTANT, NAIVE = "datetime64[ns, UTC]", "datetime64[ns]"


def with_wall_clock(data):
    """A naive time the user makes: naive in both modes (``timestamp_ntz`` between stages)."""
    return data.assign(wall=data["ts"].dt.tz_localize(None))


def running_seen(op, md, data):
    """A running sum that tells, in its rows, the dtypes its function got."""
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.drop(columns=["wall"]).assign(total=total, ts_type=str(data["ts"].dtype),
                                              wall_type=str(data["wall"].dtype))


@pytest.fixture(params=["UTC", "America/New_York"])
def time_zone(spark, request):
    """The session's time zone, in which Spark's pandas conversion shows instants."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", request.param)
    yield request.param
    spark.conf.set("spark.sql.session.timeZone", before)


def test_times_reach_a_sink_alike_when_a_pipeline_switches_to_distributed(spark, tmp_path, time_zone):
    # a stateless map (a stage of its own on executors, then Spark's rows again) and a keyed one
    pipeline = (source().map(with_wall_clock).map(running_seen, state=0).write.to_delta("out")
                .named("modes_times"))
    warehouse = str(tmp_path)
    for batch, mode in zip(TIMED_BATCHES, ("driver", "distributed"), strict=True):
        pipeline.publish(spark, batch, warehouse)
        pipeline.run_once(spark, warehouse, mode=mode)
    sink = tables.read(spark, pipeline.table_path("out", warehouse))
    assert sink.schema["ts"].dataType == TimestampType()  # as driver mode made the table
    got = (sink.orderBy("_batch_id", "_row")  # instants as epoch micros: no time zone involved
           .select("_batch_id", "k", F.unix_micros("ts"), "x", "total", "ts_type", "wall_type")
           .collect())
    micros = [None if "ts" not in r else pd.Timestamp(r["ts"]).value // 1000
              for batch in TIMED_BATCHES for r in batch]
    batches, keys = [1, 1, 1, 2, 2, 2], ["a", "b", "a", "b", "a", "a"]
    xs, totals = [1, 2, 3, 4, 5, 6], [1, 2, 4, 6, 9, 15]
    assert [tuple(row) for row in got] == [
        (batch, k, t, x, total, INSTANT, NAIVE)  # the same dtypes in both modes
        for batch, k, t, x, total in zip(batches, keys, micros, xs, totals, strict=True)]


def test_a_delta_sources_times_reach_the_function_as_instants_in_both_modes(spark, tmp_path, time_zone):
    events = str(tmp_path / "events")
    rows = [dict(r, ts=pd.Timestamp(r["ts"]) if "ts" in r else None) for r in TIMED_BATCHES[0]]
    frame = pd.DataFrame(rows)[["k", "ts", "x"]]
    pipeline = (sp.read.from_delta(events, key="k", name="events").map(with_wall_clock)
                .map(running_seen, state=0).write.to_delta("out").named("modes_delta_times"))
    for n, mode in enumerate(("driver", "distributed")):
        # Spark writes the source: its ts is a Delta timestamp (instants), as a user's table is
        spark.createDataFrame(frame.assign(x=frame["x"] + 10 * n)).write.format("delta") \
            .mode("append").option("delta.enableChangeDataFeed", "true").save(events)
        pipeline.run_once(spark, str(tmp_path), mode=mode)
    sink = tables.read(spark, pipeline.table_path("out", str(tmp_path)))
    got = sink.select("_batch_id", F.unix_micros("ts"), "ts_type").collect()
    micros = [pd.Timestamp(r["ts"]).value // 1000 for r in rows]
    assert sorted(map(tuple, got)) == sorted((batch, t, INSTANT) for batch in (1, 2) for t in micros)


def timer_seen(op, md, data):
    """An event-time timer a minute after a key's latest row; rows tell the dtype the function
    got and the watermark (from the event times distributed mode measured the batch before)."""
    if md.timer is not None:
        return pd.DataFrame({"k": [md.key], "fired": [md.timer]})
    sp.set_timer(op, md, at=data["ts"].max() + pd.Timedelta("1min"))
    return data.assign(ts_type=str(data["ts"].dtype), watermark=md.watermark)


TIMED_PIPELINES = {
    "window": lambda: source().group_by("k").window(sp.tumbling("ts", "1min"))
    .agg(n=sp.count(), total=sp.sum_("x")).write.to_table("out"),
    "timers": lambda: source().filter(lambda d: d["ts"].notna())
    .map(timer_seen, state=0, timers=True, event_time="ts", delay="10s").write.to_delta("out"),
}


def sink_rows(spark, pipeline, warehouse):
    """Sink ``out``'s schema and rows (but ``_row``, numbered per mode), instants as epoch
    micros: what they are, whatever the session's time zone."""
    sink = tables.read(spark, pipeline.table_path("out", warehouse)).drop("_row")
    columns = [F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, TimestampType)
               else F.col(f.name) for f in sink.schema.fields]
    return sink.schema.simpleString(), sorted(map(tuple, sink.select(*columns).collect()), key=str)


# a zone with daylight saving time: a naive time taken as UTC would be 4 or 5 hours off
@pytest.mark.parametrize("time_zone", ["America/New_York"], indirect=True)
@pytest.mark.parametrize("name", sorted(TIMED_PIPELINES))
def test_event_times_of_windows_and_timers_are_alike_in_both_modes(spark, tmp_path, time_zone, name):
    pipeline = TIMED_PIPELINES[name]().named("modes_times_" + name)
    # b's time is late (its window closed at 12:31) only by the stream time 13:00 before it
    batches = [*TIMED_BATCHES, [{"k": "a", "ts": "2026-07-01T13:00:00Z", "x": 7},
                                {"k": "b", "ts": "2026-07-01T12:30:00Z", "x": 8}]]
    for warehouse, modes in (("switched", ("driver", "distributed", "distributed")),
                             ("driver", ("driver",) * 3)):
        for batch, mode in zip(batches, modes, strict=True):
            pipeline.publish(spark, batch, str(tmp_path / warehouse))
            pipeline.run_once(spark, str(tmp_path / warehouse), mode=mode)
    assert sink_rows(spark, pipeline, str(tmp_path / "switched")) == \
        sink_rows(spark, pipeline, str(tmp_path / "driver"))
