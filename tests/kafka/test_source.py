"""The Kafka source against a real broker: offsets planned from the read-committed end, rows in
partition/offset order with their metadata, dead letters, new partitions, and clear errors when
the broker, the topic or the planned offsets are gone."""

import json

import pandas as pd
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

import ops as sp
from ops.devservers.kafka_broker import free_port
from ops.kafka_client import create_topic, send_json
from ops.sources import kafka as kafka_source
from state.lake import tables
from tests.helpers import dead_letters

SCHEMA = {"k": "string", "x": "long"}


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def summing(topic, bootstrap, name, **options):
    return (sp.read.from_kafka(topic, bootstrap=bootstrap, schema=SCHEMA, **options)
            .map(running_sum, state=0).write.to_delta("sums")).named(name)


def _raw(bootstrap, topic, pairs, partition):
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in pairs:
        producer.produce(topic, value=value, key=key, partition=partition)
    producer.flush(10)


def test_rows_in_partition_offset_order_with_metadata_and_dead_letters(spark, warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic, partitions=2)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": 1}, {"k": "a", "x": 2}], key="k", partition=1)
    send_json(kafka.bootstrap, topic, [{"k": "b", "x": 10}], key="k", partition=0)
    _raw(kafka.bootstrap, topic, [(b"b", b'{"k": "b", "x": "ten"}'), (b"b", b"not json"),
                                  (b"b", b"\xff\xfe"), (None, b'{"k": "n", "x": 1}'), (b"b", None),
                                  (b"b", b'{"k": "b", "x": 5}')], partition=0)
    pipeline = summing(topic, kafka.bootstrap, "kafka_rows", max_records=4)

    report = pipeline.run_once(spark, warehouse)

    out = pipeline.read_sink(spark, "sums", warehouse)
    assert len(report.batches) == 3  # 9 offsets, at most 4 a batch
    assert list(zip(out["_partition"], out["_offset"], out["_key"], out["total"])) == [
        (0, 0, "b", 10), (1, 0, "a", 1), (1, 1, "a", 3), (0, 6, "b", 15)]
    assert set(out["_topic"]) == {topic} and out["_timestamp"].notna().all()
    letters = dead_letters(spark, pipeline, warehouse)
    reasons = dict(zip(letters["position"], letters["reason"]))
    assert reasons == {
        f"{topic}:0@1": "field 'x' 'ten' is not an integer; expected long",
        f"{topic}:0@2": "record is not valid JSON (Expecting value at 0)",
        f"{topic}:0@3": "record value is not UTF-8 text (invalid start byte at byte 0)",
        f"{topic}:0@4": "key field '_key' is missing or null",
        f"{topic}:0@5": "record has no value (a tombstone)"}
    assert sp.describe_lag_by_part(spark, pipeline, warehouse) == {f"{topic}:0": 0, f"{topic}:1": 0}


def test_open_and_aborted_transactions_are_never_planned_or_read(spark, warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": 1}], key="k")
    aborted = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic}-a"})
    aborted.init_transactions(10)
    aborted.begin_transaction()
    aborted.produce(topic, key=b"a", value=json.dumps({"k": "a", "x": 100}).encode())
    aborted.abort_transaction(10)
    pending = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic}-p"})
    pending.init_transactions(10)
    pending.begin_transaction()
    pending.produce(topic, key=b"a", value=json.dumps({"k": "a", "x": 1000}).encode())
    pending.flush(10)  # in the log, not committed: past the last stable offset
    pipeline = summing(topic, kafka.bootstrap, "kafka_txn")

    pipeline.run_once(spark, warehouse)
    assert pipeline.read_sink(spark, "sums", warehouse)["total"].tolist() == [1]
    assert sp.describe_lag(spark, pipeline, warehouse) == 0

    pending.commit_transaction(10)
    pipeline.run_once(spark, warehouse)
    assert pipeline.read_sink(spark, "sums", warehouse)["total"].tolist() == [1, 1001]


