"""The exactly-once Kafka sink against a real broker: a read_committed consumer sees every row
once, whatever step of the protocol a run dies at; the at-least-once mode goes through Spark."""

import gc
import json
import signal

import pandas as pd
import pytest

import ops as sp
from ops.devservers.kafka_broker import EmbeddedKafka
from ops.devservers.process import free_port
from ops.kafka_client import create_topic, read_topic, send_json
from ops.sinks.kafka import Marker
from state import CheckpointLog, PipelineLayout
from tests.kafka import crash_child

RECORDS = [{"k": k, "x": x} for x, k in enumerate("abcabcaabbcc", start=1)]


def oracle(records):
    """Each record's running total by key, as the sink's values must hold them (any order)."""
    totals, out = {}, []
    for record in records:
        totals[record["k"]] = totals.get(record["k"], 0) + record["x"]
        out.append((record["k"], record["x"], totals[record["k"]]))
    return sorted(out)


def sent(bootstrap, topic):
    """What a read_committed consumer sees: (key, x, total) per record, and the batch headers."""
    records = read_topic(bootstrap, topic)
    values = [json.loads(r["value"]) for r in records]
    assert [r["key"] for r in records] == [v["k"] for v in values]
    return sorted((v["k"], v["x"], v["total"]) for v in values), records


@pytest.fixture
def topics(kafka, topic):
    source, target = f"{topic}_in", f"{topic}_out"
    create_topic(kafka.bootstrap, source, partitions=2)
    create_topic(kafka.bootstrap, target, partitions=2)
    send_json(kafka.bootstrap, source, RECORDS, key="k")
    return source, target


def test_each_row_once_with_batch_headers(spark, warehouse, kafka, topics):
    pipeline = crash_child.build(kafka.bootstrap, *topics)
    report = pipeline.run_once(spark, warehouse)

    values, records = sent(kafka.bootstrap, topics[1])
    assert values == oracle(RECORDS)
    assert {r["headers"]["lakestream.batch"] for r in records} == {
        str(b.batch_id) for b in report.batches}
    assert {r["headers"]["lakestream.pipeline"] for r in records} == {"kafka_crashy"}
    sink = pipeline.sink("sums")
    ctx = sp.RunContext(spark, pipeline.layout(warehouse), 0, run_id="inspect")
    assert sink.marker(ctx).batch_id == report.last_batch_id

    send_json(kafka.bootstrap, topics[0], [{"k": "a", "x": 100}], key="k")
    pipeline.run_once(spark, warehouse)
    assert sent(kafka.bootstrap, topics[1])[0] == oracle([*RECORDS, {"k": "a", "x": 100}])


STEPS = [
    "kafka_before_send:2",       # batch 1 in the topic, batch 2 not begun
    "kafka_mid_send:2",          # half of batch 2 sent in a transaction left open
    "kafka_after_commit:2",      # batch 2 committed to Kafka, checkpoint 2 not taken
    "before_checkpoint_commit:2",
    "after_checkpoint_commit:2",
]


def _crash_then_recover(spark, warehouse, children, child_env, kafka, topics, crash_at,
                        mode="driver"):
    env = dict(child_env, LAKESTREAM_CRASH_AT=crash_at, KAFKA_BOOTSTRAP=kafka.bootstrap,
               KAFKA_SOURCE=topics[0], KAFKA_TARGET=topics[1], KAFKA_MODE=mode)
    crashed = children.run("tests.kafka.crash_child", env, spark=mode == "distributed")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = crash_child.build(kafka.bootstrap, *topics, mode).run_once(spark, warehouse)

    assert report.last_batch_id == 3
    values, records = sent(kafka.bootstrap, topics[1])
    assert values == oracle(RECORDS)
    return records


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", STEPS)
def test_crash_at_each_step_then_recover_sends_each_row_once(spark, warehouse, child_env,
                                                             warm_children, kafka, topics,
                                                             crash_at):
    _crash_then_recover(spark, warehouse, warm_children, child_env, kafka, topics, crash_at)


@pytest.mark.slow
def test_crash_between_kafka_commit_and_checkpoint_on_executors(spark, warehouse, child_env,
                                                                 warm_children, kafka, topics):
    records = _crash_then_recover(spark, warehouse, warm_children, child_env, kafka, topics,
                                  "kafka_after_commit:2", mode="distributed")
    assert {r["headers"]["lakestream.batch"] for r in records} == {"1", "2", "3"}


