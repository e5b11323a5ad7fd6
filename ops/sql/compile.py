"""ksqlDB's persistent queries compiled to pipelines built with the Python API.

- ``CREATE TABLE <t> AS SELECT … FROM <stream> [WINDOW …] [WHERE …] GROUP BY … [HAVING …]
  [EMIT CHANGES|FINAL]``: a state table. ``GROUP BY`` takes expressions; the SELECT list and
  HAVING take expressions over the group and the aggregates (``SUM(x) / COUNT(x)``), and
  HAVING may use aggregates the SELECT list does not show.
- ``CREATE STREAM <s> AS SELECT … FROM <stream> [WHERE …]``: a stateless projection appended
  to the Delta table ``<s>``.

The pipeline is: WHERE (a filter), the columns GROUP BY and the aggregates' arguments compute
(a map, only when one is an expression), the aggregation (HAVING inside it, since it decides
what the table shows), and the SELECT list over the aggregates (:class:`TableProjection`, only
when it is more than the keys and the aggregates). Every expression is evaluated by DuckDB
(:mod:`ops.sql.engine`); columns are resolved case-insensitively (:mod:`ops.sql.names`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Tokenizer

from ..columns import BATCH_COLUMN, ROW_COLUMN
from ..errors import SqlError
from ..operators import TableProjection, aggregates
from ..operators.basic import Filter
from ..operators.event_time import END, START, EventTimeAggregate
from ..pipeline import Pipeline, Stream
from ..readers import read as sp_read
from ..sinks import TableSink
from .catalog import Catalog, TableEntry
from .clauses import split_clauses, window_of
from .engine import Expressions, known_function
from .names import Columns, Scope, Side, located, snippet

_AGGREGATES: dict[type[exp.Expression], Callable[[str], aggregates.Agg]] = {
    exp.Sum: aggregates.sum_, exp.Min: aggregates.min_, exp.Max: aggregates.max_,
    exp.Avg: aggregates.avg}
_NAMED_AGGREGATES = ("LATEST_BY_OFFSET", "COLLECT_LIST")
_UNSUPPORTED_CLAUSES = {"order": "ORDER BY", "limit": "LIMIT",
                        "offset": "OFFSET", "distinct": "DISTINCT", "qualify": "QUALIFY",
                        "with": "WITH", "windows": "WINDOW", "laterals": "LATERAL"}
_WINDOW_BOUNDS = {"WINDOWSTART": START, "WINDOWEND": END}


@dataclass(frozen=True)
class Statement:
    """A parsed ``CREATE TABLE|STREAM <name> AS SELECT …``: ``text`` is the user's statement
    (positions in errors refer to it), ``window`` the WINDOW clause's tokens."""

    text: str
    kind: str
    name: str
    select: exp.Select
    window: list | None
    emit: str

    def error(self, node: exp.Expression | None, clause: str, message: str) -> SqlError:
        return located(self.text, node, clause, message)


def compile_statement(statement: str, catalog: Catalog, streams: Mapping[str, Stream] | None = None,
                      timestamp: str | None = None, warehouse: str | None = None,
                      emit_changes: str = "per_batch") -> Pipeline:
    """Compile a ``CREATE TABLE … AS SELECT …`` or ``CREATE STREAM … AS SELECT …`` statement to
    a pipeline named after what it creates. ``FROM`` names a stream in ``streams`` or, failing
    that, in ``catalog``; a table it creates is registered in ``catalog`` for pull queries.

    ``WINDOW TUMBLING (SIZE 1 MINUTE[, GRACE PERIOD 30 SECONDS])``, ``WINDOW HOPPING (SIZE
    2 MINUTES, ADVANCE BY 1 MINUTE[, GRACE PERIOD …])`` and ``WINDOW SESSION (5 MINUTES[, GRACE
    PERIOD …])`` window on event-time column ``timestamp`` (given here or when the stream was
    registered; a windowed table read by another window: its ``window_start``); ``EMIT FINAL``
    needs a window. A table read ``FROM`` is read from its changelog under ``warehouse``.
    """
    if emit_changes not in ("per_batch", "per_record"):
        raise SqlError(f"emit_changes={emit_changes!r}: use 'per_batch' or 'per_record'")
    parsed = parse(statement)
    local = Catalog()
    for name, given in (streams or {}).items():
        local.register(name, given)
    source = _source(parsed, warehouse, local, catalog)
    if parsed.kind == "STREAM":
        if source.table:
            raise SqlError(f"FROM: {source.columns.source} is a table; CREATE STREAM reads a "
                           "stream (CREATE TABLE … AS SELECT aggregates a table)")
        return _stream_query(parsed, source.stream, source.columns)
    time = timestamp or source.timestamp
    time = time and (source.columns.find(time) or time)
    if source.joined and not parsed.select.args.get("group"):
        pipeline, columns = _joined_table_query(parsed, source)
    else:
        if source.joined:  # aggregate the joined table: its changes as rows to take back
            source = dataclasses.replace(source, stream=source.stream.changes_as_rows(
                name=f"{parsed.name}_changes"))
        pipeline, columns = _table_query(parsed, source, time, emit_changes == "per_record")
    final = any(isinstance(op, EventTimeAggregate) and op.emit == "final"
                for op in pipeline.stream.operators)
    catalog.register_table(parsed.name, pipeline, columns, final)
    return pipeline


