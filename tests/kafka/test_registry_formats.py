"""Kafka topics in a schema registry's formats (Avro, Protobuf, JSON Schema) against the real
broker, with confluent-kafka's in-memory registry (``mock://``) and a real registry server
(Apicurio, serving Confluent's API): columns from the registry, records of two schema versions,
dead letters for what cannot be decoded, and the exactly-once sink encoding with a registered
subject, refused when the registry finds it incompatible."""

import re

import pytest
from confluent_kafka import Producer

import ops as sp
from ops.kafka_client import create_topic, read_topic
from ops.kafka_client.serde import RegistryDecoder, RegistryEncoder, reader_schema
from tests.helpers import dead_letters

V1 = {"item": "string", "qty": "long"}
V2 = {**V1, "price": "double"}  # a field added, nullable


def _produce(bootstrap, topic, values):
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value, key=b"k")
    producer.flush(10)


def _encoded(registry, value_format, topic, kinds, rows):
    """Rows encoded as a producer with auto-registration writes them (record name "Order")."""
    return RegistryEncoder(registry, value_format, topic, "Order").encode(rows, kinds)


def _bad_records(registry, value_format, topic):
    """Three records no decoder can read, and the start of the reason each gets."""
    known = registry.client.get_latest_version(registry.subject(topic)).schema_id
    garbage = {"avro": b"\xff\xff\xff\xff\xff", "protobuf": b"\x00\xff\xff\xff\xff",
               "json_schema": b"{not json"}[value_format]
    return [(b'{"item": "tea"}', "record is not in the schema registry's wire format"),
            (b"\x00" + (99999).to_bytes(4, "big") + b"\x02ab",
             f"schema id 99999 is not in the schema registry at {registry.url}"),
            (b"\x00" + known.to_bytes(4, "big") + garbage,
             f"record is not a valid {value_format} value of schema id {known}")]


def _registry(kind, topic, request):
    if kind == "mock":
        return sp.SchemaRegistry(f"mock://{topic}")
    return sp.SchemaRegistry(request.getfixturevalue("registry_server").url)


@pytest.mark.parametrize("value_format, mode, kind", [
    ("avro", "driver", "mock"), ("protobuf", "driver", "mock"), ("json_schema", "driver", "mock"),
    ("avro", "distributed", "mock"),
    pytest.param("protobuf", "distributed", "mock", marks=pytest.mark.slow),
    pytest.param("json_schema", "distributed", "mock", marks=pytest.mark.slow),
    ("avro", "driver", "apicurio"), ("protobuf", "distributed", "apicurio"),
    pytest.param("json_schema", "driver", "apicurio", marks=pytest.mark.slow)])
def test_a_registry_topic_in_and_out_exactly_once_with_evolution_and_dead_letters(
        spark, warehouse, kafka, topic, value_format, mode, kind, request):
    registry = _registry(kind, topic, request)
    source, target = topic, f"{topic}_out"
    for name in (source, target):
        create_topic(kafka.bootstrap, name, partitions=1)
    old = _encoded(registry, value_format, source, V1, [{"item": "tea", "qty": 2}])
    new = _encoded(registry, value_format, source, V2, [{"item": "cake", "qty": 1, "price": 2.5},
                                                        {"item": "pie", "qty": None, "price": None}])
    bad = _bad_records(registry, value_format, source)
    _produce(kafka.bootstrap, source, [*old, *[value for value, _ in bad], *new])

    stream = sp.read.from_kafka(source, bootstrap=kafka.bootstrap, value_format=value_format,
                                registry=registry)
    pipeline = (stream.write.to_kafka(target, bootstrap=kafka.bootstrap, key="item",
                                      value_format=value_format, registry=registry)
                ).named(f"registry_{value_format}").with_mode(mode)
    fields = dict(stream.source.schema.fields)
    assert {name: fields[name] for name in V2} == V2  # the columns of the latest schema

    pipeline.run_once(spark, warehouse)
    pipeline.run_once(spark, warehouse)  # nothing new: nothing sent twice

    decoder = RegistryDecoder(registry, value_format, reader_schema(registry, value_format, (target,)))
    sent = read_topic(kafka.bootstrap, target, raw=True)
    decoded = [decoder.decode(record["value"], target) for record in sent]
    assert [(r["item"], r.get("qty"), r.get("price")) for r in decoded] == [
        ("tea", 2, None), ("cake", 1, 2.5), ("pie", None, None)]
    assert [record["key"] for record in sent] == ["tea", "cake", "pie"]
    latest = registry.client.get_latest_version(registry.subject(target))
    assert latest.schema.schema_type == {"avro": "AVRO", "protobuf": "PROTOBUF",
                                         "json_schema": "JSON"}[value_format]
    letters = dead_letters(spark, pipeline, warehouse).sort_values("position")
    assert list(letters["position"]) == [f"{source}:0@{n}" for n in (1, 2, 3)]
    for reason, (_, expected) in zip(letters["reason"], bad):
        assert reason.startswith(expected), reason


