"""``sp.sql("CREATE TABLE … AS SELECT … FROM stream [WHERE …] GROUP BY … [HAVING …]
[EMIT CHANGES]")``: a ksqlDB-style state table defined in SQL, compiled to a pipeline.

The statement is parsed with sqlglot (ksqlDB's ``EMIT`` clause is cut off by token position
first, since sqlglot does not know it). WHERE and HAVING become functions over pandas frames
built from the syntax tree: nothing in a statement is ever evaluated as Python or spliced into
Spark SQL.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping

import pandas as pd
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Tokenizer

from . import aggregates
from .errors import SqlError

_streams: dict[str, Any] = {}

_AGGREGATES: dict[type, Callable[[str | None], aggregates.Agg]] = {
    exp.Count: aggregates.count, exp.Sum: aggregates.sum_, exp.Min: aggregates.min_,
    exp.Max: aggregates.max_, exp.Avg: aggregates.avg}
_NAMED_AGGREGATES = {"LATEST_BY_OFFSET": aggregates.latest_by_offset,
                     "COLLECT_LIST": aggregates.collect_list}
_COMPARISONS = {exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt,
                exp.GTE: operator.ge, exp.LT: operator.lt, exp.LTE: operator.le,
                exp.Add: operator.add, exp.Sub: operator.sub, exp.Mul: operator.mul,
                exp.Div: operator.truediv}
_UNSUPPORTED_CLAUSES = ("joins", "order", "limit", "offset", "distinct", "qualify", "with",
                        "windows", "laterals")


def register(name: str, stream: Any) -> None:
    """Make ``stream`` (``sp.read.from_delta(...)``, ``from_files``, ``from_callback``) usable as
    ``FROM name`` in ``sp.sql``."""
    _streams[name.lower()] = stream


def sql(statement: str, streams: Mapping[str, Any] | None = None):
    """Compile a ``CREATE TABLE … AS SELECT … GROUP BY …`` statement to a named pipeline whose
    sink is the state table (see :func:`register` for ``FROM``)."""
    body = _strip_emit(statement)
    try:
        create = sqlglot.parse_one(body)
    except ParseError as exc:
        raise SqlError(f"cannot parse the statement: {exc}") from None
    if not isinstance(create, exp.Create) or create.args.get("kind", "").upper() != "TABLE" \
            or not isinstance(create.expression, exp.Select):
        raise SqlError(f"expected CREATE TABLE <name> AS SELECT …, got: {_snippet(create)}")
    table = create.this.name if isinstance(create.this, exp.Table) else create.this.this.name
    select = create.expression
    for clause in _UNSUPPORTED_CLAUSES:
        if select.args.get(clause):
            raise SqlError(f"unsupported in a state table query: {_snippet(select.args[clause])}")
    stream = _source(select, {k.lower(): v for k, v in (streams or {}).items()})
    keys = _group_keys(select)
    aggs, aliases = _select_list(select, keys)
    if select.args.get("where"):
        stream = stream.filter(_predicate(select.args["where"].this, _where_column), name="where")
    having = None
    if select.args.get("having"):
        having = _predicate(select.args["having"].this, _having_resolver(aliases, keys))
    return (stream.group_by(*keys).agg(having=having, name=f"{table}_aggregate", **aggs)
            .write.to_table(table).named(table))


def _strip_emit(statement: str) -> str:
    """The statement without a trailing ``EMIT CHANGES`` (the only emission of a table without a
    window) or ``;``; ``EMIT FINAL`` and ``WINDOW`` are refused with the part quoted."""
    tokens = Tokenizer().tokenize(statement)
    for index, token in enumerate(tokens):
        if token.text.upper() == "WINDOW" and index + 1 < len(tokens):
            raise SqlError(f"windowed state tables are not supported yet: "
                           f"{statement[token.start:].strip()[:60]!r}")
        if token.text.upper() == "EMIT":
            rest = [t.text.upper() for t in tokens[index + 1:] if t.text != ";"]
            if rest != ["CHANGES"]:
                raise SqlError(f"unsupported emission {statement[token.start:].strip()!r}: a table "
                               "without a WINDOW supports EMIT CHANGES only")
            return statement[:token.start]
    return statement.rstrip().rstrip(";")


def _source(select: exp.Select, streams: Mapping[str, Any]):
    origin = select.args.get("from_") or select.args.get("from")
    if origin is None or not isinstance(origin.this, exp.Table):
        raise SqlError(f"FROM must name one registered stream: {_snippet(origin)}")
    name = origin.this.name.lower()
    stream = streams.get(name) or _streams.get(name)
    if stream is None:
        known = sorted(set(streams) | set(_streams))
        raise SqlError(f"FROM {origin.this.name}: no such stream; registered: {known}")
    return stream


def _group_keys(select: exp.Select) -> tuple[str, ...]:
    group = select.args.get("group")
    if group is None:
        raise SqlError("a state table needs GROUP BY (one or more columns)")
    keys = []
    for item in group.expressions:
        if not isinstance(item, exp.Column):
            raise SqlError(f"GROUP BY supports plain columns, not {_snippet(item)}")
        keys.append(item.name)
    return tuple(keys)


def _select_list(select: exp.Select, keys: tuple[str, ...]):
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
    if type(node) in _AGGREGATES:
        return _AGGREGATES[type(node)](_argument(node))
    if isinstance(node, exp.Anonymous) and node.name.upper() in _NAMED_AGGREGATES:
        return _NAMED_AGGREGATES[node.name.upper()](_argument(node))
    raise SqlError(f"unsupported in the SELECT list: {_snippet(node)} (use COUNT, SUM, MIN, MAX, "
                   "AVG, LATEST_BY_OFFSET or COLLECT_LIST)")


def _argument(node: exp.Expression) -> str | None:
    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this]
    if len(args) != 1:
        raise SqlError(f"{_snippet(node)} takes exactly one column")
    arg = args[0]
    if isinstance(arg, exp.Star):
        if not isinstance(node, exp.Count):
            raise SqlError(f"only COUNT takes *: {_snippet(node)}")
        return None
    if not isinstance(arg, exp.Column):
        raise SqlError(f"aggregates take a plain column, not {_snippet(arg)}")
    return arg.name


def _where_column(node: exp.Expression) -> str:
    """WHERE sees the input's columns; it runs before aggregation."""
    if isinstance(node, exp.Column):
        return node.name
    raise SqlError(f"aggregates belong in HAVING, not WHERE: {_snippet(node)}")


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
                       f"{_snippet(node)} is not among them")
    return resolve


