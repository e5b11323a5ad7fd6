"""``CREATE TABLE … AS SELECT … FROM stream [WINDOW …] [WHERE …] GROUP BY … [HAVING …]
[EMIT CHANGES|FINAL]``: a ksqlDB-style state table defined in SQL, compiled to a pipeline built
with the Python API (the statement is parsed with sqlglot; see :mod:`ops.sql.clauses` for the
clauses it does not know)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from ..errors import SqlError
from ..operators import aggregates
from ..pipeline import Pipeline, Stream
from .catalog import Catalog
from .clauses import split_clauses, window_of
from .expressions import AGGREGATES, predicate, snippet

_NAMED_AGGREGATES: dict[str, Callable[[Any], aggregates.Agg]] = {
    "LATEST_BY_OFFSET": aggregates.latest_by_offset, "COLLECT_LIST": aggregates.collect_list}
_UNSUPPORTED_CLAUSES = ("joins", "order", "limit", "offset", "distinct", "qualify", "with",
                        "windows", "laterals")


def compile_statement(statement: str, catalog: Catalog, streams: Mapping[str, Stream] | None = None,
                      timestamp: str | None = None) -> Pipeline:
    """Compile a ``CREATE TABLE … AS SELECT … [WINDOW …] GROUP BY …`` statement to a named
    pipeline whose sink is the state table. ``FROM`` names a stream in ``streams`` or, failing
    that, in ``catalog``.

    ``WINDOW TUMBLING (SIZE 1 MINUTE[, GRACE PERIOD 30 SECONDS])``, ``WINDOW HOPPING (SIZE
    2 MINUTES, ADVANCE BY 1 MINUTE[, GRACE PERIOD …])`` and ``WINDOW SESSION (5 MINUTES[, GRACE
    PERIOD …])`` window on event-time column ``timestamp`` (given here or when the stream was
    registered); ``EMIT FINAL`` needs a window.
    """
    body, window_tokens, emit = split_clauses(statement)
    try:
        create = sqlglot.parse_one(body)
    except ParseError as exc:
        raise SqlError(f"cannot parse the statement: {exc}") from None
    if not isinstance(create, exp.Create) or create.args.get("kind", "").upper() != "TABLE" \
            or not isinstance(create.expression, exp.Select):
        raise SqlError(f"expected CREATE TABLE <name> AS SELECT …, got: {snippet(create)}")
    table = create.this.name if isinstance(create.this, exp.Table) else create.this.this.name
    select = create.expression
    for clause in _UNSUPPORTED_CLAUSES:
        if select.args.get(clause):
            raise SqlError(f"unsupported in a state table query: {snippet(select.args[clause])}")
    local = Catalog()
    for name, given in (streams or {}).items():
        local.register(name, given)
    stream, registered_time = _source(select, local, catalog)
    keys = _group_keys(select)
    aggs, aliases = _select_list(select, keys)
    if select.args.get("where"):
        stream = stream.filter(predicate(select.args["where"].this, _where_column), name="where")
    having = None
    if select.args.get("having"):
        having = predicate(select.args["having"].this, _having_resolver(aliases, keys))
    grouped = stream.group_by(*keys)
    if window_tokens is None:
        if emit == "FINAL":
            raise SqlError("EMIT FINAL needs a WINDOW: a table without one emits changes only")
        changes = grouped.agg(having=having, name=f"{table}_aggregate", **aggs)
    else:
        if having is not None:
            raise SqlError("HAVING with a WINDOW is not supported")
        time = timestamp or registered_time
        window = window_of(window_tokens, time or "")  # the clause's own errors come first
        if time is None:
            raise SqlError("WINDOW needs an event-time column: sp.sql(..., timestamp='ts') or "
                           "sp.register(name, stream, timestamp='ts')")
        changes = grouped.window(window).agg(
            emit=emit.lower(), name=f"{table}_window", **aggs)
    return changes.write.to_table(table).named(table)


def _source(select: exp.Select, *catalogs: Catalog) -> tuple[Stream, str | None]:
    """The stream ``FROM`` names, from the first catalog that has it, and its event time."""
    origin = select.args.get("from_") or select.args.get("from")
    if origin is None or not isinstance(origin.this, exp.Table):
        raise SqlError(f"FROM must name one registered stream: {snippet(origin)}")
    name = origin.this.name
    for catalog in catalogs:
        if name in catalog:
            entry = catalog.lookup(name)
            return entry.stream, entry.timestamp
    known = sorted({known for catalog in catalogs for known in catalog.names()})
    raise SqlError(f"FROM {name}: no such stream; registered: {known}")


def _group_keys(select: exp.Select) -> tuple[str, ...]:
    group = select.args.get("group")
    if group is None:
        raise SqlError("a state table needs GROUP BY (one or more columns)")
    keys = []
    for item in group.expressions:
        if not isinstance(item, exp.Column):
            raise SqlError(f"GROUP BY supports plain columns, not {snippet(item)}")
        keys.append(item.name)
    return tuple(keys)


def _select_list(select: exp.Select,
                 keys: tuple[str, ...]) -> tuple[dict[str, aggregates.Agg], dict[str, str]]:
    aggs: dict[str, aggregates.Agg] = {}
    aliases: dict[str, str] = {}  # SQL text of each aggregate -> its output column
    for item in select.expressions:
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Column):
            if node.name not in keys:
                raise SqlError(f"{node.sql()} must be in GROUP BY or inside an aggregate")
            if alias and alias != node.name:
                raise SqlError(f"renaming group column {node.sql()} is not supported")
            continue
        agg = _aggregate(node)
        name = alias or f"{type(node).__name__.lower()}_{_argument(node) or 'rows'}"
        aggs[name] = agg
        aliases[node.sql().upper()] = name
    if not aggs:
        raise SqlError("the SELECT list needs at least one aggregate")
    return aggs, aliases


def _aggregate(node: exp.Expression) -> aggregates.Agg:
    if type(node) in AGGREGATES:
        return AGGREGATES[type(node)](_argument(node))
    if isinstance(node, exp.Anonymous) and node.name.upper() in _NAMED_AGGREGATES:
        return _NAMED_AGGREGATES[node.name.upper()](_argument(node))
    raise SqlError(f"unsupported in the SELECT list: {snippet(node)} (use COUNT, SUM, MIN, MAX, "
                   "AVG, LATEST_BY_OFFSET or COLLECT_LIST)")


def _argument(node: exp.Expression) -> str | None:
    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this]
    if len(args) != 1:
        raise SqlError(f"{snippet(node)} takes exactly one column")
    arg = args[0]
    if isinstance(arg, exp.Star):
        if not isinstance(node, exp.Count):
            raise SqlError(f"only COUNT takes *: {snippet(node)}")
        return None
    if not isinstance(arg, exp.Column):
        raise SqlError(f"aggregates take a plain column, not {snippet(arg)}")
    return arg.name


def _where_column(node: exp.Expression) -> str:
    """WHERE sees the input's columns; it runs before aggregation."""
    if isinstance(node, exp.Column):
        return node.name
    raise SqlError(f"aggregates belong in HAVING, not WHERE: {snippet(node)}")


def _having_resolver(aliases: Mapping[str, str], keys: tuple[str, ...]) -> Callable[[exp.Expression], str]:
    """HAVING sees the table's columns: group keys, aggregate names, and the aggregates of the
    SELECT list written out again."""
    names = set(aliases.values()) | set(keys)

    def resolve(node: exp.Expression) -> str:
        if isinstance(node, exp.Column) and node.name in names:
            return node.name
        if node.sql().upper() in aliases:
            return aliases[node.sql().upper()]
        raise SqlError(f"HAVING may use the group columns and the SELECT list's aggregates; "
                       f"{snippet(node)} is not among them")
    return resolve