def test_new_partitions_and_starting_points(spark, warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": n} for n in (1, 2, 3)], key="k")
    latest = summing(topic, kafka.bootstrap, "kafka_latest", starting="latest")
    explicit = summing(topic, kafka.bootstrap, "kafka_explicit", starting={0: 1})
    latest.run_once(spark, warehouse)
    explicit.run_once(spark, warehouse)
    assert explicit.read_sink(spark, "sums", warehouse)["x"].tolist() == [2, 3]

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # held until the futures resolve
    [grown] = admin.create_partitions([NewPartitions(topic, 2)]).values()
    grown.result(10)
    send_json(kafka.bootstrap, topic, [{"k": "b", "x": 7}], key="k", partition=1)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": 4}], key="k", partition=0)
    latest.run_once(spark, warehouse)
    explicit.run_once(spark, warehouse)

    rows = latest.read_sink(spark, "sums", warehouse)
    assert list(zip(rows["_partition"], rows["x"], rows["total"])) == [(0, 4, 4), (1, 7, 7)]
    assert explicit.read_sink(spark, "sums", warehouse)["total"].tolist() == [2, 5, 9, 7]


def test_driver_consumer_spark_reader_and_executors_read_the_same(spark, warehouse, kafka, topic,
                                                                   monkeypatch):
    create_topic(kafka.bootstrap, topic, partitions=3)
    send_json(kafka.bootstrap, topic, [{"k": str(n % 5), "x": n} for n in range(60)]
              + [{"k": "1", "x": "bad"}], key="k")
    consumer = summing(topic, kafka.bootstrap, "kafka_consumer", max_records=25)
    consumer.run_once(spark, warehouse)
    monkeypatch.setattr(kafka_source, "SPARK_READ_FROM", 1)  # every driver batch through Spark
    spark_read = summing(topic, kafka.bootstrap, "kafka_spark", max_records=25)
    spark_read.run_once(spark, warehouse)
    executors = summing(topic, kafka.bootstrap, "kafka_executors", max_records=25).with_mode("distributed")
    executors.run_once(spark, warehouse)

    columns = ["_partition", "_offset", "k", "x", "total", "_batch_id"]
    expected = consumer.read_sink(spark, "sums", warehouse)[columns]
    for other in (spark_read, executors):
        got = other.read_sink(spark, "sums", warehouse)  # in batch and row order: the same rows
        pd.testing.assert_frame_equal(got[columns].reset_index(drop=True), expected, check_dtype=False)
        assert dead_letters(spark, other, warehouse)["position"].tolist() == \
            dead_letters(spark, consumer, warehouse)["position"].tolist()
    assert len(dead_letters(spark, consumer, warehouse)) == 1


def test_broker_down_at_plan_names_the_servers_and_records_nothing(spark, warehouse):
    bootstrap = f"127.0.0.1:{free_port()}"
    pipeline = summing("orders", bootstrap, "kafka_down", timeout=2)

    with pytest.raises(sp.SourceError, match=rf"Kafka at {bootstrap} did not answer"):
        pipeline.run_once(spark, warehouse)
    assert not tables.exists(spark, pipeline.layout(warehouse).batches)


def test_missing_topic_and_offsets_lost_to_retention(spark, warehouse, kafka, topic):
    with pytest.raises(sp.SourceError, match=f"topic '{topic}' does not exist"):
        summing(topic, kafka.bootstrap, "kafka_no_topic").run_once(spark, warehouse)

    create_topic(kafka.bootstrap, topic)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": n} for n in range(5)], key="k")
    strict = summing(topic, kafka.bootstrap, "kafka_strict", max_records=1)
    skipping = summing(topic, kafka.bootstrap, "kafka_skipping", max_records=2, on_missing="skip")
    strict.run_once(spark, warehouse, max_batches=1)    # read offset 0, planned up to 1
    skipping.run_once(spark, warehouse, max_batches=1)  # read 0..1
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # held until the futures resolve
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 3)]).values()
    deleted.result(10)

    with pytest.raises(sp.SourceError, match=rf"no longer holds {topic}:0 offsets 1\.\.2"):
        strict.run_once(spark, warehouse)
    skipping.run_once(spark, warehouse)
    assert skipping.read_sink(spark, "sums", warehouse)["x"].tolist() == [0, 1, 3, 4]
    letters = dead_letters(spark, skipping, warehouse)
    assert letters["position"].tolist() == [f"{topic}:0@2..2"]
    assert "deleted by Kafka" in letters["reason"].iloc[0]


