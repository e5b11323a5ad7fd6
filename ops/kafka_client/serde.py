"""Record values in a schema registry's formats (Avro, Protobuf, JSON Schema) to and from
plain fields, through confluent-kafka's own serializers.

**Reading.** Each value is decoded with its writer's schema, the id in the record. An Avro
source reads through the subject's latest schema when the source was defined (its *reader*
schema): a field added since the record was written, with a default, reads as the default; a
field removed reads as missing (null). A Protobuf source parses into the latest message (an
unknown field is skipped, a missing one is unset). A value that cannot be decoded (not the
registry's wire format, an id the registry does not know, bytes that are not the schema's)
raises ``ValueError`` with the reason, which makes it a dead letter; a registry that does not
answer raises :class:`~ops.kafka_client.registry.RegistryUnavailable`, which fails the batch.

**Writing.** Rows are encoded with a schema made from the output's columns (every field
nullable) and registered under the topic's subject, or, with ``register=False``, only looked
up: the sink then never changes the registry, and a schema not registered already stops the
batch before anything is sent.

>>> registry = SchemaRegistry("mock://serde-doc")
>>> encoder = RegistryEncoder(registry, "avro", "orders", "orders", register=True)
>>> [value] = encoder.encode([{"item": "tea", "qty": 2}], {"item": "string", "qty": "long"})
>>> value[:1], RegistryDecoder(registry, "avro").decode(value, "orders")
(b'\\x00', {'item': 'tea', 'qty': 2})
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import PipelineDefinitionError
from .registry import (
    RegistryUnavailable,
    SchemaRegistry,
    fetch_format,
    is_repeated,
    is_timestamp,
    message_descriptor,
)

_WIRE_MAGIC = 0


class _KnownSchemas:
    """A registry client that answers first from writer schemas the driver fetched (so an
    executor's process asks the registry only for ids it was not given, and a ``mock://``
    registry, which lives in the driver's process only, works there too). Every other call
    goes to the real client."""

    def __init__(self, client: Any, known: Mapping[int, Any]):
        self._client, self._known = client, known

    def get_schema(self, schema_id: int, subject_name: str | None = None, fmt: str | None = None,
                   reference_format: str | None = None) -> Any:
        if schema_id in self._known:
            return self._known[schema_id]
        return self._client.get_schema(schema_id, subject_name, fmt)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@dataclass
class RegistryDecoder:
    """Decodes the values of a source in ``value_format``; picklable (the deserializer is made
    in each process on first use). ``reader`` is the reader schema (Avro text, or the
    Protobuf schema the message is built from); ``known`` the writer schemas fetched so far,
    by id."""

    registry: SchemaRegistry
    value_format: str
    reader: Any = None
    known: dict[int, Any] = field(default_factory=dict)
    #: the subjects' versions whose schemas are in ``known``
    learned: set[tuple[str, int]] = field(default_factory=set)
    _made: list[Any] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.value_format == "protobuf" and self.reader is None:
            raise PipelineDefinitionError("a Protobuf decoder needs the registered schema of the "
                                          "message it parses into (see reader_schema)")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_made": []}

    def learn(self, topics: tuple[str, ...]) -> None:
        """Fetch the writer schemas registered under ``topics``' subjects that are not known
        yet, so executors need not ask the registry for them."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        client, fmt = self.registry.client, fetch_format(self.value_format)
        for topic in topics:
            subject = self.registry.subject(topic)
            try:
                for version in client.get_versions(subject):
                    if (subject, version) not in self.learned:
                        registered = client.get_version(subject, version, fmt=fmt)
                        self.known.setdefault(registered.schema_id, registered.schema)
                        self.learned.add((subject, version))
            except SchemaRegistryError as error:
                if error.http_status_code != 404:
                    raise self.registry.unavailable(f"listing subject {subject!r}", error) from error
            except OSError as error:
                raise self.registry.unavailable(f"listing subject {subject!r}", error) from error

    def decode(self, value: bytes, topic: str) -> dict[str, Any]:
        """One record's value as plain fields (nested values as JSON text)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        data = bytes(value)
        if len(data) < 6 or data[0] != _WIRE_MAGIC:
            raise ValueError(f"record is not in the schema registry's wire format (a zero byte and a "
                             f"schema id before the {self.value_format} payload; it starts "
                             f"{data[:6]!r})")
        schema_id = int.from_bytes(data[1:5], "big")
        try:
            decoded = self._deserializer()(data, SerializationContext(topic, MessageField.VALUE))
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                raise ValueError(f"schema id {schema_id} is not in the schema registry at "
                                 f"{self.registry.url}") from None
            raise self.registry.unavailable(f"fetching schema id {schema_id}", error) from error
        except RegistryUnavailable:
            raise
        except OSError as error:
            raise self.registry.unavailable(f"fetching schema id {schema_id}", error) from error
        except Exception as error:  # noqa: BLE001 - fastavro, protobuf, jsonschema: a bad record
            raise ValueError(f"record is not a valid {self.value_format} value of schema id "
                             f"{schema_id} ({type(error).__name__}: {error})") from None
        return _plain_fields(self._as_dict(decoded))

    def _as_dict(self, decoded: Any) -> dict[str, Any]:
        if self.value_format == "protobuf":
            return _message_fields(decoded)
        if not isinstance(decoded, dict):
            raise ValueError(f"record is a {self.value_format} {type(decoded).__name__}, not a record")
        return decoded

    def _deserializer(self) -> Any:
        if not self._made:
            client = _KnownSchemas(self.registry.client, self.known)
            self._made.append(_deserializer(client, self.value_format, self.reader, self.registry))
        return self._made[0]


def reader_schema(registry: SchemaRegistry, value_format: str, topics: tuple[str, ...]) -> Any:
    """The schema a source reads its records through: the first topic's subject's latest
    (``None`` for JSON Schema, whose records read as written, or while nothing is registered
    for Avro, whose records then read with their writer's schema)."""
    if value_format == "json_schema":
        return None
    latest = registry.latest(registry.subject(topics[0]), value_format)
    if latest is None and value_format == "protobuf":
        raise PipelineDefinitionError(
            f"topic {topics[0]!r}: a Protobuf source parses records into the message registered "
            f"as subject {registry.subject(topics[0])!r}, which schema registry {registry.url} "
            "does not have yet: register it first (a producer with auto-registration does)")
    return None if latest is None else latest.schema


def _deserializer(client: Any, value_format: str, reader: Any, registry: SchemaRegistry) -> Any:
    """confluent-kafka's deserializer for ``value_format``, over ``client``."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    conf = {"subject.name.strategy": topic_subject_name_strategy}
    if value_format == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        return AvroDeserializer(client, reader.schema_str if reader is not None else None, conf=conf)
    if value_format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, conf=conf, schema_registry_client=client)
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf.message_factory import GetMessageClass

    message = GetMessageClass(message_descriptor(registry, reader))
    return ProtobufDeserializer(message, {**conf, "use.deprecated.format": False}, client)


def _message_fields(message: Any) -> dict[str, Any]:
    """A Protobuf message's set fields: scalars as they are (not the JSON mapping's int64
    text), a ``Timestamp`` as a UTC datetime, an enum by its name, lists and other messages
    in their JSON mapping (made text by :func:`_plain`)."""
    from google.protobuf import json_format

    fields: dict[str, Any] = {}
    mapped: dict[str, Any] | None = None
    for item, value in message.ListFields():
        if is_timestamp(item):
            fields[item.name] = value.ToDatetime(tzinfo=datetime.UTC)
        elif item.message_type is not None or is_repeated(item):
            mapped = mapped or json_format.MessageToDict(message, preserving_proto_field_name=True)
            fields[item.name] = mapped[item.name]
        elif item.enum_type is not None:
            fields[item.name] = item.enum_type.values_by_number[value].name
        else:
            fields[item.name] = value
    return fields


def _plain_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain(value) for name, value in record.items()}


def _plain(value: Any) -> Any:
    """A decoded value as a source's checks take it: nested values as JSON text, bytes as
    base64, decimals as text (checked as a number), dates as ISO text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=_json_default, separators=(",", ":"))
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _json_default(value: Any) -> Any:
    return _plain(value) if not isinstance(value, (dict, list)) else value


