"""Nexmark's continuous form: the generated stream as JSON records on a Kafka topic per kind,
read by lakestream's Kafka source, gives the brute-force answer, as the Delta form does."""

import uuid

import pytest

from bench.nexmark import lakestream, oracle, queries, streams
from bench.nexmark.generator import NexmarkConfig


@pytest.fixture(scope="module")
def nexmark_topics(kafka, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("nexmark"))
    batches = streams.write_stream(folder, NexmarkConfig(seed=5, events_per_second=100), 2, 1_500)
    return folder, batches, streams.write_topics(kafka.bootstrap, batches,
                                                 prefix=f"nexmark-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("name, mode", [("q0", "driver"), ("q3", "driver"), ("q11", "driver"),
                                        ("q18", "driver"), ("q2", "distributed")])
def test_a_query_over_the_kafka_topics_gives_the_brute_force_answer(spark, tmp_path, kafka,
                                                                    nexmark_topics, name, mode):
    folder, batches, topics = nexmark_topics
    names = lakestream.catalog(folder, streams=lakestream.kafka_sources(folder, kafka.bootstrap, topics))
    got = lakestream.run(spark, queries.query(name), folder, str(tmp_path), mode, names=names)
    expected = oracle.answer(name, batches)
    assert len(expected) > 0
    assert oracle.same_rows(got.rows, expected) is None, oracle.same_rows(got.rows, expected)
