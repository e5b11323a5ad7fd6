"""A ksqlDB statement read: ``CREATE TABLE|STREAM <name> AS SELECT …`` parsed with sqlglot,
ksqlDB's own clauses (WINDOW, EMIT) set aside, and errors that point at the user's text."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Tokenizer

from ..errors import SqlError
from .clauses import split_clauses
from .names import located, snippet


@dataclass(frozen=True)
class Statement:
    """A parsed ``CREATE TABLE|STREAM <name> AS SELECT …``: ``text`` is the user's statement
    (positions in errors refer to it), ``window`` the WINDOW clause's tokens, ``within`` a
    join's WITHIN clause's."""

    text: str
    kind: str
    name: str
    select: exp.Select
    window: list | None
    emit: str
    within: list | None = None

    def error(self, node: exp.Expression | None, clause: str, message: str) -> SqlError:
        return located(self.text, node, clause, message)


def parse(statement: str) -> Statement:
    """The statement read with sqlglot, ksqlDB's own clauses set aside (see ``clauses``), and
    each aggregate's ``FILTER (WHERE …)`` made a condition on its argument."""
    body, clauses = split_clauses(statement)
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
                       f"SELECT …, got: {snippet(create)} (for a pull query use sp.query; to "
                       "declare a Kafka source, CREATE STREAM … WITH (KAFKA_TOPIC=…), sp.declare)")
    for prop in (create.args.get("properties") or exp.Properties()).expressions:
        if isinstance(prop, exp.PartitionedByProperty):
            raise located(statement, prop, "PARTITION BY", "unsupported: a table is keyed by its "
                          "GROUP BY, a stream keeps its source's key")
        raise located(statement, prop, "WITH", f"unsupported property {snippet(prop)}: the "
                      "result is the Delta table named after CREATE, under the warehouse")
    name = create.this.name if isinstance(create.this, exp.Table) else create.this.this.name
    select = create.expression.transform(lambda node: _filter_as_condition(statement, node))
    assert isinstance(select, exp.Select)  # a FILTER is rewritten inside it, never the root
    return Statement(statement, kind, name, select, clauses.window, clauses.emit or "CHANGES",
                     clauses.within)


#: The aggregates an ``agg(x) FILTER (WHERE c)`` rewrites to ``agg(CASE WHEN c THEN x END)``:
#: those that skip nulls, so the rows ``c`` leaves out count for nothing.
_FILTERABLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)


def _filter_as_condition(text: str, node: exp.Expression) -> exp.Expression:
    """``agg(x) FILTER (WHERE c)`` (SQL:2003, Flink, Spark) as ``agg(CASE WHEN c THEN x END)``
    (``COUNT(*)``'s ``x`` is ``1``; ``COUNT(DISTINCT x)``'s the distinct ``x``); any other
    node as it is."""
    if not isinstance(node, exp.Filter):
        return node
    call, where = node.this, node.expression
    if not isinstance(call, _FILTERABLE):
        raise located(text, node, "SELECT", f"{snippet(node)}: FILTER (WHERE …) applies to "
                      "COUNT, SUM, MIN, MAX or AVG")
    condition = where.this if isinstance(where, exp.Where) else where

    def kept(value: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=condition.copy(), true=value)])

    call = call.copy()
    argument = call.this
    if isinstance(argument, exp.Distinct):
        argument.set("expressions", [kept(e) for e in argument.expressions])
    elif argument is None or isinstance(argument, (exp.Star, exp.Literal)):
        call.set("this", kept(exp.Literal.number(1)))
    else:
        call.set("this", kept(argument))
    return call


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