def parse(statement: str) -> Statement:
    """The statement read with sqlglot, ksqlDB's own clauses set aside (see ``clauses``)."""
    body, window, emit = split_clauses(statement)
    words = [t for t in Tokenizer().tokenize(body)][:3]
    kind = words[1].text.upper() if len(words) > 1 and words[0].text.upper() == "CREATE" else ""
    if kind == "STREAM":  # sqlglot knows CREATE TABLE only: same length, so positions hold
        body = body[:words[1].start] + "TABLE " + body[words[1].end + 1:]
    try:
        create = sqlglot.parse_one(body)
    except ParseError as exc:
        raise syntax_error(statement, exc) from None
    if not isinstance(create, exp.Create) or kind not in ("TABLE", "STREAM") \
            or not isinstance(create.expression, exp.Select):
        raise SqlError("expected CREATE TABLE <name> AS SELECT … or CREATE STREAM <name> AS "
                       f"SELECT …, got: {snippet(create)} (for a pull query use sp.query)")
    name = create.this.name if isinstance(create.this, exp.Table) else create.this.this.name
    return Statement(statement, kind, name, create.expression, window, emit or "CHANGES")


def syntax_error(text: str, exc: ParseError) -> SqlError:
    """Where the parser stopped, in the user's text, and what it expected (without the
    parser's internal names)."""
    first = exc.errors[0] if exc.errors else {}
    description = str(first.get("description") or "invalid syntax")
    if "<class" in description or "missing for" in description:
        description = "incomplete expression"
    line, column = int(first.get("line") or 1), int(first.get("col") or 1)
    shown = text.splitlines()[line - 1] if line <= len(text.splitlines()) else ""
    return SqlError(f"syntax error at line {line}, column {column}: {description}\n  {shown}\n"
                    f"  {' ' * max(column - 1, 0)}^")


@dataclass(frozen=True)
class _Source:
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
        known = self.stream.source.columns() if _columns_kept(self.stream) else None
        return Columns(self.name, known)

    def scope(self, renamed: tuple[tuple[str, str], ...] = ()) -> Scope:
        return Scope((Side(self.columns(), tuple(n.lower() for n in (self.name, self.alias) if n),
                           renamed),))


def _source(parsed: Statement, warehouse: str | None, *catalogs: Catalog) -> _Source:
    """What ``FROM`` (and ``JOIN``) read, from the first catalog that has each name (see
    :class:`_Source`)."""
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


def _read(parsed: Statement, named: _Named, warehouse: str | None) -> _Source:
    """One source's rows: a stream as it is, a stream of updates as a table's changes, a
    table from its changelog."""
    if named.table is not None:
        return _table_source(parsed, named, warehouse)
    assert named.stream is not None
    if not named.primary_key:
        return _Source(named.stream, named.timestamp, named.scope())
    columns = named.columns()
    key = [columns.find(column) or column for column in named.primary_key]
    rows = named.stream.as_table(*key, name=f"{named.name}_rows")
    return _Source(rows.changes_as_rows(name=f"{named.name}_changes"), named.timestamp,
                   named.scope(), table=True)


def _changelog(entry: TableEntry, warehouse: str | None) -> Stream:
    sink = entry.pipeline.sink(entry.table)
    assert isinstance(sink, TableSink)  # the catalog registers state tables only
    return sp_read.from_delta(sink.changelog(entry.pipeline.layout(warehouse)),
                              name=entry.table, order_by=(BATCH_COLUMN, ROW_COLUMN))