def test_bad_definitions_fail_at_once():
    with pytest.raises(sp.PipelineDefinitionError, match="needs a schema"):
        sp.read.from_kafka("t", bootstrap="127.0.0.1:9092")
    with pytest.raises(sp.PipelineDefinitionError, match="starting offset"):
        sp.read.from_kafka(["t", "u"], bootstrap="127.0.0.1:9092", schema=SCHEMA, starting={0: 1})
    with pytest.raises(sp.PipelineDefinitionError, match="clash"):
        sp.read.from_kafka("t", bootstrap="127.0.0.1:9092", schema={"_offset": "long"})
    with pytest.raises(sp.ConfigError, match="host:port"):
        sp.read.from_kafka("t", bootstrap="localhost", value_format="string")


def test_the_examples_state_table_over_a_topic(spark, warehouse, kafka):
    from dagster_project.pipelines import ORDERS, TOPIC, item_totals_over

    create_topic(kafka.bootstrap, TOPIC, partitions=3)
    send_json(kafka.bootstrap, TOPIC, ORDERS, key="item")
    table = item_totals_over(kafka.bootstrap)
    table.run_once(spark, warehouse)
    send_json(kafka.bootstrap, TOPIC, [{"item": "tea", "qty": 4, "price": 3.0}], key="item")
    table.run_once(spark, warehouse)

    rows = table.read_sink(spark, "item_totals", warehouse).sort_values("item")
    assert rows[["item", "orders", "qty", "revenue"]].values.tolist() == [
        ["cake", 1, 3, 6.75], ["coffee", 2, 3, 12.0], ["tea", 3, 7, 22.5]]
    changelog = table.stored_sink("item_totals").changelog(table.layout(warehouse))
    changes = spark.read.format("delta").load(changelog)
    assert changes.where("item = 'tea'").count() == 2  # one change per batch that touched it


def test_records_that_gain_a_field_or_lose_one(spark, warehouse, kafka, topic):
    """A field the schema does not declare passes through (the Delta sink gains the column); a
    declared one that stops coming is null (a wrong type is a dead letter: the test above)."""
    create_topic(kafka.bootstrap, topic, partitions=1)
    pipeline = (sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, schema=SCHEMA)
                .write.to_delta("out")).named("kafka_evolving")
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": 1}], key="k", partition=0)
    pipeline.run_once(spark, warehouse)
    send_json(kafka.bootstrap, topic, [{"k": "b", "x": 2, "note": "hi"}, {"k": "c"}], key="k",
              partition=0)
    pipeline.run_once(spark, warehouse)
    out = pipeline.read_sink(spark, "out", warehouse)[["k", "x", "note"]]
    assert [[None if pd.isna(v) else v for v in row] for row in out.values.tolist()] == [
        ["a", 1, None], ["b", 2, "hi"], ["c", None, None]]


def test_a_topic_read_into_a_warehouse_on_s3_once(spark, s3_warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic, partitions=2)
    records = [{"k": key, "x": n} for n, key in enumerate("abab", start=1)]
    send_json(kafka.bootstrap, topic, records, key="k")
    pipeline = summing(topic, kafka.bootstrap, "kafka_on_s3", max_records=3)
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 4
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": 10}], key="k")
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 1
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 0  # each offset read once
    out = pipeline.read_sink(spark, "sums", s3_warehouse)
    assert out.groupby("k")["total"].max().to_dict() == {"a": 14, "b": 6}
    assert len(out) == 5
