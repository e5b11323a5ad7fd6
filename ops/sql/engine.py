"""Evaluating SQL expressions over a batch: DuckDB runs them on the batch's pandas frame.

A statement's expressions (WHERE, the SELECT list, GROUP BY, aggregate arguments, HAVING) are
resolved to the frame's column names, rewritten where ksqlDB and DuckDB differ, and rendered
once, at ``sp.sql`` time, as one DuckDB query over a frame named ``batch``. Each batch then
costs one query (a few milliseconds) whatever the number of rows: no Python per row, and no
hand-written evaluator whose semantics drift from SQL's.

Where ksqlDB's rules differ from DuckDB's, the rewrite follows ksqlDB:

- ``/`` between integers is integer division truncated toward zero (Java's), between decimals
  or doubles the usual division; a division by zero is null;
- ``CONCAT`` skips null arguments (``CONCAT(NULL, 'a')`` is ``'a'``), as ksqlDB's does;
- ``REGEXP_EXTRACT(text, pattern, group)``'s third argument is the capture group, and a text
  the pattern does not match gives null (DuckDB's gives ``''``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from ..errors import SqlError

#: The name a batch's frame has in the queries.
BATCH = "batch"
_CONNECTIONS = threading.local()  # a DuckDB connection is not to be shared between threads


@dataclass(frozen=True)
class Expressions:
    """Named expressions over a frame, evaluated together by one DuckDB query.

    >>> import sqlglot
    >>> total = Expressions.of([("total", sqlglot.parse_one("x * 2 + 1"))])
    >>> total.evaluate(pd.DataFrame({"x": [1, 2]}))["total"].tolist()
    [3, 5]
    """

    names: tuple[str, ...]
    query: str
    #: declared kinds of input columns (``long``, ``double``…), applied before evaluating: a
    #: ``long`` column with a null arrives as pandas floats, and ``qty / 2`` must stay integral
    inputs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, named: Sequence[tuple[str, exp.Expression]],
           inputs: Mapping[str, str] | None = None) -> Expressions:
        """``named`` (output column, expression over the frame's columns) as one query, over
        input columns of the declared kinds ``inputs``."""
        items = ", ".join(f"{duckdb_sql(node)} AS {_quoted(name)}" for name, node in named)
        return cls(tuple(name for name, _ in named), f"SELECT {items} FROM {BATCH}",
                   tuple((inputs or {}).items()))

    def evaluate(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The expressions' values for every row of ``frame``, in its order and with its index,
        in nullable pandas types (``Int64``, ``Float64``, ``string``, ``boolean``)."""
        out = _pandas(self._run(frame))
        out.index = frame.index
        return out

    def append_to(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the expressions' columns added (or replaced, for a name it has)."""
        computed = self.evaluate(frame)
        return frame.assign(**{name: computed[name] for name in computed.columns})

    def mask(self, frame: pd.DataFrame) -> pd.Series:
        """A boolean Series: where the first expression is true (null counts as false)."""
        return self.evaluate(frame).iloc[:, 0].fillna(False).astype(bool)

    def types(self, empty: pd.DataFrame) -> dict[str, str]:
        """The result's declared kinds (``long``, ``double``, ``string``, ``boolean``,
        ``timestamp``) from a typed frame with no rows, so an output column's type comes from
        the input's schema and the expressions, never from a batch's values."""
        kinds = self._run(empty).schema.types
        return {name: kind for name, kind in zip(self.names, map(_declared, kinds)) if kind}

    def _run(self, frame: pd.DataFrame) -> pa.Table:
        typed = {name: _INPUT_DTYPES[kind] for name, kind in self.inputs
                 if name in frame.columns and kind in _INPUT_DTYPES
                 and frame[name].dtype != _INPUT_DTYPES[kind]}
        return _arrow(self.query, frame.astype(typed) if typed else frame)


def run_query(query: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of DuckDB ``query`` over ``frame`` (named ``batch`` in it), in nullable pandas
    types, with a fresh index."""
    return _pandas(_arrow(query, frame))


def _arrow(query: str, frame: pd.DataFrame) -> pa.Table:
    connection = _connection()
    connection.register(BATCH, frame)
    try:
        return connection.sql(query).to_arrow_table()
    except duckdb.Error as exc:  # a bad CAST, a function over the wrong type: say which
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SqlError(f"evaluating {query!r} failed: {first}") from None
    finally:
        connection.unregister(BATCH)


def _pandas(table: pa.Table) -> pd.DataFrame:
    out = table.to_pandas(types_mapper=_NULLABLE.get)
    for name, kind in zip(out.columns, table.schema.types):
        if pa.types.is_timestamp(kind):
            out[name] = out[name].astype("datetime64[ns, UTC]")
        elif pa.types.is_decimal(kind):  # a decimal's declared kind is double (see _declared)
            out[name] = out[name].astype("Float64")
    return out


def duckdb_sql(node: exp.Expression) -> str:
    """``node`` as DuckDB SQL, with ksqlDB's semantics where the two differ (module docstring)."""
    return node.copy().transform(_to_duckdb).sql(dialect="duckdb")


def _to_duckdb(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Div):
        # DuckDB's // is Java's /: integer division on integers, division on the rest
        return exp.IntDiv(this=node.this, expression=node.expression)
    if isinstance(node, exp.Concat):
        return exp.Anonymous(this="concat", expressions=node.expressions)
    if isinstance(node, exp.RegexpExtract):
        # ksqlDB's third argument is the capture group (the parser reads it as a position),
        # and no match is null where DuckDB gives ''
        text, pattern = node.this, node.expression
        group = node.args.get("position") or node.args.get("group")
        extract = exp.Anonymous(this="regexp_extract",
                                expressions=[text, pattern, *([group] if group else [])])
        matches = exp.Anonymous(this="regexp_matches", expressions=[text.copy(), pattern.copy()])
        return exp.Case(ifs=[exp.If(this=matches, true=extract)])
    return node


def known_function(name: str) -> bool:
    """Whether DuckDB has a function called ``name`` (checked when a statement is compiled,
    so a misspelt one is refused then, not at the first batch).

    >>> known_function("upper"), known_function("no_such_function")
    (True, False)
    """
    found = _connection().execute(
        "SELECT count(*) FROM duckdb_functions() WHERE lower(function_name) = lower(?)",
        [name]).fetchall()  # all of it: DuckDB refuses new work while a result is unread
    return bool(found[0][0])


def _connection() -> duckdb.DuckDBPyConnection:
    connection = getattr(_CONNECTIONS, "connection", None)
    if connection is None:
        connection = duckdb.connect()
        connection.execute("SET error_on_division_by_zero = false").fetchall()
        _CONNECTIONS.connection = connection
    return connection


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _declared(kind: pa.DataType) -> str | None:
    if pa.types.is_integer(kind):
        return "long"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "double"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    return None


_INPUT_DTYPES = {"long": "Int64", "double": "Float64", "string": "string", "boolean": "boolean"}
_NULLABLE = {pa.int8(): pd.Int64Dtype(), pa.int16(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(),
             pa.int64(): pd.Int64Dtype(), pa.float32(): pd.Float64Dtype(),
             pa.float64(): pd.Float64Dtype(), pa.string(): pd.StringDtype(),
             pa.large_string(): pd.StringDtype(), pa.bool_(): pd.BooleanDtype()}