def _table_source(parsed: Statement, named: _Named, warehouse: str | None) -> _Source:
    """A table an earlier statement created, read from its changelog: as a table (its rows'
    changes) or, by a WINDOW, as the stream of its final windows."""
    entry = named.table
    assert entry is not None
    changelog = _changelog(entry, warehouse)
    if parsed.window is None:
        return _Source(changelog.changes_as_rows(name=f"{entry.table}_changes"), None,
                       named.scope(), table=True)
    if not entry.final:
        raise SqlError(f"WINDOW over table {entry.table}: its rows change as it updates; a "
                       "window reads each row once, so window a stream, or make "
                       f"{entry.table} a windowed table with EMIT FINAL")
    return _Source(changelog, START if START in entry.columns else None, named.scope())


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
                       warehouse: str | None) -> _Source:
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
    return _Source(joined, left.timestamp, scope)


def _table_table_join(parsed: Statement, left: _Named, right: _Named, join: exp.Join,
                      warehouse: str | None) -> _Source:
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
    return _Source(joined, None, scope, table=True, joined=(left_key,))


def _first(value: Any) -> exp.Expression:
    return value[0] if isinstance(value, list) else value


def _columns_kept(stream: Stream) -> bool:
    """Whether the stream's rows still have its source's columns (no operator, or filters)."""
    return all(isinstance(op, Filter) for op in stream.operators)


# -- CREATE STREAM -------------------------------------------------------------------------

def _stream_query(parsed: Statement, stream: Stream, columns: Scope) -> Pipeline:
    select = parsed.select
    for arg, clause in (("group", "GROUP BY"), ("having", "HAVING")):
        if select.args.get(arg):
            raise parsed.error(select.args[arg], clause, "a stream query has no " + clause +
                               "; use CREATE TABLE … AS SELECT for aggregations")
    if parsed.window is not None:
        raise SqlError("WINDOW: a stream query has no WINDOW; use CREATE TABLE … AS SELECT")
    if parsed.emit != "CHANGES":
        raise SqlError("EMIT FINAL: a stream query emits every row (EMIT CHANGES)")
    resolver = _Resolver(parsed, columns)
    stream = _where(parsed, stream, resolver)
    outputs: list[tuple[str, exp.Expression]] = []
    for position, item in enumerate(select.expressions):
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Star):
            if columns.names is None:
                raise parsed.error(item, "SELECT", f"SELECT * needs the columns of "
                                   f"{columns.source} to be known (declare its schema)")
            outputs += [(name, exp.column(name, quoted=True)) for name in columns.names]
            continue
        if _aggregates_in(node):
            raise parsed.error(node, "SELECT", "aggregates need CREATE TABLE … GROUP BY: "
                               f"{snippet(node)}")
        resolved = resolver.expression(node, "SELECT")
        outputs.append((alias or _default_name(resolved, position), resolved))
    _check_distinct(parsed, [name for name, _ in outputs])
    projection = Expressions.of(outputs, _declared(stream))
    return stream.map(projection.evaluate, name="select").write.to_delta(parsed.name).named(parsed.name)


# -- CREATE TABLE --------------------------------------------------------------------------

@dataclass
class _Aggregates:
    """The aggregates a table query computes: output name -> :class:`Agg`, the SQL text of each
    call -> its output name, and the argument columns a map must compute first."""

    aggs: dict[str, aggregates.Agg] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    arguments: list[tuple[str, exp.Expression]] = field(default_factory=list)


