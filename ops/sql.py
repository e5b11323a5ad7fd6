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


def register(name: str, stream: Any, timestamp: str | None = None) -> None:
    """Make ``stream`` (``sp.read.from_delta(...)``, ``from_files``, ``from_callback``) usable as
    ``FROM name`` in ``sp.sql``; ``timestamp`` names its event-time column for WINDOW clauses."""
    _streams[name.lower()] = (stream, timestamp)


def sql(statement: str, streams: Mapping[str, Any] | None = None, timestamp: str | None = None):
    """Compile a ``CREATE TABLE … AS SELECT … [WINDOW …] GROUP BY …`` statement to a named
    pipeline whose sink is the state table (see :func:`register` for ``FROM``).

    ``WINDOW TUMBLING (SIZE 1 MINUTE[, GRACE PERIOD 30 SECONDS])``, ``WINDOW HOPPING (SIZE
    2 MINUTES, ADVANCE BY 1 MINUTE[, GRACE PERIOD …])`` and ``WINDOW SESSION (5 MINUTES[, GRACE
    PERIOD …])`` window on event-time column
    ``timestamp`` (given here or to :func:`register`); ``EMIT FINAL`` needs a window.
    """
    body, window_tokens, emit = _split_clauses(statement)
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
    stream, registered_time = _source(select, {k.lower(): v for k, v in (streams or {}).items()})
    keys = _group_keys(select)
    aggs, aliases = _select_list(select, keys)
    if select.args.get("where"):
        stream = stream.filter(_predicate(select.args["where"].this, _where_column), name="where")
    having = None
    if select.args.get("having"):
        having = _predicate(select.args["having"].this, _having_resolver(aliases, keys))
    grouped = stream.group_by(*keys)
    if window_tokens is None:
        if emit == "FINAL":
            raise SqlError("EMIT FINAL needs a WINDOW: a table without one emits changes only")
        changes = grouped.agg(having=having, name=f"{table}_aggregate", **aggs)
    else:
        if having is not None:
            raise SqlError("HAVING with a WINDOW is not supported")
        time = timestamp or registered_time
        window = _window(window_tokens, time or "")  # the clause's own errors come first
        if time is None:
            raise SqlError("WINDOW needs an event-time column: sp.sql(..., timestamp='ts') or "
                           "sp.register(name, stream, timestamp='ts')")
        changes = grouped.window(window).agg(
            emit=emit.lower(), name=f"{table}_window", **aggs)
    return changes.write.to_table(table).named(table)


_UNITS = {"MILLISECOND": "ms", "SECOND": "s", "MINUTE": "min", "HOUR": "h", "DAY": "D"}


def _split_clauses(statement: str) -> tuple[str, list | None, str]:
    """Cut ksqlDB's ``WINDOW …`` and ``EMIT …`` clauses (unknown to sqlglot) out of the
    statement by token position: the rest, the WINDOW clause's tokens, and the emission."""
    tokens = Tokenizer().tokenize(statement)
    end, window, emit, cut = len(statement), None, "CHANGES", None
    for index, token in enumerate(tokens):
        word = token.text.upper()
        if word == "EMIT":
            rest = [t.text.upper() for t in tokens[index + 1:] if t.text != ";"]
            if rest not in (["CHANGES"], ["FINAL"]):
                raise SqlError(f"unsupported emission {statement[token.start:].strip()!r}: "
                               "use EMIT CHANGES or EMIT FINAL")
            emit, end = rest[0], token.start
            break
        if word == "WINDOW" and window is None:
            close = next((i for i in range(index, len(tokens)) if tokens[i].text == ")"), None)
            if close is None:
                raise SqlError(f"unterminated WINDOW clause: {statement[token.start:][:60]!r}")
            window, cut = tokens[index + 1:close + 1], (token.start, tokens[close].end + 1)
    body = statement[:end] if cut is None else statement[:cut[0]] + statement[cut[1]:end]
    return body.rstrip().rstrip(";"), window, emit


def _window(tokens: list, time: str):
    """``TUMBLING (SIZE n unit[, GRACE PERIOD n unit])``, ``HOPPING (SIZE …, ADVANCE BY …
    [, GRACE PERIOD …])`` or ``SESSION (n unit[, GRACE PERIOD …])`` on column ``time``."""
    from .windows import hopping, session, tumbling

    kind = tokens[0].text.upper()
    if kind not in ("TUMBLING", "HOPPING", "SESSION") or len(tokens) < 3 or tokens[1].text != "(":
        raise SqlError(f"WINDOW must be TUMBLING (…), HOPPING (…) or SESSION (…), not {kind!r}")
    words = [t.text.upper() for t in tokens[2:-1] if t.text != ","]
    if kind == "SESSION":
        words.insert(0, "SIZE")  # SESSION (5 MINUTES …): the gap comes first, unnamed
    spans: dict[str, str] = {}
    position = 0
    while position < len(words):
        name = {"SIZE": "size", "ADVANCE": "advance", "GRACE": "grace"}.get(words[position])
        skip = 2 if words[position] in ("ADVANCE", "GRACE") else 1  # ADVANCE BY, GRACE PERIOD
        if name is None or position + skip + 1 >= len(words):
            raise SqlError(f"cannot read WINDOW {kind} (…) near {' '.join(words[position:])!r}")
        number, unit = words[position + skip], words[position + skip + 1].rstrip("S")
        if not number.isdigit() or unit not in _UNITS:
            raise SqlError(f"WINDOW {kind}: {number} {unit} is not a duration "
                           f"(units: {sorted(_UNITS)})")
        spans[name] = f"{number}{_UNITS[unit]}"
        position += skip + 2
    grace = spans.get("grace", "0s")
    if kind == "TUMBLING" and set(spans) <= {"size", "grace"} and "size" in spans:
        return tumbling(time, spans["size"], grace=grace)
    if kind == "HOPPING" and {"size", "advance"} <= set(spans):
        return hopping(time, spans["size"], spans["advance"], grace=grace)
    if kind == "SESSION" and set(spans) <= {"size", "grace"} and "size" in spans:
        return session(time, spans["size"], grace=grace)
    raise SqlError(f"WINDOW {kind} needs SIZE (and ADVANCE BY for HOPPING), got {sorted(spans)}")


def _source(select: exp.Select, streams: Mapping[str, Any]):
    origin = select.args.get("from_") or select.args.get("from")
    if origin is None or not isinstance(origin.this, exp.Table):
        raise SqlError(f"FROM must name one registered stream: {_snippet(origin)}")
    name = origin.this.name.lower()
    if name in streams:
        return streams[name], None
    if name in _streams:
        return _streams[name]
    known = sorted(set(streams) | set(_streams))
    raise SqlError(f"FROM {origin.this.name}: no such stream; registered: {known}")


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
