"""WHERE and HAVING: a syntax tree compiled to a function of a pandas frame. Nothing in a
statement is evaluated as Python or spliced into Spark SQL: each node maps to a pandas operation.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pandas as pd
from sqlglot import exp

from ..errors import SqlError
from ..operators import aggregates

AGGREGATES: dict[type[exp.Expression], Callable[[Any], aggregates.Agg]] = {
    exp.Count: aggregates.count, exp.Sum: aggregates.sum_, exp.Min: aggregates.min_,
    exp.Max: aggregates.max_, exp.Avg: aggregates.avg}
_COMPARISONS: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt, exp.GTE: operator.ge,
    exp.LT: operator.lt, exp.LTE: operator.le, exp.Add: operator.add, exp.Sub: operator.sub,
    exp.Mul: operator.mul, exp.Div: operator.truediv}


def predicate(node: exp.Expression, resolve: Callable[[Any], str]) -> Callable[[pd.DataFrame], Any]:
    """A function of a frame computing ``node`` with pandas (for WHERE and HAVING)."""
    if isinstance(node, exp.Paren):
        return predicate(node.this, resolve)
    if isinstance(node, exp.Column) or type(node) in AGGREGATES or isinstance(node, exp.Anonymous):
        name = resolve(node)
        return lambda frame: frame[name]
    if isinstance(node, exp.Literal):
        value = node.this if node.is_string else number(node.this)
        return lambda frame: value
    if isinstance(node, exp.Boolean):
        value = node.this
        return lambda frame: value
    if isinstance(node, exp.Null):
        return lambda frame: None
    if isinstance(node, exp.Not):
        inner = predicate(node.this, resolve)
        return lambda frame: ~pd.Series(inner(frame), index=frame.index).astype(bool)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = predicate(node.this, resolve), predicate(node.expression, resolve)
        combine = operator.and_ if isinstance(node, exp.And) else operator.or_
        return lambda frame: combine(pd.Series(left(frame), index=frame.index).astype(bool),
                                     pd.Series(right(frame), index=frame.index).astype(bool))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = predicate(node.this, resolve)
        return lambda frame: pd.Series(inner(frame), index=frame.index).isna()
    if isinstance(node, exp.In):
        inner = predicate(node.this, resolve)
        options = [predicate(option, resolve)(pd.DataFrame()) for option in node.expressions]
        return lambda frame: pd.Series(inner(frame), index=frame.index).isin(options)
    if type(node) in _COMPARISONS:
        left, right = predicate(node.this, resolve), predicate(node.expression, resolve)
        apply = _COMPARISONS[type(node)]
        return lambda frame: apply(left(frame), right(frame))
    if isinstance(node, exp.Neg):
        inner = predicate(node.this, resolve)
        return lambda frame: -inner(frame)
    raise SqlError(f"unsupported expression: {snippet(node)}")


def number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def snippet(node: Any) -> str:
    text = node.sql() if isinstance(node, exp.Expression) else str(node)
    return repr(text if len(text) <= 80 else text[:77] + "...")
