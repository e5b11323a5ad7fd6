"""One embedded Kafka broker (KRaft, loopback) for the whole test session, and a fresh topic
name per test."""

import uuid

import pytest

from ops.devservers.kafka_broker import EmbeddedKafka


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    broker = EmbeddedKafka.start(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses (created by the test, with the partitions it wants)."""
    return f"{request.node.name[:40].replace('[', '_').replace(']', '')}_{uuid.uuid4().hex[:6]}"
