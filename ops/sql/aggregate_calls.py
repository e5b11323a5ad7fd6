"""A SQL aggregate call (``COUNT(DISTINCT x)``, ``MAX_BY(x, y)``, ``LATEST_BY_OFFSET(x)``…)
as the :class:`~ops.operators.aggregates.Agg` that computes it, and the columns its arguments
need computed first (:class:`Aggregates`, which :mod:`ops.sql.compile` fills statement by
statement).

>>> from ops.sql.statement import parse
>>> statement = parse("CREATE TABLE t AS SELECT k, MAX_BY(b, p + 1) AS top FROM s GROUP BY k")
>>> found = Aggregates()
>>> aggregate(statement, aggregates_in(statement.select.expressions[1])[0], found).spec
'max_by(b, _arg0)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from ..operators import aggregates
from .names import snippet
from .statement import Statement

_AGGREGATES: dict[type[exp.Expression], Callable[[str], aggregates.Agg]] = {
    exp.Sum: aggregates.sum_, exp.Min: aggregates.min_, exp.Max: aggregates.max_,
    exp.Avg: lambda column: aggregates.avg(column, empty=0.0)}  # ksqlDB's AVG of no values
NAMED_AGGREGATES = ("LATEST_BY_OFFSET", "COLLECT_LIST", "COLLECT_SET")


@dataclass
class Aggregates:
    """The aggregates a table query computes: output name -> :class:`Agg`, the SQL text of each
    call -> its output name, and the argument columns a map must compute first."""

    aggs: dict[str, aggregates.Agg] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    arguments: list[tuple[str, exp.Expression]] = field(default_factory=list)
    calls: dict[str, exp.Expression] = field(default_factory=dict)  # output name -> its call


def aggregate(parsed: Statement, call: exp.Expression, found: Aggregates) -> aggregates.Agg:
    """The :class:`Agg` for one aggregate call; an argument that is an expression becomes a
    column computed before the aggregation."""
    if isinstance(call.this, exp.Distinct):
        distinct = call.this.expressions
        if not isinstance(call, exp.Count) or len(distinct) != 1:
            raise parsed.error(call, "SELECT", f"{snippet(call)}: DISTINCT inside an aggregate "
                               "is supported in COUNT(DISTINCT column) only")
        return aggregates.count_distinct(argument(distinct[0], found))
    if isinstance(call, exp.Count):
        if call.expressions:
            raise parsed.error(call, "SELECT", f"{snippet(call)}: COUNT takes one argument, or "
                               "none (COUNT(), COUNT(*): rows)")
        arg = call.this
        if arg is None or isinstance(arg, (exp.Star, exp.Literal)):  # COUNT(), COUNT(*), COUNT(1)
            return aggregates.count()
        return aggregates.count(argument(arg, found))
    if isinstance(call, (exp.ArgMax, exp.ArgMin)):  # MAX_BY(x, y), MIN_BY(x, y)
        if call.this is None or call.expression is None:
            raise parsed.error(call, "SELECT", f"{snippet(call)}: takes a value and the column "
                               "that orders it")
        pick = aggregates.max_by if isinstance(call, exp.ArgMax) else aggregates.min_by
        return pick(argument(call.this, found), argument(call.expression, found))
    if type(call) in _AGGREGATES:
        if call.this is None or call.expressions:
            raise parsed.error(call, "SELECT", f"{snippet(call)}: "
                               f"{type(call).__name__.upper()} takes one argument")
        return _AGGREGATES[type(call)](argument(call.this, found))
    args = call.expressions
    kind = call.name.upper() if isinstance(call, exp.Anonymous) else ""
    if kind == "LATEST_BY_OFFSET" and len(args) in (1, 2):
        ignore_nulls = True
        if len(args) == 2:
            if not isinstance(args[1], exp.Boolean):
                raise parsed.error(args[1], "SELECT", "LATEST_BY_OFFSET's second argument is "
                                   "TRUE or FALSE (ignore nulls)")
            ignore_nulls = bool(args[1].this)
        return aggregates.latest_by_offset(argument(args[0], found), ignore_nulls=ignore_nulls)
    if kind == "COLLECT_LIST" and len(args) == 1:
        return aggregates.collect_list(argument(args[0], found))
    if kind == "COLLECT_SET" and len(args) == 1:
        return aggregates.collect_set(argument(args[0], found))
    if kind in NAMED_AGGREGATES:
        raise parsed.error(call, "SELECT", f"{snippet(call)}: wrong number of arguments")
    name = call.sql().split("(")[0].upper()
    raise parsed.error(call, "SELECT", f"unsupported aggregate {name}; use COUNT, SUM, MIN, MAX, "
                       "AVG, MAX_BY, MIN_BY, LATEST_BY_OFFSET, COLLECT_LIST or COLLECT_SET")


def argument(node: exp.Expression, found: Aggregates) -> str:
    """The column an aggregate reads: a plain column, or one computed before the aggregation."""
    if isinstance(node, exp.Column):
        return node.name
    name = f"_arg{len(found.arguments)}"
    found.arguments.append((name, node))
    return name


def aggregates_in(node: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls in ``node``, outermost first (``node`` itself when it is one)."""
    return [part for part in node.walk(bfs=True)
            if isinstance(part, exp.Expression) and is_aggregate(part)]


def is_aggregate(node: exp.Expr) -> bool:
    """Whether ``node`` is an aggregate call (one this module computes, or another SQL knows,
    refused by :func:`_aggregate` with the list of supported ones)."""
    return isinstance(node, exp.AggFunc) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in NAMED_AGGREGATES)