# writing ----------------------------------------------------------------------------------------
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class RegistryEncoder:
    """Encodes a sink's rows in ``value_format`` for ``topic``, with a schema made from the
    rows' column kinds (``long``, ``double``, ``string``, ``boolean``, ``timestamp``) and
    named after ``record``; ``register`` as the module says."""

    registry: SchemaRegistry
    value_format: str
    topic: str
    record: str
    register: bool = True
    _serializers: dict[tuple[tuple[str, str], ...], Any] = field(default_factory=dict, repr=False)

    def encode(self, rows: list[dict[str, Any]], kinds: Mapping[str, str]) -> list[bytes]:
        """Each row's value bytes, in order. Registry errors (a schema refused as incompatible,
        or not registered with ``register=False``) raise ``ValueError`` naming the subject."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        serializer, make = self._serializer(kinds)
        context = SerializationContext(self.topic, MessageField.VALUE)
        subject = self.registry.subject(self.topic)
        try:
            return [serializer(make(row), context) for row in rows]
        except SchemaRegistryError as error:
            if error.http_status_code in (404, 409, 422):
                verb = "is not registered" if error.http_status_code == 404 else "was refused"
                raise ValueError(f"the {self.value_format} schema of columns {list(kinds)} {verb} "
                                 f"under subject {subject!r} ({error})") from None
            raise self.registry.unavailable(f"registering under subject {subject!r}", error) from error
        except OSError as error:
            raise self.registry.unavailable(f"registering under subject {subject!r}", error) from error

    def _serializer(self, kinds: Mapping[str, str]) -> tuple[Any, Any]:
        key = tuple(kinds.items())
        if key not in self._serializers:
            self._serializers[key] = _serializer(self, dict(kinds))
        return self._serializers[key]


def _serializer(encoder: RegistryEncoder, kinds: dict[str, str]) -> tuple[Any, Any]:
    """confluent-kafka's serializer for the encoder's format and ``kinds``, and the function
    that makes a row what it takes."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    conf = {"subject.name.strategy": topic_subject_name_strategy,
            "auto.register.schemas": encoder.register, "normalize.schemas": False}
    client = encoder.registry.client
    if encoder.value_format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(client, avro_schema(encoder.record, kinds), conf=conf), _avro_row
    if encoder.value_format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(json_schema(encoder.record, kinds), client, conf=conf), _json_row
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    message = protobuf_message(encoder.record, kinds)
    serializer = ProtobufSerializer(message, client, conf={**conf, "use.deprecated.format": False})
    return serializer, lambda row: _proto_row(message, kinds, row)