def test_an_avro_record_of_an_older_schema_reads_the_added_fields_default():
    """Schema resolution through the reader schema (the subject's latest when the source was
    defined): a field added with a default reads as the default; a removed one is gone."""
    registry = sp.SchemaRegistry("mock://avro-evolution")
    old = ('{"type": "record", "name": "Order", "fields": [{"name": "item", "type": "string"}, '
           '{"name": "note", "type": "string"}]}')
    new = ('{"type": "record", "name": "Order", "fields": [{"name": "item", "type": "string"}, '
           '{"name": "qty", "type": "long", "default": 1}]}')
    from confluent_kafka.schema_registry import topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext("orders", MessageField.VALUE)
    conf = {"subject.name.strategy": topic_subject_name_strategy}
    written = AvroSerializer(registry.client, old, conf=conf)({"item": "tea", "note": "hot"}, context)
    AvroSerializer(registry.client, new, conf=conf)({"item": "cake", "qty": 3}, context)
    reader = registry.latest(registry.subject("orders"), "avro").schema

    assert RegistryDecoder(registry, "avro", reader).decode(written, "orders") == {"item": "tea", "qty": 1}
    assert RegistryDecoder(registry, "avro").decode(written, "orders") == {"item": "tea", "note": "hot"}
    assert registry.fields("orders", "avro") == {"item": "string", "qty": "long"}


def test_registry_mistakes_are_named_before_anything_runs(kafka, topic):
    with pytest.raises(sp.PipelineDefinitionError, match="needs registry="):
        sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, value_format="avro")
    with pytest.raises(sp.PipelineDefinitionError, match="has no subject"):
        sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, value_format="avro",
                           registry=sp.SchemaRegistry(f"mock://{topic}"))
    with pytest.raises(sp.PipelineDefinitionError, match="only with those"):
        sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, schema=V1, registry="mock://x")
    with pytest.raises(sp.PipelineDefinitionError, match="is not http"):
        sp.SchemaRegistry("localhost:8081")
    stream = sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, value_format="string")
    with pytest.raises(sp.PipelineDefinitionError, match="at_least_once"):
        stream.write.to_kafka(topic, bootstrap=kafka.bootstrap, value_format="avro",
                              registry="mock://x", delivery="at_least_once")


def test_a_declared_avro_stream_takes_its_columns_from_the_registry_and_feeds_a_table(
        spark, warehouse, kafka, topic):
    """ksqlDB's way: CREATE STREAM … WITH (KAFKA_TOPIC, VALUE_FORMAT='AVRO') with no column
    list, then a state table over it."""
    registry = sp.SchemaRegistry(f"mock://{topic}")
    create_topic(kafka.bootstrap, topic, partitions=1)
    _produce(kafka.bootstrap, topic, _encoded(registry, "avro", topic, V1, [
        {"item": "tea", "qty": 2}, {"item": "cake", "qty": 1}, {"item": "tea", "qty": 3}]))
    catalog = sp.Catalog()

    stream = sp.declare(f"CREATE STREAM orders WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='AVRO')",
                        bootstrap=kafka.bootstrap, registry=registry, catalog=catalog)
    totals = sp.sql("CREATE TABLE item_qty AS SELECT item, SUM(qty) AS qty FROM orders GROUP BY item",
                    catalog=catalog)
    totals.run_once(spark, warehouse)

    assert {name: stream.source.schema.fields[name] for name in V1} == V1
    table = totals.read_sink(spark, "item_qty", warehouse).sort_values("item")
    assert list(zip(table["item"], table["qty"])) == [("cake", 1), ("tea", 5)]


