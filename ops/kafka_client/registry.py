"""A schema registry (Confluent Schema Registry's REST API, which Redpanda's and Apicurio's
also serve) and the columns its schemas give a topic.

Records in a registry format carry Confluent's wire format: a zero byte, the writer's schema
id (four bytes), then the Avro, Protobuf or JSON payload. The serializers and deserializers are
confluent-kafka's own (``confluent_kafka.schema_registry``); this module holds the client they
share and reads a subject's schemas as columns.

Columns from a schema take the types a source checks (``long``, ``double``, ``string``,
``boolean``, ``timestamp``): nested records, lists, maps and bytes arrive as their JSON (or
base64) text in a ``string`` column, as ksqlDB shows them.

>>> registry = SchemaRegistry("mock://docs")
>>> registry.subject("orders")
'orders-value'
>>> avro = '{"type": "record", "name": "Order", "fields": [{"name": "item", "type": "string"},'\\
...        ' {"name": "qty", "type": ["null", "long"], "default": null}]}'
>>> avro_fields(avro)
{'item': 'string', 'qty': 'long'}
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import PipelineDefinitionError, StreamError

#: the registry formats, by the name a source or sink takes (ksqlDB's ``AVRO``, ``PROTOBUF``,
#: ``JSON_SR``)
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")


class RegistryUnavailable(StreamError):
    """The registry did not answer (down, refused, or an error of its own): no record is at
    fault, so the batch fails and runs again, rather than records going to dead letters."""


@dataclass(frozen=True)
class SchemaRegistry:
    """Where the schemas are: ``url`` (``http(s)://host:port``, or ``mock://<name>``: the
    client's in-memory registry, for tests), and client settings (``basic.auth.user.info``,
    ``ssl.ca.location``…) as confluent-kafka's ``SchemaRegistryClient`` takes them.

    One object holds one client; a ``mock://`` registry lives in that client, so a test's
    producer, sources and sinks share the object. Pickled (to executors) it is its settings
    only: each process makes its own client.

    >>> registry = SchemaRegistry("https://registry:8081", {"basic.auth.user.info": "key:secret"})
    >>> registry.options, registry.subject("orders")
    ((('basic.auth.user.info', 'key:secret'),), 'orders-value')
    >>> import pickle
    >>> pickle.loads(pickle.dumps(registry)) == registry
    True
    """

    url: str
    options: Mapping[str, str] | tuple[tuple[str, str], ...] = ()
    _client: list[Any] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        settings = self.options.items() if isinstance(self.options, Mapping) else self.options
        object.__setattr__(self, "options", tuple(sorted((str(k), str(v)) for k, v in settings)))
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://", "mock://")):
            raise PipelineDefinitionError(
                f"schema registry url {self.url!r} is not http(s)://host:port (or mock://name for "
                "the client's in-memory registry)")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return SchemaRegistry, (self.url, self.options)

    @property
    def client(self) -> Any:
        """confluent-kafka's client of this registry, made once."""
        if not self._client:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client.append(SchemaRegistryClient.new_client({"url": self.url, **dict(self.options)}))
        return self._client[0]

    @staticmethod
    def subject(topic: str) -> str:
        """The subject of a topic's values (Confluent's topic-name strategy, its default)."""
        return f"{topic}-value"

    def latest(self, subject: str, value_format: str) -> Any | None:
        """The subject's latest registered schema (``None``: the subject has none)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return self.client.get_latest_version(subject, fmt=fetch_format(value_format))
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                return None
            raise self.unavailable(f"reading subject {subject!r}", error) from error
        except OSError as error:
            raise self.unavailable(f"reading subject {subject!r}", error) from error

    def unavailable(self, doing: str, error: BaseException) -> RegistryUnavailable:
        return RegistryUnavailable(f"schema registry {self.url}: {doing} failed ({error})")

    def fields(self, topic: str, value_format: str) -> dict[str, str]:
        """The columns of the latest schema registered for ``topic``'s values; the error says
        what to do when there is none."""
        latest = self.latest(self.subject(topic), value_format)
        if latest is None:
            raise PipelineDefinitionError(
                f"topic {topic!r}: schema registry {self.url} has no subject "
                f"{self.subject(topic)!r}, so the columns cannot come from it: register the "
                "value schema first (a producer with auto-registration does), or declare the "
                "columns (schema={...})")
        text = latest.schema.schema_str
        if value_format == "avro":
            return avro_fields(text)
        if value_format == "json_schema":
            return json_schema_fields(text)
        return protobuf_fields(message_descriptor(self, latest.schema))


def fetch_format(value_format: str) -> str | None:
    """Protobuf schemas are fetched as a serialized file descriptor, which the deserializer
    and :func:`message_descriptor` read; the others as the text they were registered as."""
    return "serialized" if value_format == "protobuf" else None


def registry_of(registry: SchemaRegistry | str | None, where: str, value_format: str) -> SchemaRegistry:
    """``registry`` as a :class:`SchemaRegistry` (a URL is made into one); an error naming
    ``where`` when a registry format has none."""
    if registry is None:
        raise PipelineDefinitionError(
            f"{where}: value_format={value_format!r} needs registry= (a schema registry URL or "
            "sp.SchemaRegistry(...))")
    if isinstance(registry, SchemaRegistry):
        return registry
    return SchemaRegistry(registry)


# columns from schemas --------------------------------------------------------------------------
_AVRO_TYPES = {"int": "long", "long": "long", "float": "double", "double": "double",
               "boolean": "boolean", "string": "string", "enum": "string"}
_AVRO_TIMES = {"timestamp-millis", "timestamp-micros", "local-timestamp-millis",
               "local-timestamp-micros"}


def avro_fields(schema: str) -> dict[str, str]:
    """The column types of an Avro record schema's fields."""
    parsed = json.loads(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise PipelineDefinitionError(f"the registry's Avro schema is not a record: {schema[:200]}")
    return {f["name"]: _avro_kind(f["type"]) for f in parsed["fields"]}


def _avro_kind(kind: Any) -> str:
    if isinstance(kind, list):  # a union: ["null", T] is a nullable T; any other is text
        members = [k for k in kind if k != "null"]
        return _avro_kind(members[0]) if len(members) == 1 else "string"
    if isinstance(kind, dict):
        if kind.get("logicalType") in _AVRO_TIMES:
            return "timestamp"
        if kind.get("logicalType") == "decimal":
            return "double"
        return _AVRO_TYPES.get(str(kind.get("type")), "string")
    return _AVRO_TYPES.get(kind, "string")


_JSON_TYPES = {"integer": "long", "number": "double", "boolean": "boolean", "string": "string"}


def json_schema_fields(schema: str) -> dict[str, str]:
    """The column types of a JSON Schema object's properties."""
    parsed = json.loads(schema)
    properties = parsed.get("properties") if isinstance(parsed, dict) else None
    if not isinstance(properties, dict):
        raise PipelineDefinitionError(f"the registry's JSON Schema has no properties: {schema[:200]}")
    return {name: _json_kind(spec) for name, spec in properties.items()}


def _json_kind(spec: Any) -> str:
    kinds = spec.get("type") if isinstance(spec, dict) else None
    kinds = [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k != "null"]
    if len(kinds) != 1:
        return "string"
    if kinds[0] == "string" and spec.get("format") == "date-time":
        return "timestamp"
    return _JSON_TYPES.get(kinds[0], "string")


def message_descriptor(registry: SchemaRegistry, schema: Any) -> Any:
    """The Protobuf message a registered schema (a serialized file descriptor) describes: its
    first message, as Confluent's serializers write it. Google's well-known types (a
    ``Timestamp``) come from the protobuf package; other imports from the schema's
    references, fetched from the registry."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    top = _add_file(pool, registry, schema, descriptor_pb2, set())
    if not top.message_type:
        raise PipelineDefinitionError(f"the registry's Protobuf schema {top.name!r} has no message")
    prefix = f"{top.package}." if top.package else ""
    return pool.FindMessageTypeByName(prefix + top.message_type[0].name)


def _add_file(pool: Any, registry: SchemaRegistry, schema: Any, descriptor_pb2: Any, added: set[str]) -> Any:
    """Add a registered schema's file, after the files it imports, to ``pool``."""
    from google.protobuf import descriptor_pool as default_pool

    proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
    referenced = {ref.name: ref for ref in schema.references or []}
    for dependency in proto.dependency:
        if dependency in added:
            continue
        added.add(dependency)
        if dependency in referenced:
            ref = referenced[dependency]
            found = registry.client.get_version(ref.subject, ref.version, fmt="serialized")
            _add_file(pool, registry, found.schema, descriptor_pb2, added)
        else:  # a well-known type (google/protobuf/*.proto), which the protobuf package holds
            _import_well_known(dependency)
            known = descriptor_pb2.FileDescriptorProto()
            default_pool.Default().FindFileByName(dependency).CopyToProto(known)
            pool.Add(known)
    pool.Add(proto)
    return proto


def _import_well_known(name: str) -> None:
    """Load the well-known type's module, so the default pool knows its file."""
    import importlib

    if name.startswith("google/protobuf/") and name.endswith(".proto"):
        importlib.import_module(f"google.protobuf.{name[len('google/protobuf/'):-len('.proto')]}_pb2")


_PROTO_LONGS = {"TYPE_INT32", "TYPE_INT64", "TYPE_UINT32", "TYPE_UINT64", "TYPE_SINT32", "TYPE_SINT64",
                "TYPE_FIXED32", "TYPE_FIXED64", "TYPE_SFIXED32", "TYPE_SFIXED64"}


def protobuf_fields(message: Any) -> dict[str, str]:
    """The column types of a Protobuf message's fields."""
    from google.protobuf.descriptor import FieldDescriptor

    names = {value: name for name, value in vars(FieldDescriptor).items() if name.startswith("TYPE_")}
    kinds: dict[str, str] = {}
    for item in message.fields:
        kind = names[item.type]
        if is_repeated(item):
            kinds[item.name] = "string"
        elif is_timestamp(item):
            kinds[item.name] = "timestamp"
        elif kind in _PROTO_LONGS:
            kinds[item.name] = "long"
        else:
            kinds[item.name] = {"TYPE_DOUBLE": "double", "TYPE_FLOAT": "double",
                                "TYPE_BOOL": "boolean"}.get(kind, "string")
    return kinds


def is_timestamp(item: Any) -> bool:
    """Whether a Protobuf field is one ``google.protobuf.Timestamp``."""
    return (item.message_type is not None and not is_repeated(item)
            and item.message_type.full_name == "google.protobuf.Timestamp")


def is_repeated(item: Any) -> bool:
    """Whether a Protobuf field is a list."""
    from google.protobuf.descriptor import FieldDescriptor

    repeated = getattr(item, "is_repeated", None)  # protobuf 6 deprecates .label
    return bool(repeated) if repeated is not None else item.label == FieldDescriptor.LABEL_REPEATED
