"""SQL for state tables: ``sp.sql("CREATE TABLE … AS SELECT …")`` over registered streams.

``catalog`` holds the names ``FROM`` reads; ``clauses`` reads ksqlDB's WINDOW and EMIT;
``expressions`` compiles WHERE and HAVING to pandas; ``compile`` builds the pipeline with the
Python API. ``register``/``sql`` work on one default catalog; pass ``catalog=`` to use another.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pipeline import Pipeline, Stream
from .catalog import Catalog
from .compile import compile_statement

__all__ = ["DEFAULT_CATALOG", "Catalog", "register", "sql"]

#: The catalog ``sp.register`` and ``sp.sql`` use when given none.
DEFAULT_CATALOG = Catalog()


def register(name: str, stream: Stream, timestamp: str | None = None, *,
             catalog: Catalog | None = None) -> None:
    """Make ``stream`` (``sp.read.from_delta(...)``, ``from_files``, ``from_callback``) usable as
    ``FROM name`` in :func:`sql`; ``timestamp`` names its event-time column for WINDOW clauses.
    ``catalog`` defaults to :data:`DEFAULT_CATALOG`."""
    (catalog or DEFAULT_CATALOG).register(name, stream, timestamp)


def sql(statement: str, streams: Mapping[str, Stream] | None = None, timestamp: str | None = None,
        *, catalog: Catalog | None = None) -> Pipeline:
    """Compile ``CREATE TABLE <name> AS SELECT … FROM <stream> … GROUP BY …`` to a pipeline named
    ``<name>`` whose sink is the state table ``<name>``.

    ``FROM`` reads ``streams`` (name -> stream) or else ``catalog`` (default:
    :data:`DEFAULT_CATALOG`). See :func:`ops.sql.compile.compile_statement` for WINDOW and EMIT.

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    >>> tickets = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales "
    ...                  "GROUP BY title EMIT CHANGES", catalog=catalog)
    >>> tickets.name, tickets.sinks[0].keys
    ('sold', ('title',))
    """
    return compile_statement(statement, catalog or DEFAULT_CATALOG, streams, timestamp)