@pytest.mark.slow
@pytest.mark.parametrize("store", ["warehouse", "s3_warehouse"], ids=["local", "s3"])
def test_a_state_table_over_a_topic_killed_between_its_changelog_and_its_upsert(
        spark, request, store, child_env, warm_children, kafka, topic):
    """The Kafka example's shape: SIGKILL after batch 2's changelog commit, before its table
    upsert (both delta-rs commits in driver mode); the next run replays from the last durable
    checkpoint, and the table and changelog are what the orders mean. With the warehouse on a
    local disk, and on the session's S3 server (conditional puts).

    Batch 2's sinks are written while checkpoint 1 commits (ops/runtime/write_behind.py), so
    the kill may come before checkpoint 1 is durable: the next run then replays batches 1 and
    2, not 2 alone (the outcome is the same, both writes being idempotent per batch)."""
    orders = [{"item": i, "qty": q, "price": 1.0} for i, q in [("tea", 2), ("cake", 1), ("tea", 3),
                                                              ("cake", 4), ("pie", 5), ("tea", 1)]]
    create_topic(kafka.bootstrap, topic, partitions=1)  # one partition: batches in send order
    send_json(kafka.bootstrap, topic, orders, key="item")
    warehouse = request.getfixturevalue(store)
    env = dict(child_env, LAKESTREAM_WAREHOUSE=warehouse, LAKESTREAM_CRASH_AT="table_changelog_written:2",
               KAFKA_BOOTSTRAP=kafka.bootstrap, KAFKA_SOURCE=topic)
    crashed = warm_children.run("tests.kafka.crash_child", env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    pipeline = crash_child.build_table(kafka.bootstrap, topic)
    layout = pipeline.layout(warehouse)
    delta = spark.read.format("delta")
    # killed in batch 2, between its changelog append and its upsert
    assert sorted({r["_batch_id"] for r in delta.load(layout.table("item_totals_changelog")).collect()}
                  ) == [1, 2]
    assert {r["_batch_id"] for r in delta.load(layout.table("item_totals")).collect()} == {1}
    last = CheckpointLog(spark, layout).latest()  # checkpoint 1, unless the kill came first
    done = 0 if last is None else last.batch_id
    assert done in (0, 1)
    replayed = pipeline.run_once(spark, warehouse).batches
    assert [b.batch_id for b in replayed] == list(range(done + 1, 4))
    table = pipeline.read_sink(spark, "item_totals", warehouse)
    assert list(zip(table["item"], table["orders"], table["qty"])) == [
        ("cake", 2, 5), ("pie", 1, 5), ("tea", 3, 6)]
    log = delta.load(layout.table("item_totals_changelog"))
    assert sorted((r["_batch_id"], r["item"], r["qty"]) for r in log.collect()) == [
        (1, "cake", 1), (1, "tea", 2), (2, "cake", 5), (2, "tea", 5), (3, "pie", 5), (3, "tea", 6)]


@pytest.mark.slow
def test_broker_down_mid_batch_fails_the_batch_and_the_next_run_adds_nothing_twice(
        spark, warehouse, tmp_path, topic):
    broker = EmbeddedKafka.start(tmp_path / "kafka")
    try:
        create_topic(broker.bootstrap, "in", partitions=2)
        create_topic(broker.bootstrap, "out", partitions=2)
        send_json(broker.bootstrap, "in", RECORDS, key="k")

        stopped = set()  # the function runs once per key

        def stop_broker_in_batch_two(op, md, data):
            if md.batch_id == 2:
                broker.stop()
                stopped.add(md.batch_id)
            return crash_child.running_sum(op, md, data)

        pipeline = (sp.read.from_kafka("in", bootstrap=broker.bootstrap, max_records=4,
                                       schema={"k": "string", "x": "long"}, timeout=5)
                    .map(stop_broker_in_batch_two, state=0, name="running_sum")
                    .write.to_kafka("out", bootstrap=broker.bootstrap, key="k", name="sums", timeout=5)
                    ).named("kafka_broker_down")
        # the sink's write (batch 1's, still under way, or batch 2's) or the next batch's read
        # fails first, whichever finds the broker gone; the sink's adding of its marker, cut
        # off by the broker going down, once held the run here for good (librdkafka issue 5456)
        with pytest.raises(sp.StreamError, match=f"at {broker.bootstrap}"):
            pipeline.run_once(spark, warehouse)
        assert stopped == {2}, "the run failed before the broker went down"

        broker = EmbeddedKafka.start(tmp_path / "kafka", port=broker.port)
        resumed = crash_child.build(broker.bootstrap, "in", "out").named("kafka_broker_down")
        resumed.run_once(spark, warehouse)
        assert sent(broker.bootstrap, "out")[0] == oracle(RECORDS)
    finally:
        broker.stop()


def producers_alive():
    """Every confluent_kafka producer of this process that something still refers to (the
    garbage collector runs first: a producer only in a cycle of garbage does not count)."""
    from confluent_kafka import Producer

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Producer)]


def started_since(before):
    """The producers alive now that were not alive in ``before``."""
    return [p for p in producers_alive() if not any(p is old for old in before)]


def lone_sink(bootstrap, timeout):
    """The exactly-once sink of a pipeline, to write batches to directly."""
    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
                .write.to_kafka("out", bootstrap=bootstrap, key="k", name="sums", timeout=timeout)
                ).named("kafka_lone_sink")
    return pipeline.sink("sums")


