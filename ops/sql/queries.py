"""Queries over a state table: ``SELECT … FROM <table> [WHERE …]``.

A *pull query* (no ``EMIT CHANGES``) returns the table's current rows that match, at once, as
pandas: ksqlDB's lookup of a materialised view. The statement runs in DuckDB over the rows
read from the table (WHERE on any column, projections, ``ORDER BY`` and ``LIMIT`` included);
aggregations belong in a ``CREATE TABLE``. A *push query* (``… EMIT CHANGES``) is not a pull:
:class:`TableQuery` is what the analytics server subscribes to (a snapshot, then the rows each
batch changes), see :mod:`analytics`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import sqlglot
from pyspark.sql import SparkSession
from sqlglot import exp
from sqlglot.errors import ParseError

from ..columns import BATCH_COLUMN, CHANGE_COLUMN
from ..errors import SqlError
from .catalog import Catalog, TableEntry
from .clauses import split_clauses
from .engine import duckdb_sql, run_query
from .names import Columns, located, snippet
from .statement import syntax_error


@dataclass(frozen=True)
class TableQuery:
    """A compiled ``SELECT … FROM <state table> …``: ``sql`` is DuckDB's text over a frame of
    the table's rows, ``keys`` the table's key columns; ``push`` tells a push query (``EMIT
    CHANGES``) from a pull query. ``sql`` and ``keys`` are all it needs to run, so a server
    can rebuild it from what it stored.

    >>> query = TableQuery("SELECT k, v * 2 AS v2 FROM batch WHERE v > 1", keys=("k",), push=True)
    >>> changed = pd.DataFrame({"k": ["a", "b", "c"], "v": [5, 1, 7],
    ...                         "_change": ["update", "update", "delete"]})
    >>> query.pushed(changed).values.tolist()
    [['a', 10, 'upsert'], ['c', <NA>, 'delete']]
    """

    sql: str
    keys: tuple[str, ...]
    push: bool
    table: TableEntry | None = None

    def apply(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The query's rows over ``rows`` (the table's current ones)."""
        if rows.empty and not len(rows.columns):
            return rows
        return run_query(self.sql, rows.drop(columns=[BATCH_COLUMN], errors="ignore"))

    def pushed(self, changed: pd.DataFrame) -> pd.DataFrame:
        """Of a batch's change rows, what a push query's subscriber receives: the changed rows
        it selects, then the keys of the deleted ones (a client drops a key it showed), with
        ``_change`` ``upsert``/``delete``. A row that changed so it no longer matches is not
        sent: like ksqlDB's push queries, this is a stream of matching changes, not a
        maintained view."""
        deleted = (changed[CHANGE_COLUMN] == "delete").to_numpy()
        kept = self.apply(changed[~deleted].drop(columns=[CHANGE_COLUMN]))
        gone = changed.loc[deleted, [k for k in self.keys if k in changed.columns]]
        parts = [part for part in (kept.assign(**{CHANGE_COLUMN: "upsert"}),
                                   gone.assign(**{CHANGE_COLUMN: "delete"})) if len(part)]
        return pd.concat(parts, ignore_index=True) if parts else kept.assign(**{CHANGE_COLUMN: None})


def compile_query(statement: str, catalog: Catalog) -> TableQuery:
    """Compile a pull or push query over a state table registered in ``catalog`` (``sp.sql``
    registers every table it creates)."""
    body, clauses = split_clauses(statement)
    emit = clauses.emit
    if clauses.window is not None:
        raise SqlError("WINDOW: a query over a table has no WINDOW; windows belong in "
                       "CREATE TABLE … AS SELECT")
    try:
        select = sqlglot.parse_one(body)
    except ParseError as exc:
        raise syntax_error(statement, exc) from None
    if not isinstance(select, exp.Select):
        raise SqlError(f"expected SELECT … FROM <table> [WHERE …], got: {snippet(select)}")
    for clause, arg in (("GROUP BY", "group"), ("HAVING", "having"), ("JOIN", "joins")):
        if select.args.get(arg):
            part = select.args[arg]
            raise located(statement, part[0] if isinstance(part, list) else part, clause,
                          f"a query over a table takes no {clause}; aggregate in CREATE TABLE")
    origin = select.args.get("from_") or select.args.get("from")
    if origin is None or not isinstance(origin.this, exp.Table):
        raise located(statement, origin, "FROM", "FROM must name one state table")
    entry = catalog.table(origin.this.name)
    columns = Columns(entry.table, entry.columns)

    def resolve(part: exp.Expression) -> exp.Expression:
        if isinstance(part, exp.Column):
            resolved = exp.column(columns.resolve(part.this, statement, "SELECT"), quoted=True)
            resolved.this.meta.update(part.this.meta)
            return resolved
        if isinstance(part, exp.Table):
            return exp.to_table("batch")
        if isinstance(part, exp.AggFunc):
            raise located(statement, part, "SELECT", "a query over a table takes no aggregates; "
                          "aggregate in CREATE TABLE")
        return part
    resolved = select.copy().transform(resolve)
    return TableQuery(duckdb_sql(resolved), entry.keys, push=emit is not None, table=entry)


def pull(spark: SparkSession, statement: str, catalog: Catalog,
         warehouse: str | None = None) -> pd.DataFrame:
    """The rows a pull query returns now (see the module docstring)."""
    query = compile_query(statement, catalog)
    if query.push:
        raise SqlError("EMIT CHANGES makes a push query: subscribe to it through the analytics "
                       "server (analytics.QueryManager.subscribe_query), not sp.query")
    table = query.table
    assert table is not None  # compile_query names the table it reads
    rows = table.pipeline.read_sink(spark, table.table, warehouse)
    if rows.empty:  # no table yet: no rows, but the query's columns
        rows = pd.DataFrame(columns=list(table.columns))
    return query.apply(rows)
