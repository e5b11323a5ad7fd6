"""ksqlDB's source declarations: ``CREATE STREAM|TABLE <name> [(<columns>)] WITH (KAFKA_TOPIC=…,
VALUE_FORMAT=…)`` makes a Kafka source and registers it for ``FROM``.

``VALUE_FORMAT`` is ``'AVRO'``, ``'PROTOBUF'``, ``'JSON_SR'`` (JSON Schema), all three with a
schema registry, or ``'JSON'``. With a registry format and no column list the columns are
those of the topic's latest registered value schema, as ksqlDB takes them. ``TIMESTAMP='<col>'``
names the event-time column (WINDOW clauses); otherwise ROWTIME is the record's Kafka
timestamp. A TABLE needs a ``PRIMARY KEY`` column, a field of the record's value (the message
key is the stream's ``_key`` column). The topic must exist: lakestream does not create it
(``PARTITIONS``/``REPLICAS`` are refused).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from ..errors import SqlError
from ..kafka_client.registry import SchemaRegistry
from ..pipeline import Stream
from ..readers import read
from .catalog import Catalog
from .names import located, snippet
from .statement import syntax_error

#: ksqlDB's VALUE_FORMAT -> the source's value_format
VALUE_FORMATS = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON_SR": "json_schema", "JSON": "json"}
#: ksqlDB's column types -> the kinds a source checks
COLUMN_TYPES = {"VARCHAR": "string", "TEXT": "string", "CHAR": "string", "BIGINT": "long",
                "INT": "long", "SMALLINT": "long", "TINYINT": "long", "DOUBLE": "double",
                "FLOAT": "double", "DECIMAL": "double", "BOOLEAN": "boolean", "TIMESTAMP": "timestamp"}
PROPERTIES = ("KAFKA_TOPIC", "VALUE_FORMAT", "TIMESTAMP", "KEY_FORMAT")


@dataclass(frozen=True)
class Declaration:
    """What a declaration says: the source's name, kind (``STREAM``/``TABLE``), topic, value
    format, declared columns (empty: from the registry), primary key and timestamp column."""

    name: str
    kind: str
    topic: str
    value_format: str
    columns: dict[str, str]
    primary_key: str | None
    timestamp: str | None


def declare(statement: str, catalog: Catalog, *, bootstrap: str,
            registry: SchemaRegistry | str | None = None,
            options: dict[str, str] | None = None) -> Stream:
    """Register the Kafka source ``statement`` declares in ``catalog`` and return its stream."""
    said = parse_declaration(statement)
    stream = read.from_kafka(said.topic, bootstrap=bootstrap, value_format=said.value_format,
                             schema=said.columns or None, registry=registry, options=options,
                             name=said.name)
    columns = stream.source.schema.fields
    for what, column in (("PRIMARY KEY", said.primary_key), ("TIMESTAMP", said.timestamp)):
        if column is not None and column not in columns:
            raise SqlError(f"CREATE {said.kind} {said.name}: {what} column {column!r} is not a "
                           f"column of topic {said.topic!r}'s values: {sorted(columns)}")
    catalog.register(said.name, stream, said.timestamp, primary_key=said.primary_key)
    return stream


def parse_declaration(statement: str) -> Declaration:
    """The declaration read, every mistake pointed at in the text.

    >>> said = parse_declaration("CREATE STREAM orders WITH (KAFKA_TOPIC='orders', "
    ...                          "VALUE_FORMAT='AVRO')")
    >>> said.topic, said.value_format, said.columns
    ('orders', 'avro', {})
    """
    words = statement.lstrip().split(None, 2)
    kind = words[1].upper() if len(words) > 1 else ""
    body = statement
    if kind == "STREAM":  # sqlglot knows CREATE TABLE only: same length, so positions hold
        start = statement.upper().index("STREAM")
        body = statement[:start] + "TABLE " + statement[start + len("STREAM"):]
    try:
        create = sqlglot.parse_one(body)
    except ParseError as error:
        raise syntax_error(statement, error) from None
    if not isinstance(create, exp.Create) or kind not in ("STREAM", "TABLE") or create.expression:
        raise SqlError("expected CREATE STREAM|TABLE <name> [(<columns>)] WITH (KAFKA_TOPIC='…', "
                       f"VALUE_FORMAT='…'), got: {snippet(create)}")
    target = create.this
    table = target.this if isinstance(target, exp.Schema) else target
    columns, primary_key = _columns(statement, target)
    properties = _properties(statement, create)
    where = f"CREATE {kind} {table.name}"
    if kind == "TABLE" and primary_key is None:
        raise SqlError(f"{where}: a TABLE needs a column declared PRIMARY KEY (a field of the "
                       "value: each record is the new row of its key)")
    if "KAFKA_TOPIC" not in properties or "VALUE_FORMAT" not in properties:
        raise SqlError(f"{where}: WITH needs KAFKA_TOPIC='<topic>' and VALUE_FORMAT='<format>' "
                       f"(one of {sorted(VALUE_FORMATS)})")
    value_format = properties["VALUE_FORMAT"].upper()
    if value_format not in VALUE_FORMATS:
        raise SqlError(f"{where}: VALUE_FORMAT={value_format!r} is not one of {sorted(VALUE_FORMATS)}")
    if properties.get("KEY_FORMAT", "KAFKA").upper() != "KAFKA":
        raise SqlError(f"{where}: KEY_FORMAT must be 'KAFKA': message keys are read as text (_key)")
    if value_format == "JSON" and not columns:
        raise SqlError(f"{where}: VALUE_FORMAT='JSON' needs a column list; the registry formats "
                       "(AVRO, PROTOBUF, JSON_SR) can take their columns from the registry")
    return Declaration(table.name, kind, properties["KAFKA_TOPIC"], VALUE_FORMATS[value_format],
                       columns, primary_key, properties.get("TIMESTAMP"))


def _columns(text: str, target: exp.Expression) -> tuple[dict[str, str], str | None]:
    """The declared columns' kinds and the PRIMARY KEY column, if any."""
    if not isinstance(target, exp.Schema):
        return {}, None
    columns: dict[str, str] = {}
    primary_key = None
    for column in target.expressions:
        if not isinstance(column, exp.ColumnDef) or column.args.get("kind") is None:
            raise located(text, column, "columns", f"expected <name> <type>, got {snippet(column)}")
        type_name = column.args["kind"].this.name
        if type_name not in COLUMN_TYPES:
            raise located(text, column, "columns", f"type {type_name} of column {column.name} is "
                          f"not one of {sorted(COLUMN_TYPES)}")
        columns[column.name] = COLUMN_TYPES[type_name]
        if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
               for c in column.args.get("constraints") or []):
            primary_key = column.name
    return columns, primary_key


def _properties(text: str, create: exp.Create) -> dict[str, str]:
    """The WITH properties, by upper-case name; an unknown one is pointed at."""
    properties: dict[str, str] = {}
    for prop in (create.args.get("properties") or exp.Properties()).expressions:
        name = prop.name.upper() if isinstance(prop, exp.Property) else ""
        value = prop.args.get("value") if isinstance(prop, exp.Property) else None
        if name not in PROPERTIES or not isinstance(value, exp.Literal):
            raise located(text, prop, "WITH", f"unsupported property {snippet(prop)}: use "
                          f"{', '.join(PROPERTIES)} with quoted values (the topic must exist; "
                          "lakestream does not create it)")
        properties[name] = value.this
    return properties