def _table_query(parsed: Statement, source: _Source, time: str | None,
                 per_record: bool) -> tuple[Pipeline, tuple[str, ...]]:
    """The pipeline of a CREATE TABLE, and the columns of its table."""
    select = parsed.select
    stream, columns = source.stream, source.columns
    group = select.args.get("group")
    if group is None:
        raise SqlError("GROUP BY: a state table needs GROUP BY (one or more columns or "
                       "expressions)")
    resolver = _Resolver(parsed, columns)
    stream = _where(parsed, stream, resolver)
    items = _items(parsed, resolver)
    groups = [resolver.expression(node, "GROUP BY") for node in group.expressions]
    keys = _key_names(items, groups)
    found = _Aggregates()
    for name, node in items:
        _collect(parsed, node, found, resolver, name)
    having = select.args.get("having")
    having_node = resolver.expression(having.this, "HAVING", aliases=dict(items)) if having else None
    if having_node is not None:
        _collect(parsed, having_node, found, resolver, None)
    if not found.aggs:
        raise parsed.error(select, "SELECT", "the SELECT list needs at least one aggregate")
    computed = [(key, node) for key, node in zip(keys, groups)
                if not (isinstance(node, exp.Column) and node.name == key)] + found.arguments
    aggs = found.aggs
    if computed:
        pre = Expressions.of(computed, _declared(stream))
        aggs = _typed(aggs, pre, stream)
        stream = stream.map(pre.append_to, name="group_columns")
    grouped = stream.group_by(*keys)
    windowed = parsed.window is not None
    replace = _replacer(parsed, keys, groups, found.names, windowed)
    having_fn = None if having_node is None else \
        Expressions.of([("having", replace(having_node, "HAVING"))]).mask
    if not windowed:
        if parsed.emit == "FINAL":
            raise SqlError("EMIT FINAL needs a WINDOW: a table without one emits changes only")
        changes = grouped.aggregate(aggs, having=having_fn, name=f"{parsed.name}_aggregate",
                                    per_record=per_record)
        table_keys = tuple(keys)
    else:
        window = window_of(parsed.window or [], time or "")  # the clause's errors come first
        if time is None:
            raise SqlError("WINDOW needs an event-time column: sp.sql(..., timestamp='ts') or "
                           "sp.register(name, stream, timestamp='ts')")
        changes = grouped.window(window).aggregate(
            aggs, emit=parsed.emit.lower(), having=having_fn, name=f"{parsed.name}_window",
            per_record=per_record and parsed.emit == "CHANGES")
        table_keys = (*keys, START)
    outputs = [(name, replace(node, "SELECT")) for name, node in items if name not in table_keys]
    # the aggregation's own columns are the table's when the SELECT list is the aggregates,
    # as they are, in order, and nothing else
    if [name for name, node in outputs if isinstance(node, exp.Column) and node.name == name] \
            != list(aggs) or len(outputs) != len(aggs):
        changes = changes.via(TableProjection(
            name=f"{parsed.name}_select", keys=table_keys, values=tuple(aggs),
            project=Expressions.of(outputs).evaluate))
    table_columns = (*table_keys, *((END,) if windowed else ()), *(name for name, _ in outputs))
    return changes.write.to_table(parsed.name).named(parsed.name), table_columns


def _joined_table_query(parsed: Statement, source: _Source) -> tuple[Pipeline, tuple[str, ...]]:
    """``CREATE TABLE … AS SELECT … FROM a JOIN b ON …`` (no GROUP BY): the joined table,
    keyed by the join key, its columns the SELECT list."""
    select = parsed.select
    for arg, clause in (("where", "WHERE"), ("having", "HAVING")):
        if select.args.get(arg):
            raise parsed.error(select.args[arg], clause, f"{clause} on a table–table join is not "
                               "supported; filter the tables in the statements that make them")
    if parsed.window is not None or parsed.emit == "FINAL":
        raise SqlError("WINDOW/EMIT FINAL: a table–table join has no window")
    resolver = _Resolver(parsed, source.columns)
    items = _items(parsed, resolver)
    for _, node in items:
        if _aggregates_in(node):
            raise parsed.error(_aggregates_in(node)[0], "SELECT", "aggregates need GROUP BY")
    keys = source.joined
    outputs = [(name, node) for name, node in items if name not in keys]
    values = tuple(c for c in source.columns.names or () if c not in keys)
    changes = source.stream.via(TableProjection(
        name=f"{parsed.name}_select", keys=keys, values=values,
        project=Expressions.of(outputs).evaluate))
    return (changes.write.to_table(parsed.name).named(parsed.name),
            (*keys, *(name for name, _ in outputs)))


def _where(parsed: Statement, stream: Stream, resolver: _Resolver) -> Stream:
    where = parsed.select.args.get("where")
    if where is None:
        return stream
    if _aggregates_in(where.this):
        raise parsed.error(_aggregates_in(where.this)[0], "WHERE",
                           f"aggregates belong in HAVING, not WHERE: "
                           f"{snippet(_aggregates_in(where.this)[0])}")
    condition = resolver.expression(where.this, "WHERE")
    return stream.filter(Expressions.of([("where", condition)], _declared(stream)).mask,
                         name="where")


def _items(parsed: Statement, resolver: _Resolver) -> list[tuple[str, exp.Expression]]:
    """The SELECT list as (output name, resolved expression)."""
    items = []
    for position, item in enumerate(parsed.select.expressions):
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Star):
            raise parsed.error(item, "SELECT", "SELECT * is not supported in a table query; "
                               "name the group columns and the aggregates")
        resolved = resolver.expression(node, "SELECT")
        items.append((alias or _default_name(resolved, position), resolved))
    _check_distinct(parsed, [name for name, _ in items])
    return items