def _checked_names(record: str, kinds: Mapping[str, str]) -> str:
    """The record's name as Avro and Protobuf take names; a column they cannot take is named."""
    bad = [name for name in kinds if not _AVRO_NAME.match(name)]
    if bad:
        raise ValueError(f"columns {bad} cannot be field names of a registry schema (letters, "
                         "digits and _, not starting with a digit): rename them (AS) before the sink")
    name = re.sub(r"[^A-Za-z0-9_]", "_", record)
    return name if _AVRO_NAME.match(name) else f"_{name}"


_AVRO_KINDS: dict[str, Any] = {"long": "long", "double": "double", "string": "string",
                               "boolean": "boolean",
                               "timestamp": {"type": "long", "logicalType": "timestamp-micros"}}


def avro_schema(record: str, kinds: Mapping[str, str]) -> str:
    """An Avro record of nullable fields, one per column."""
    name = _checked_names(record, kinds)
    return json.dumps({"type": "record", "name": name, "namespace": "lakestream", "fields": [
        {"name": column, "type": ["null", _AVRO_KINDS[kind]], "default": None}
        for column, kind in kinds.items()]})


def _avro_row(row: dict[str, Any]) -> dict[str, Any]:
    return row


_JSON_KINDS = {"long": {"type": ["integer", "null"]}, "double": {"type": ["number", "null"]},
               "string": {"type": ["string", "null"]}, "boolean": {"type": ["boolean", "null"]},
               "timestamp": {"type": ["string", "null"], "format": "date-time"}}


def json_schema(record: str, kinds: Mapping[str, str]) -> str:
    """A JSON Schema object whose properties are the columns, each nullable."""
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": record,
                       "type": "object", "additionalProperties": False,
                       "properties": {column: _JSON_KINDS[kind] for column, kind in kinds.items()}})


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: value.isoformat() if isinstance(value, datetime.datetime) else value
            for name, value in row.items()}


_PROTO_KINDS = {"long": "TYPE_INT64", "double": "TYPE_DOUBLE", "string": "TYPE_STRING",
                "boolean": "TYPE_BOOL"}


def protobuf_message(record: str, kinds: Mapping[str, str]) -> Any:
    """A proto3 message class with an ``optional`` field per column (so a null stays unset,
    not a zero), numbered in column order; timestamps are ``google.protobuf.Timestamp``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.protobuf.message_factory import GetMessageClass

    name = _checked_names(record, kinds)
    field_type = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name=f"lakestream/{name}.proto", package="lakestream",
                                               syntax="proto3")
    proto.dependency.append("google/protobuf/timestamp.proto")
    message = proto.message_type.add(name=name)
    for number, (column, kind) in enumerate(kinds.items(), 1):
        item = message.field.add(name=column, number=number, label=field_type.LABEL_OPTIONAL)
        if kind == "timestamp":  # a message field has presence already
            item.type, item.type_name = field_type.TYPE_MESSAGE, ".google.protobuf.Timestamp"
            continue
        item.type, item.proto3_optional = getattr(field_type, _PROTO_KINDS[kind]), True
        message.oneof_decl.add(name=f"_{column}")
        item.oneof_index = len(message.oneof_decl) - 1
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName(f"lakestream.{name}"))


def _proto_row(message: Any, kinds: Mapping[str, str], row: dict[str, Any]) -> Any:
    built = message()
    for column, value in row.items():
        if value is None:
            continue
        if kinds[column] == "timestamp":
            getattr(built, column).FromDatetime(value)
        else:
            setattr(built, column, value)
    return built


__all__ = ["RegistryDecoder", "RegistryEncoder", "avro_schema", "json_schema",
           "protobuf_message", "reader_schema"]