def rows(*xs):
    return pd.DataFrame({"k": [f"k{x}" for x in xs], "x": list(xs)})


def test_a_producer_that_cannot_start_is_not_left_alive(spark, warehouse):
    """No broker on the port: the sink's producer cannot register its transactional id, and
    the failed write leaves no producer behind, even while the caller keeps the error (a
    frame of the failed start held it, and with it librdkafka's threads, which would go on
    trying the brokers)."""
    sink = lone_sink(f"127.0.0.1:{free_port()}", timeout=1)
    before = producers_alive()
    ctx = sp.RunContext(spark, PipelineLayout(warehouse, "kafka_lone_sink"), 0, run_id="down")
    with pytest.raises(sp.SinkError, match="starting transactional producer") as failure:
        sink.write(ctx, 1, rows(1))
    assert started_since(before) == []
    assert failure.value.__cause__ is not None  # the error is still held, and says why


@pytest.mark.slow
def test_a_transaction_the_broker_going_down_cuts_off_leaves_no_producer_alive(spark, warehouse,
                                                                               tmp_path):
    """The broker goes down in the middle of batch 2's transaction: the write fails, and the
    failed run's producer is gone (its transaction aborted as far as the broker allowed, its
    records purged), even while the caller keeps the error. Left alive, its librdkafka thread
    went on aborting once the broker was back and bumped the producer epoch, so the next run's
    producer was "fenced by newer producer instance" (issue 65). The next run then writes
    batches 2 and 3, and a read_committed consumer sees each batch once."""
    broker = EmbeddedKafka.start(tmp_path / "kafka")
    try:
        create_topic(broker.bootstrap, "out", partitions=2)
        sink = lone_sink(broker.bootstrap, timeout=5)
        layout = PipelineLayout(warehouse, "kafka_lone_sink")
        before = producers_alive()
        failed_run = sp.RunContext(spark, layout, 0, run_id="failed")
        sink.write(failed_run, 1, rows(1, 2))
        broker.stop()
        with pytest.raises(sp.SinkError, match="batch 2 could not be written") as failure:
            sink.write(failed_run, 2, rows(3, 4))
        assert started_since(before) == [], "the failed transaction's producer is still alive"
        sink.close(failed_run)

        broker = EmbeddedKafka.start(tmp_path / "kafka", port=broker.port)
        resumed = sp.RunContext(spark, layout, 0, run_id="resumed")
        sink.write(resumed, 2, rows(3, 4))
        sink.write(resumed, 3, rows(5))
        sink.close(resumed)
        records = read_topic(broker.bootstrap, "out")
        assert sorted((r["headers"]["lakestream.batch"], json.loads(r["value"])["x"])
                      for r in records) == [("1", 1), ("1", 2), ("2", 3), ("2", 4), ("3", 5)]
        assert sink.marker(resumed) == Marker(0, 3)
        assert started_since(before) == []
        assert "Kafka topic 'out'" in str(failure.value)  # held until here
    finally:
        broker.stop()


def test_at_least_once_goes_through_spark_and_a_bad_key_column_is_named(spark, warehouse, kafka,
                                                                        topics):
    loose = (sp.read.from_kafka(topics[0], bootstrap=kafka.bootstrap, schema={"k": "string", "x": "long"})
             .map(crash_child.running_sum, state=0)
             .write.to_kafka(topics[1], bootstrap=kafka.bootstrap, key="k", delivery="at_least_once")
             ).named("kafka_loose")
    loose.run_once(spark, warehouse)
    values, records = sent(kafka.bootstrap, topics[1])
    assert values == oracle(RECORDS)
    assert {r["headers"]["lakestream.batch"] for r in records} == {"1"}

    wrong = (sp.read.from_kafka(topics[0], bootstrap=kafka.bootstrap, schema={"k": "string", "x": "long"})
             .write.to_kafka(topics[1], bootstrap=kafka.bootstrap, key="user")).named("kafka_wrong_key")
    with pytest.raises(sp.SinkError, match="key column 'user' is not in the output"):
        wrong.run_once(spark, warehouse)
    assert len(read_topic(kafka.bootstrap, topics[1])) == len(RECORDS)


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [
    "kafka_mid_send:2",      # half of batch 2 in a transaction left open
    "kafka_after_commit:2",  # batch 2 committed to Kafka, its checkpoint not taken on S3
])
def test_kafka_in_and_out_with_the_warehouse_on_s3_sends_each_row_once_after_a_crash(
        spark, s3_warehouse, child_env, warm_children, kafka, topics, crash_at):
    _crash_then_recover(spark, s3_warehouse, warm_children,
                        dict(child_env, LAKESTREAM_WAREHOUSE=s3_warehouse),
                        kafka, topics, crash_at)
