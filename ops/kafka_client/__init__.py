"""The Kafka client lakestream's source, sink and readers share (``connection``: settings,
offsets and partitions, calls bounded in time; ``registry`` and ``serde``: schema registry
formats), and topic helpers for examples and tests
(``topics``). The only package that talks to Kafka's admin and producer APIs directly."""

from .connection import (
    DEFAULT_TIMEOUT,
    KafkaConnection,
    call_within,
    connection,
    parse_part,
    part_id,
)
from .registry import REGISTRY_FORMATS, RegistryUnavailable, SchemaRegistry
from .topics import create_topic, read_topic, send_json

__all__ = ["DEFAULT_TIMEOUT", "REGISTRY_FORMATS", "KafkaConnection", "RegistryUnavailable",
           "SchemaRegistry", "call_within", "connection", "create_topic", "parse_part", "part_id",
           "read_topic", "send_json"]