def _predicate(node: exp.Expression, resolve: Callable[[Any], str]) -> Callable[[pd.DataFrame], Any]:
    """A function of a frame computing ``node`` with pandas (for WHERE and HAVING)."""
    if isinstance(node, exp.Paren):
        return _predicate(node.this, resolve)
    if isinstance(node, exp.Column) or type(node) in _AGGREGATES or isinstance(node, exp.Anonymous):
        name = resolve(node)
        return lambda frame: frame[name]
    if isinstance(node, exp.Literal):
        value = node.this if node.is_string else _number(node.this)
        return lambda frame: value
    if isinstance(node, exp.Boolean):
        value = node.this
        return lambda frame: value
    if isinstance(node, exp.Null):
        return lambda frame: None
    if isinstance(node, exp.Not):
        inner = _predicate(node.this, resolve)
        return lambda frame: ~pd.Series(inner(frame), index=frame.index).astype(bool)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = _predicate(node.this, resolve), _predicate(node.expression, resolve)
        combine = operator.and_ if isinstance(node, exp.And) else operator.or_
        return lambda frame: combine(pd.Series(left(frame), index=frame.index).astype(bool),
                                     pd.Series(right(frame), index=frame.index).astype(bool))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = _predicate(node.this, resolve)
        return lambda frame: pd.Series(inner(frame), index=frame.index).isna()
    if isinstance(node, exp.In):
        inner = _predicate(node.this, resolve)
        options = [_predicate(option, resolve)(pd.DataFrame()) for option in node.expressions]
        return lambda frame: pd.Series(inner(frame), index=frame.index).isin(options)
    if type(node) in _COMPARISONS:
        left, right = _predicate(node.this, resolve), _predicate(node.expression, resolve)
        apply = _COMPARISONS[type(node)]
        return lambda frame: apply(left(frame), right(frame))
    if isinstance(node, exp.Neg):
        inner = _predicate(node.this, resolve)
        return lambda frame: -inner(frame)
    raise SqlError(f"unsupported expression: {_snippet(node)}")


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def _snippet(node: Any) -> str:
    text = node.sql() if isinstance(node, exp.Expression) else str(node)
    return repr(text if len(text) <= 80 else text[:77] + "...")