def _key_names(items: list[tuple[str, exp.Expression]], groups: list[exp.Expression]) -> list[str]:
    """Each GROUP BY expression's column: the name the SELECT list gives the same expression,
    else the column's own name, else ksqlDB's ``KSQL_COL_<n>``."""
    names = []
    for position, node in enumerate(groups):
        named = next((name for name, item in items if item == node), None)
        if named is None:
            named = node.name if isinstance(node, exp.Column) else f"KSQL_COL_{position}"
        names.append(named)
    return names


def _collect(parsed: Statement, node: exp.Expression, found: _Aggregates, resolver: _Resolver,
             name: str | None) -> None:
    """Add the aggregate calls in ``node`` to ``found``; ``name`` is the output name when the
    whole SELECT item is one aggregate."""
    for call in _aggregates_in(node):
        text = call.sql()
        if text in found.names:
            continue
        for inner in _aggregates_in(call)[1:]:
            raise parsed.error(inner, "SELECT", f"an aggregate inside an aggregate: {snippet(call)}")
        output = name if call is node and name is not None else f"_agg{len(found.names)}"
        found.aggs[output] = _aggregate(parsed, call, found)
        found.names[text] = output


def _aggregate(parsed: Statement, call: exp.Expression, found: _Aggregates) -> aggregates.Agg:
    """The :class:`Agg` for one aggregate call; an argument that is an expression becomes a
    column computed before the aggregation."""
    if isinstance(call, exp.Count):
        arg = call.this
        if isinstance(arg, exp.Distinct):
            raise parsed.error(call, "SELECT", "COUNT(DISTINCT …) is not supported")
        if isinstance(arg, (exp.Star, exp.Literal)):  # COUNT(*), COUNT(1): rows
            return aggregates.count()
        return aggregates.count(_argument(arg, found))
    if type(call) in _AGGREGATES:
        return _AGGREGATES[type(call)](_argument(call.this, found))
    args = call.expressions
    kind = call.name.upper() if isinstance(call, exp.Anonymous) else ""
    if kind == "LATEST_BY_OFFSET" and len(args) in (1, 2):
        ignore_nulls = True
        if len(args) == 2:
            if not isinstance(args[1], exp.Boolean):
                raise parsed.error(args[1], "SELECT", "LATEST_BY_OFFSET's second argument is "
                                   "TRUE or FALSE (ignore nulls)")
            ignore_nulls = bool(args[1].this)
        return aggregates.latest_by_offset(_argument(args[0], found), ignore_nulls=ignore_nulls)
    if kind == "COLLECT_LIST" and len(args) == 1:
        return aggregates.collect_list(_argument(args[0], found))
    if kind in _NAMED_AGGREGATES:
        raise parsed.error(call, "SELECT", f"{snippet(call)}: wrong number of arguments")
    name = call.sql().split("(")[0].upper()
    raise parsed.error(call, "SELECT", f"unsupported aggregate {name}; use COUNT, SUM, MIN, MAX, "
                       "AVG, LATEST_BY_OFFSET or COLLECT_LIST")


def _argument(node: exp.Expression, found: _Aggregates) -> str:
    """The column an aggregate reads: a plain column, or one computed before the aggregation."""
    if isinstance(node, exp.Column):
        return node.name
    name = f"_arg{len(found.arguments)}"
    found.arguments.append((name, node))
    return name


