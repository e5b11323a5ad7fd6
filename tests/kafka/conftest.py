"""One embedded Kafka broker (KRaft, loopback) and, for the tests that ask, one schema registry
server (Apicurio, Confluent's API) for the whole test session, and a fresh topic name per test."""

import uuid

import pytest

from ops.devservers.kafka_broker import EmbeddedKafka
from ops.devservers.schema_registry import LocalRegistry


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    broker = EmbeddedKafka.start(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory):
    server = LocalRegistry.start(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses (created by the test, with the partitions it wants)."""
    return f"{request.node.name[:40].replace('[', '_').replace(']', '')}_{uuid.uuid4().hex[:6]}"
