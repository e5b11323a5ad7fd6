"""ksqlDB-style SQL: ``sp.sql("CREATE TABLE|STREAM … AS SELECT …")`` over registered streams,
and ``sp.query("SELECT … FROM <table> WHERE …")`` over the state tables it made;
``sp.declare("CREATE STREAM … WITH (KAFKA_TOPIC=…, VALUE_FORMAT=…)")`` registers a Kafka source.

``catalog`` holds the names ``FROM`` reads; ``statement`` parses a statement and
``clauses`` reads ksqlDB's WINDOW and EMIT; ``declare`` reads source declarations; ``names``
resolves columns and points errors at the text; ``inputs`` turns ``FROM``/``JOIN`` into a
stream; ``engine`` evaluates expressions with DuckDB; ``compile`` builds the pipeline with the
Python API; ``queries`` answers pull and push queries. ``register``/``declare``/``sql``/``query``
work on one default catalog; pass ``catalog=`` to use another.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from pyspark.sql import SparkSession

from ..kafka_client.registry import SchemaRegistry
from ..pipeline import Pipeline, Stream
from .catalog import Catalog
from .compile import compile_statement
from .declare import declare as _declare
from .queries import TableQuery, pull
from .queries import compile_query as _compile_query

__all__ = ["DEFAULT_CATALOG", "Catalog", "TableQuery", "compile_query", "declare", "query", "register",
           "sql"]

#: The catalog ``sp.register`` and ``sp.sql`` use when given none.
DEFAULT_CATALOG = Catalog()


def register(name: str, stream: Stream, timestamp: str | None = None, *,
             primary_key: str | tuple[str, ...] | None = None,
             catalog: Catalog | None = None) -> None:
    """Make ``stream`` (``sp.read.from_delta(...)``, ``from_files``, ``from_callback``) usable as
    ``FROM name`` in :func:`sql`; ``timestamp`` names its event-time column for WINDOW clauses;
    ``primary_key`` makes it a TABLE of updates (see :meth:`Catalog.register`). ``catalog``
    defaults to :data:`DEFAULT_CATALOG`."""
    (catalog or DEFAULT_CATALOG).register(name, stream, timestamp, primary_key=primary_key)


def declare(statement: str, *, bootstrap: str, registry: SchemaRegistry | str | None = None,
            options: dict[str, str] | None = None, catalog: Catalog | None = None) -> Stream:
    """Register the Kafka source a ksqlDB declaration describes, ``CREATE STREAM|TABLE <name>
    [(<columns>)] WITH (KAFKA_TOPIC='…', VALUE_FORMAT='AVRO'|'PROTOBUF'|'JSON_SR'|'JSON')``,
    for ``FROM <name>``, and return its stream. A registry format without a column list takes
    the columns of the topic's latest value schema in ``registry``; see
    :mod:`ops.sql.declare` for TIMESTAMP, PRIMARY KEY and the rest.

    >>> import ops as sp
    >>> sp.declare("CREATE STREAM orders WITH (KAFKA_TOPIC='orders')",   # doctest: +ELLIPSIS
    ...            bootstrap="127.0.0.1:9092")
    Traceback (most recent call last):
    ops.errors.SqlError: CREATE STREAM orders: WITH needs KAFKA_TOPIC='<topic>' and VALUE_FORMAT=...
    """
    return _declare(statement, catalog or DEFAULT_CATALOG, bootstrap=bootstrap, registry=registry,
                    options=options)


def sql(statement: str, streams: Mapping[str, Stream] | None = None, timestamp: str | None = None,
        *, catalog: Catalog | None = None, warehouse: str | None = None,
        emit_changes: str = "per_batch") -> Pipeline:
    """Compile ``CREATE TABLE <name> AS SELECT … FROM <stream> … GROUP BY …`` to a pipeline named
    ``<name>`` whose sink is the state table ``<name>`` (or ``CREATE STREAM <name> AS SELECT …``
    to one appending to the Delta table ``<name>``).

    ``FROM`` reads ``streams`` (name -> stream) or else ``catalog`` (default:
    :data:`DEFAULT_CATALOG`): a stream, a TABLE of updates, or a table an earlier statement
    created (read from its changelog under ``warehouse``). See
    :func:`ops.sql.compile.compile_statement` for WINDOW and EMIT. ``emit_changes``: how a
    table's ``EMIT CHANGES`` reaches its changelog: ``"per_batch"`` (the default, cheaper: one
    change per key a micro-batch changed, like ksqlDB's record cache) or ``"per_record"`` (one
    per input row that touches a key, even when its value did not change, like ksqlDB with
    ``cache.max.bytes.buffering=0``).

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    >>> tickets = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales "
    ...                  "GROUP BY title EMIT CHANGES", catalog=catalog)
    >>> tickets.name, tickets.sinks[0].keys
    ('sold', ('title',))
    """
    return compile_statement(statement, catalog or DEFAULT_CATALOG, streams, timestamp, warehouse,
                             emit_changes)


def query(spark: SparkSession, statement: str, *, catalog: Catalog | None = None,
          warehouse: str | None = None) -> pd.DataFrame:
    """A pull query: the current rows of a state table made by :func:`sql` that match
    ``SELECT … FROM <table> [WHERE …] [ORDER BY …] [LIMIT …]``, as pandas, read from the table
    at once (no pipeline runs). Columns resolve as in :func:`sql`; ``catalog`` defaults to
    :data:`DEFAULT_CATALOG`.
    """
    return pull(spark, statement, catalog or DEFAULT_CATALOG, warehouse)


def compile_query(statement: str, catalog: Catalog | None = None) -> TableQuery:
    """``SELECT … FROM <state table> [WHERE …] [EMIT CHANGES]`` compiled against ``catalog``
    (default :data:`DEFAULT_CATALOG`): what :func:`query` runs, and what the analytics server
    serves for a push query."""
    return _compile_query(statement, catalog or DEFAULT_CATALOG)