def _aggregates_in(node: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls in ``node``, outermost first (``node`` itself when it is one)."""
    return [part for part in node.walk(bfs=True)
            if isinstance(part, exp.Expression) and _is_aggregate(part)]


def _is_aggregate(node: exp.Expr) -> bool:
    """Whether ``node`` is an aggregate call (one this module computes, or another SQL knows,
    refused by :func:`_aggregate` with the list of supported ones)."""
    return isinstance(node, exp.AggFunc) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in _NAMED_AGGREGATES)


def _declared(stream: Stream) -> dict[str, str]:
    """The declared kinds of the stream's columns, when its rows still have its source's."""
    return dict(stream.source.schema.fields) if _columns_kept(stream) else {}


def _typed(aggs: dict[str, aggregates.Agg], pre: Expressions, stream: Stream) -> dict[str, aggregates.Agg]:
    """``aggs`` typed by the computed columns' types when the source's schema is declared, so
    a first batch of nulls still makes typed columns (see :meth:`Agg.typed`)."""
    declared = _declared(stream)
    if not declared:
        return aggs
    declared.update(pre.types(stream.source.schema.frame([], [])))
    return {name: agg.typed(declared) for name, agg in aggs.items()}


_Rewrite = Callable[[exp.Expression, str], exp.Expression]


def _replacer(parsed: Statement, keys: list[str], groups: list[exp.Expression],
              aggregate_names: Mapping[str, str], windowed: bool) -> _Rewrite:
    """Rewrites a SELECT item or HAVING over the aggregation's output: aggregate calls and
    GROUP BY expressions become its columns, WINDOWSTART/WINDOWEND the window's bounds."""
    by_group = {node.sql(): key for node, key in zip(groups, keys)}

    def replace(node: exp.Expression, clause: str) -> exp.Expression:
        def visit(part: exp.Expression) -> exp.Expression:
            text = part.sql()
            if text in aggregate_names:
                return exp.column(aggregate_names[text], quoted=True)
            if text in by_group:
                return exp.column(by_group[text], quoted=True)
            if isinstance(part, exp.Column) and part.name in _WINDOW_BOUNDS.values():
                if clause == "HAVING":
                    raise parsed.error(part, clause, "WINDOWSTART/WINDOWEND in HAVING are not "
                                       "supported; filter the table's rows when you read them")
                if not windowed:
                    raise parsed.error(part, clause, f"{part.name.upper().replace('_', '')} "
                                       "needs a WINDOW")
                return exp.column(part.name, quoted=True)
            if isinstance(part, exp.Column):
                raise parsed.error(part, clause, f"{part.name} must be in GROUP BY or inside "
                                   "an aggregate")
            return part
        return node.copy().transform(visit)
    return replace


def _default_name(node: exp.Expression, position: int) -> str:
    """An unnamed SELECT item's column: a column's name, an aggregate's ``<kind>_<column>``
    (``count_rows`` for ``COUNT(*)``), else ksqlDB's ``KSQL_COL_<position>``."""
    if isinstance(node, exp.Column):
        return node.name
    if _is_aggregate(node):
        kind = node.name.lower() if isinstance(node, exp.Anonymous) else type(node).__name__.lower()
        args = node.expressions if isinstance(node, exp.Anonymous) else [node.this]
        arg = args[0] if args else None
        return f"{kind}_{arg.name if isinstance(arg, exp.Column) else 'rows'}"
    return f"KSQL_COL_{position}"


def _check_distinct(parsed: Statement, names: list[str]) -> None:
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise parsed.error(parsed.select, "SELECT", f"column name(s) {twice} used twice; "
                           "name each item with AS")


@dataclass(frozen=True)
class _Resolver:
    """Resolves the columns of a statement's expressions to the sources' (case-insensitively,
    see :class:`Scope`); ``WINDOWSTART``/``WINDOWEND`` to the window bounds."""

    parsed: Statement
    scope: Scope

    def expression(self, node: exp.Expression, clause: str,
                   aliases: Mapping[str, exp.Expression] | None = None) -> exp.Expression:
        """``node`` with every column resolved; in HAVING, a name the SELECT list gives an
        item that is not a source column stands for that item."""
        def visit(part: exp.Expression) -> exp.Expression:
            if isinstance(part, exp.Anonymous) and not _is_aggregate(part) \
                    and not known_function(part.name):
                raise self.parsed.error(part, clause, f"unknown function {part.name.upper()}")
            if not isinstance(part, exp.Column):
                return part
            identifier = part.this
            if not identifier.quoted and not part.table \
                    and identifier.name.upper() in _WINDOW_BOUNDS \
                    and self.scope.find(identifier.name) is None:
                bound = exp.column(_WINDOW_BOUNDS[identifier.name.upper()], quoted=True)
                bound.this.meta.update(identifier.meta)
                return bound
            if aliases and not part.table and self.scope.find(identifier.name) is None:
                named = next((item for name, item in aliases.items()
                              if name == identifier.name or (not identifier.quoted
                                                             and name.lower() == identifier.name.lower())),
                             None)
                if named is not None:
                    return named.copy()
            resolved = exp.column(self.scope.resolve(part, self.parsed.text, clause), quoted=True)
            resolved.this.meta.update(identifier.meta)  # errors still point at the user's text
            return resolved
        return node.copy().transform(visit)
