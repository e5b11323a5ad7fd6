"""What a statement reads: ``FROM`` a stream, a TABLE of updates or a table an earlier
statement made, or two of them joined (``JOIN … ON``), as one stream of rows with the columns
its expressions may name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ..columns import BATCH_COLUMN, ROW_COLUMN
from ..errors import SqlError
from ..operators.basic import Filter
from ..operators.event_time import START
from ..pipeline import Stream
from ..readers import read as sp_read
from ..sinks import TableSink
from .catalog import Catalog, TableEntry
from .engine import Expressions
from .names import Columns, Scope, Side, snippet
from .statement import Statement

_UNSUPPORTED_CLAUSES = {"order": "ORDER BY", "limit": "LIMIT",
                        "offset": "OFFSET", "distinct": "DISTINCT", "qualify": "QUALIFY",
                        "with": "WITH", "with_": "WITH", "windows": "WINDOW",
                        "laterals": "LATERAL"}


@dataclass(frozen=True)
class Input:
    """What ``FROM`` reads: its rows as a stream, their event time, their columns (one source,
    or two joined), and whether they are a table's changes (an aggregation takes rows back;
    ``joined``: the changes of a table–table join, keyed by the join key)."""

    stream: Stream
    timestamp: str | None
    columns: Scope
    table: bool = False
    joined: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Named:
    """A name ``FROM`` or ``JOIN`` reads, looked up: a stream (with its event time and, for a
    stream of updates, its primary key) or a table an earlier statement created."""

    name: str
    alias: str | None
    stream: Stream | None = None
    timestamp: str | None = None
    primary_key: tuple[str, ...] = ()
    table: TableEntry | None = None

    def columns(self) -> Columns:
        if self.table is not None:
            return Columns(self.table.table, self.table.columns)
        assert self.stream is not None
        known = self.stream.source.columns() if columns_kept(self.stream) else None
        return Columns(self.name, known)

    def scope(self, renamed: tuple[tuple[str, str], ...] = ()) -> Scope:
        return Scope((Side(self.columns(), tuple(n.lower() for n in (self.name, self.alias) if n),
                           renamed),))


def read_from(parsed: Statement, warehouse: str | None, *catalogs: Catalog) -> Input:
    """What ``FROM`` (and ``JOIN``) read, from the first catalog that has each name (see
    :class:`Input`)."""
    select = parsed.select
    for arg, clause in _UNSUPPORTED_CLAUSES.items():
        if select.args.get(arg):
            part = _first(select.args[arg])
            raise parsed.error(part, clause, f"unsupported in a {parsed.kind.lower()} query: "
                               f"{snippet(part)}")
    origin = select.args.get("from_") or select.args.get("from")
    if origin is None or not isinstance(origin.this, exp.Table):
        raise parsed.error(origin, "FROM", "FROM must name one registered stream or table")
    left = _lookup(parsed, origin.this, catalogs)
    joins = select.args.get("joins") or []
    if len(joins) > 1:
        raise parsed.error(joins[1], "JOIN", "one JOIN per statement; chain statements instead")
    if not joins:
        return _read(parsed, left, warehouse)
    join = joins[0]
    if not isinstance(join.this, exp.Table):
        raise parsed.error(join, "JOIN", "JOIN must name a registered stream or table")
    right = _lookup(parsed, join.this, catalogs)
    if left.table is None and right.table is not None and not left.primary_key:
        return _stream_table_join(parsed, left, right, join, warehouse)
    if left.table is not None and right.table is not None:
        return _table_table_join(parsed, left, right, join, warehouse)
    raise parsed.error(join, "JOIN", "stream–stream joins (WITHIN) are not supported; join a "
                       "stream to a table (CREATE TABLE … AS SELECT over the other stream "
                       "first), or two tables")


def _lookup(parsed: Statement, table: exp.Table, catalogs: tuple[Catalog, ...]) -> _Named:
    name, alias = table.name, table.alias or None
    for catalog in catalogs:
        if name in catalog:
            entry = catalog.lookup(name)
            return _Named(name, alias, entry.stream, entry.timestamp, entry.primary_key)
        if catalog.has_table(name):
            return _Named(name, alias, table=catalog.table(name))
    known = sorted({known for catalog in catalogs for known in catalog.names()}
                   | {t for catalog in catalogs for t in catalog.tables()})
    raise parsed.error(table, "FROM", f"no such stream or table {name}; registered: {known}")


def _read(parsed: Statement, named: _Named, warehouse: str | None) -> Input:
    """One source's rows: a stream as it is, a stream of updates as a table's changes, a
    table from its changelog."""
    if named.table is not None:
        return _table_source(parsed, named, warehouse)
    assert named.stream is not None
    if not named.primary_key:
        return Input(named.stream, named.timestamp, named.scope())
    columns = named.columns()
    key = [columns.find(column) or column for column in named.primary_key]
    rows = named.stream.as_table(*key, name=f"{named.name}_rows")
    return Input(rows.changes_as_rows(name=f"{named.name}_changes"), named.timestamp,
                   named.scope(), table=True)


def _changelog(entry: TableEntry, warehouse: str | None) -> Stream:
    sink = entry.pipeline.sink(entry.table)
    assert isinstance(sink, TableSink)  # the catalog registers state tables only
    return sp_read.from_delta(sink.changelog(entry.pipeline.layout(warehouse)),
                              name=entry.table, order_by=(BATCH_COLUMN, ROW_COLUMN))


def _table_source(parsed: Statement, named: _Named, warehouse: str | None) -> Input:
    """A table an earlier statement created, read from its changelog: as a table (its rows'
    changes) or, by a WINDOW, as the stream of its final windows."""
    entry = named.table
    assert entry is not None
    changelog = _changelog(entry, warehouse)
    if parsed.window is None:
        return Input(changelog.changes_as_rows(name=f"{entry.table}_changes"), None,
                       named.scope(), table=True)
    if not entry.final:
        raise SqlError(f"WINDOW over table {entry.table}: its rows change as it updates; a "
                       "window reads each row once, so window a stream, or make "
                       f"{entry.table} a windowed table with EMIT FINAL")
    return Input(changelog, START if START in entry.columns else None, named.scope())


def _join_columns(parsed: Statement, join: exp.Join, left: _Named,
                  right: _Named) -> tuple[str, str]:
    """The columns of ``ON left.a = right.b``: (a, b), each resolved in its own side."""
    on = join.args.get("on")
    if not isinstance(on, exp.EQ) or not all(isinstance(side, exp.Column)
                                             for side in (on.this, on.expression)):
        raise parsed.error(on or join, "JOIN", "a join needs ON <column> = <column>")
    sides = (left.scope(), right.scope())
    ends: dict[int, str] = {}
    for column in (on.this, on.expression):
        owner = next((i for i, scope in enumerate(sides)
                      if column.table and column.table.lower() in scope.sides[0].qualifiers), None)
        if owner is None:  # unqualified: the side that has it
            owner = 0 if sides[0].find(column.name) and 0 not in ends else 1
        ends[owner] = sides[owner].resolve(column, parsed.text, "JOIN")
    if len(ends) != 2:
        raise parsed.error(on, "JOIN", "ON must compare a column of each side")
    return ends[0], ends[1]


def _stream_table_join(parsed: Statement, left: _Named, right: _Named, join: exp.Join,
                       warehouse: str | None) -> Input:
    """``stream [LEFT] JOIN table ON stream.col = table.key``: each row enriched with the
    table's row for its key, as of the batch's plan."""
    table = right.table
    assert table is not None and left.stream is not None
    how = {"": "inner", "INNER": "inner", "LEFT": "left"}.get(join.side or join.kind or "")
    if how is None:
        raise parsed.error(join, "JOIN", f"a stream–table join is JOIN or LEFT JOIN, not "
                           f"{join.side or join.kind} JOIN")
    stream_column, table_column = _join_columns(parsed, join, left, right)
    if table.keys != (table_column,):
        raise parsed.error(join.args["on"], "JOIN", f"a stream–table join is ON the table's key "
                           f"{list(table.keys)}, not {table_column}")
    stream_columns = left.columns().names or ()
    stream = left.stream
    if stream_column != table_column:
        if table_column in stream_columns:
            raise parsed.error(join.args["on"], "JOIN", f"the stream has a column {table_column} "
                               "other than the join key; rename it in a CREATE STREAM first")
        copy = Expressions.of([(table_column, exp.column(stream_column, quoted=True))])
        stream = stream.map(copy.append_to, name=f"{table.table}_key")
    values = tuple(c for c in table.columns if c != table_column)
    renamed = tuple((c, f"{c}_table") for c in values if c in stream_columns)
    path = table.pipeline.table_path(table.table, warehouse)
    joined = stream.join_table(path, on=table_column, columns=values, how=how,
                               name=f"join_{table.table}")
    scope = Scope((*left.scope().sides, *right.scope(renamed).sides))
    return Input(joined, left.timestamp, scope)


def _table_table_join(parsed: Statement, left: _Named, right: _Named, join: exp.Join,
                      warehouse: str | None) -> Input:
    """``table [LEFT|FULL OUTER] JOIN table ON a.key = b.key``: a table of the two, changed
    whenever either side changes (see :class:`TableTableJoin`)."""
    assert left.table is not None and right.table is not None
    how = {"": "inner", "INNER": "inner", "LEFT": "left", "FULL": "outer"}.get(
        join.side or join.kind or "")
    if how is None:
        raise parsed.error(join, "JOIN", "a table–table join is JOIN, LEFT JOIN or FULL OUTER JOIN")
    left_key, right_key = _join_columns(parsed, join, left, right)
    if left.table.keys != (left_key,) or right.table.keys != (right_key,):
        raise parsed.error(join.args["on"], "JOIN", "a table–table join is ON both tables' keys "
                           f"({list(left.table.keys)}, {list(right.table.keys)})")
    if left_key != right_key:
        raise parsed.error(join.args["on"], "JOIN", f"the keys are named {left_key} and "
                           f"{right_key}: name them alike (as in the statements that made them)")
    left_values = tuple(c for c in left.table.columns if c != left_key)
    right_values = tuple(c for c in right.table.columns if c != right_key)
    clash = sorted(set(left_values) & set(right_values))
    if clash:
        raise parsed.error(join, "JOIN", f"both tables have columns {clash}; name them apart in "
                           "the statements that made them")
    if parsed.window is not None:
        raise SqlError("WINDOW: a table–table join has no window")
    merged = _changelog(left.table, warehouse).merge(_changelog(right.table, warehouse))
    joined = merged.join_tables(on=left_key, left=(left.table.table, left_values),
                                right=(right.table.table, right_values), how=how,
                                name=f"join_{left.table.table}_{right.table.table}")
    scope = Scope((*left.scope().sides, *right.scope().sides))
    return Input(joined, None, scope, table=True, joined=(left_key,))


def _first(value: Any) -> exp.Expression:
    return value[0] if isinstance(value, list) else value


def columns_kept(stream: Stream) -> bool:
    """Whether the stream's rows still have its source's columns (no operator, or filters)."""
    return all(isinstance(op, Filter) for op in stream.operators)