def test_a_sink_that_may_not_register_stops_the_batch_before_sending(spark, warehouse, kafka, topic):
    registry = sp.SchemaRegistry(f"mock://{topic}")
    create_topic(kafka.bootstrap, topic, partitions=1)
    _produce(kafka.bootstrap, topic, _encoded(registry, "avro", topic, V1, [{"item": "tea", "qty": 2}]))
    target = f"{topic}_out"
    create_topic(kafka.bootstrap, target, partitions=1)
    pipeline = (sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, value_format="avro", registry=registry)
                .write.to_kafka(target, bootstrap=kafka.bootstrap, value_format="avro",
                                registry=registry, register=False)).named("registry_lookup_only")

    with pytest.raises(sp.SinkError, match=f"is not registered under subject '{target}-value'"):
        pipeline.run_once(spark, warehouse)
    assert read_topic(kafka.bootstrap, target) == []


def test_a_schema_the_registry_finds_incompatible_stops_the_batch_before_sending(
        spark, warehouse, kafka, topic, registry_server):
    """The real registry's compatibility check (BACKWARD): the target subject's qty is text,
    the output's is a long, so the sink's schema is refused (HTTP 409) and nothing is sent."""
    registry = sp.SchemaRegistry(registry_server.url)
    target = f"{topic}_out"
    for name in (topic, target):
        create_topic(kafka.bootstrap, name, partitions=1)
    _produce(kafka.bootstrap, topic, _encoded(registry, "avro", topic, V1, [{"item": "tea", "qty": 2}]))
    _encoded(registry, "avro", target, {"item": "string", "qty": "string"}, [{"item": "x", "qty": "y"}])
    registry.client.set_compatibility(registry.subject(target), "BACKWARD")
    pipeline = (sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, value_format="avro", registry=registry)
                .write.to_kafka(target, bootstrap=kafka.bootstrap, value_format="avro",
                                registry=registry)).named("registry_incompatible")

    with pytest.raises(sp.SinkError, match=f"was refused under subject '{target}-value'"):
        pipeline.run_once(spark, warehouse)
    assert read_topic(kafka.bootstrap, target) == []


@pytest.mark.parametrize("statement, message", [
    ("CREATE STREAM s WITH (KAFKA_TOPIC='t')", "WITH needs KAFKA_TOPIC='<topic>' and VALUE_FORMAT"),
    ("CREATE STREAM s WITH (KAFKA_TOPIC='t', VALUE_FORMAT='AVRO', PARTITIONS='3')",
     'unsupported property "PARTITIONS'),
    ("CREATE STREAM s WITH (KAFKA_TOPIC='t', VALUE_FORMAT='DELIMITED')", "'DELIMITED' is not one of"),
    ("CREATE STREAM s WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON')", "'JSON' needs a column list"),
    ("CREATE TABLE s (id VARCHAR, n BIGINT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON')",
     "a TABLE needs a column declared PRIMARY KEY"),
    ("CREATE STREAM s (id ARRAY<INT>) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON')",
     "type ARRAY of column id"),
    ("CREATE STREAM s AS SELECT * FROM t", "expected CREATE STREAM|TABLE <name> [(<columns>)] WITH"),
])
def test_a_declaration_mistake_is_named(statement, message):
    from ops.sql.declare import parse_declaration

    with pytest.raises(sp.SqlError, match=re.escape(message)):
        parse_declaration(statement)


def test_a_declared_json_table_has_its_columns_key_and_timestamp():
    from ops.sql.declare import parse_declaration

    said = parse_declaration("CREATE TABLE users (id VARCHAR PRIMARY KEY, age BIGINT, seen TIMESTAMP) "
                             "WITH (KAFKA_TOPIC='users', VALUE_FORMAT='JSON', TIMESTAMP='seen')")
    assert (said.kind, said.topic, said.value_format, said.primary_key, said.timestamp) == (
        "TABLE", "users", "json", "id", "seen")
    assert said.columns == {"id": "string", "age": "long", "seen": "timestamp"}
