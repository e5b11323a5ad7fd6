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
(:mod:`ops.sql.engine`); columns are resolved case-insensitively (:mod:`ops.sql.names`);
:mod:`ops.sql.statement` reads the text, :mod:`ops.sql.inputs` what ``FROM`` and ``JOIN``
name and :mod:`ops.sql.aggregate_calls` what each aggregate call computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlglot import exp

from ..errors import SqlError
from ..group_by import GroupedStream
from ..operators import TableProjection, aggregates
from ..operators.event_time import END, START, EventTimeAggregate
from ..pipeline import Pipeline, Stream
from ..sources.records import RecordSchema
from .aggregate_calls import Aggregates, aggregate, aggregates_in, is_aggregate
from .catalog import Catalog
from .clauses import window_of
from .engine import Expressions, known_function
from .inputs import Input, read_from, written_stream
from .names import Scope, snippet
from .statement import Statement, parse

_KIND_OF_DTYPE = {dtype: kind for kind, dtype in aggregates.NULLABLE_DTYPES.items()}
_WINDOW_BOUNDS = {"WINDOWSTART": START, "WINDOWEND": END}


def compile_statement(statement: str, catalog: Catalog, streams: Mapping[str, Stream] | None = None,
                      timestamp: str | None = None, warehouse: str | None = None,
                      emit_changes: str = "per_batch") -> Pipeline:
    """Compile a ``CREATE TABLE … AS SELECT …`` or ``CREATE STREAM … AS SELECT …`` statement to
    a pipeline named after what it creates. ``FROM`` names a stream in ``streams`` or, failing
    that, in ``catalog``; a table it creates is registered in ``catalog`` for pull queries, and
    what it creates, table or stream, for later statements to read (a stream from its Delta
    sink under ``warehouse``, with its event-time column when the SELECT keeps it).

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
    source = read_from(parsed, warehouse, local, catalog)
    if parsed.kind == "STREAM":
        if source.table:
            raise SqlError(f"FROM: {source.columns.source} is a table; CREATE STREAM reads a "
                           "stream (CREATE TABLE … AS SELECT aggregates a table)")
        pipeline, kinds, names = _stream_query(parsed, source)
        time = source.timestamp and next((n for n in names if n.lower() == source.timestamp.lower()),
                                         None)
        catalog.register(parsed.name, written_stream(pipeline, parsed.name, kinds, warehouse), time)
        return pipeline
    time = timestamp or source.timestamp
    time = time and (source.columns.find(time) or time)
    if source.joined and not parsed.select.args.get("group"):
        pipeline, columns, kinds = _joined_table_query(parsed, source)
    else:
        if source.joined:  # aggregate the joined table: its changes as rows to take back
            source = dataclasses.replace(source, stream=source.stream.changes_as_rows(
                name=f"{parsed.name}_changes", kinds=source.kinds))
        pipeline, columns, kinds = _table_query(parsed, source, time, emit_changes == "per_record")
    final = any(isinstance(op, EventTimeAggregate) and op.emit == "final"
                for op in pipeline.stream.operators)
    catalog.register_table(parsed.name, pipeline, columns, final, kinds)
    return pipeline


# -- CREATE STREAM -------------------------------------------------------------------------

def _stream_query(parsed: Statement,
                  source: Input) -> tuple[Pipeline, dict[str, str], tuple[str, ...]]:
    """The stream query's pipeline, its outputs' declared types and its outputs' names."""
    select, stream = parsed.select, source.stream
    for arg, clause in (("group", "GROUP BY"), ("having", "HAVING")):
        if select.args.get(arg):
            raise parsed.error(select.args[arg], clause, "a stream query has no " + clause +
                               "; use CREATE TABLE … AS SELECT for aggregations")
    if parsed.window is not None:
        raise SqlError("WINDOW: a stream query has no WINDOW; use CREATE TABLE … AS SELECT")
    if parsed.emit != "CHANGES":
        raise SqlError("EMIT FINAL: a stream query emits every row (EMIT CHANGES)")
    resolver = _Resolver(parsed, source.columns)
    stream = _where(parsed, stream, resolver, source.kinds)
    outputs = _items(parsed, resolver, star=True)
    for _, node in outputs:
        if aggregates_in(node):
            raise parsed.error(node, "SELECT", "aggregates need CREATE TABLE … GROUP BY: "
                               f"{snippet(node)}")
    projection = Expressions.of(outputs, source.kinds)
    pipeline = stream.map(projection.evaluate, name="select").write.to_delta(parsed.name)
    return (pipeline.named(parsed.name), _output_kinds(projection, source.kinds),
            tuple(name for name, _ in outputs))


# -- CREATE TABLE --------------------------------------------------------------------------

def _table_query(parsed: Statement, source: Input, time: str | None,
                 per_record: bool) -> tuple[Pipeline, tuple[str, ...], dict[str, str]]:
    """The pipeline of a CREATE TABLE, the columns of its table and their declared types."""
    select = parsed.select
    stream, columns = source.stream, source.columns
    group = select.args.get("group")
    if group is None:
        raise SqlError("GROUP BY: a state table needs GROUP BY (one or more columns or "
                       "expressions)")
    resolver = _Resolver(parsed, columns)
    stream = _where(parsed, stream, resolver, source.kinds)
    items = _items(parsed, resolver)
    groups = [resolver.expression(node, "GROUP BY") for node in group.expressions]
    keys = _key_names(items, groups)
    found, having_node = _aggregates_of(parsed, items, resolver, source.table)
    computed = [(key, node) for key, node in zip(keys, groups)
                if not (isinstance(node, exp.Column) and node.name == key)] + found.arguments
    declared = dict(source.kinds)
    if computed:
        pre = Expressions.of(computed, source.kinds)
        declared.update(_output_kinds(pre, source.kinds))
        stream = stream.map(pre.append_to, name="group_columns")
    aggs = {name: agg.typed(declared) for name, agg in found.aggs.items()}
    windowed = parsed.window is not None
    replace = _replacer(parsed, keys, groups, found.names, windowed)
    having_fn = None if having_node is None else \
        Expressions.of([("having", replace(having_node, "HAVING"))]).mask
    changes = _aggregated(parsed, stream.group_by(*keys), aggs, having_fn, time, per_record,
                          source.progress)
    table_keys = (*keys, START) if windowed else tuple(keys)
    outputs = [(name, replace(node, "SELECT")) for name, node in items if name not in table_keys]
    kinds = {**{key: declared[key] for key in keys if key in declared},
             **({START: "timestamp", END: "timestamp"} if windowed else {}),
             **{name: kind for name, agg in aggs.items() if (kind := _result_kind(agg, declared))}}
    # the aggregation's own columns are the table's when the SELECT list is the aggregates,
    # as they are, in order, and nothing else
    if [name for name, node in outputs if isinstance(node, exp.Column) and node.name == name] \
            != list(aggs) or len(outputs) != len(aggs):
        projection = Expressions.of(outputs, kinds)
        changes = changes.via(TableProjection(
            name=f"{parsed.name}_select", keys=table_keys, values=tuple(aggs),
            project=projection.evaluate))
        kinds = {**{key: kinds[key] for key in table_keys if key in kinds},
                 **_output_kinds(projection, kinds)}
    table_columns = (*table_keys, *((END,) if windowed else ()), *(name for name, _ in outputs))
    return changes.write.to_table(parsed.name).named(parsed.name), table_columns, kinds


def _aggregates_of(parsed: Statement, items: list[tuple[str, exp.Expression]],
                   resolver: _Resolver, table: bool) -> tuple[Aggregates, exp.Expression | None]:
    """The aggregates the SELECT list and HAVING compute, and HAVING resolved; over a TABLE
    (``table``), only those that can take a changed row back."""
    found = Aggregates()
    for name, node in items:
        _collect(parsed, node, found, resolver, name)
    having = parsed.select.args.get("having")
    having_node = resolver.expression(having.this, "HAVING", aliases=dict(items)) if having else None
    if having_node is not None:
        _collect(parsed, having_node, found, resolver, None)
    if not found.aggs:
        raise parsed.error(parsed.select, "SELECT", "the SELECT list needs at least one aggregate")
    for output, agg in found.aggs.items():
        if table and agg.kind not in aggregates.UNDOABLE:
            raise parsed.error(found.calls[output], "SELECT", f"{snippet(found.calls[output])} "
                               "cannot aggregate a TABLE: it cannot take a changed row back "
                               "(COUNT, SUM, AVG and COLLECT_LIST can, as in ksqlDB)")
    return found, having_node


def _aggregated(parsed: Statement, grouped: GroupedStream, aggs: dict[str, aggregates.Agg],
                having: Callable[[pd.DataFrame], Any] | None, time: str | None, per_record: bool,
                progress: str | None) -> Stream:
    """The grouped stream aggregated: by key, or by key and WINDOW on event time ``time``."""
    if parsed.window is None:
        if parsed.emit == "FINAL":
            raise SqlError("EMIT FINAL needs a WINDOW: a table without one emits changes only")
        return grouped.aggregate(aggs, having=having, name=f"{parsed.name}_aggregate",
                                 per_record=per_record)
    window = window_of(parsed.window, time or "")  # the clause's errors come first
    if time is None:
        raise SqlError("WINDOW needs an event-time column: sp.sql(..., timestamp='ts') or "
                       "sp.register(name, stream, timestamp='ts')")
    return grouped.window(window).aggregate(
        aggs, emit=parsed.emit.lower(), having=having, name=f"{parsed.name}_window",
        per_record=per_record and parsed.emit == "CHANGES", progress=progress)


def _joined_table_query(parsed: Statement,
                        source: Input) -> tuple[Pipeline, tuple[str, ...], dict[str, str]]:
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
        if aggregates_in(node):
            raise parsed.error(aggregates_in(node)[0], "SELECT", "aggregates need GROUP BY")
    keys = source.joined
    outputs = [(name, node) for name, node in items if name not in keys]
    values = tuple(c for c in source.columns.names or () if c not in keys)
    projection = Expressions.of(outputs, source.kinds)
    changes = source.stream.via(TableProjection(
        name=f"{parsed.name}_select", keys=keys, values=values, project=projection.evaluate))
    kinds = {**{key: source.kinds[key] for key in keys if key in source.kinds},
             **_output_kinds(projection, source.kinds)}
    return (changes.write.to_table(parsed.name).named(parsed.name),
            (*keys, *(name for name, _ in outputs)), kinds)


def _where(parsed: Statement, stream: Stream, resolver: _Resolver,
           kinds: Mapping[str, str]) -> Stream:
    where = parsed.select.args.get("where")
    if where is None:
        return stream
    if aggregates_in(where.this):
        raise parsed.error(aggregates_in(where.this)[0], "WHERE",
                           f"aggregates belong in HAVING, not WHERE: "
                           f"{snippet(aggregates_in(where.this)[0])}")
    condition = resolver.expression(where.this, "WHERE")
    return stream.filter(Expressions.of([("where", condition)], kinds).mask,
                         name="where")


def _items(parsed: Statement, resolver: _Resolver,
           star: bool = False) -> list[tuple[str, exp.Expression]]:
    """The SELECT list as (output name, resolved expression); ``star``: ``*`` stands for
    every column of the source (a stream query), else it is refused."""
    items: list[tuple[str, exp.Expression]] = []
    for position, item in enumerate(parsed.select.expressions):
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Star) or isinstance(node, exp.Column) and node.is_star:
            items += _star(parsed, node, resolver.scope, star)
            continue
        resolved = resolver.expression(node, "SELECT")
        items.append((alias or _default_name(resolved, position), resolved))
    _check_distinct(parsed, [name for name, _ in items])
    return items


def _star(parsed: Statement, item: exp.Expression, scope: Scope,
          allowed: bool) -> list[tuple[str, exp.Expression]]:
    """What ``*`` or ``<source>.*`` stands for: every column of the query's rows, or of the
    side the qualifier names, each under its own name."""
    if not allowed:
        raise parsed.error(item, "SELECT", "SELECT * is not supported in a table query; "
                           "name the group columns and the aggregates")
    qualifier = item.table if isinstance(item, exp.Column) else ""
    names = scope.star(qualifier, parsed.text, item, "SELECT")
    return [(name, exp.column(name, quoted=True)) for name in names]


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


def _collect(parsed: Statement, node: exp.Expression, found: Aggregates, resolver: _Resolver,
             name: str | None) -> None:
    """Add the aggregate calls in ``node`` to ``found``; ``name`` is the output name when the
    whole SELECT item is one aggregate."""
    for over in node.find_all(exp.Window):
        raise parsed.error(over, "SELECT", f"{snippet(over)}: OVER (…) is not supported; "
                           "aggregate with GROUP BY, and WINDOW TUMBLING, HOPPING or SESSION")
    for call in aggregates_in(node):
        text = call.sql()
        if text in found.names:
            continue
        for inner in aggregates_in(call)[1:]:
            raise parsed.error(inner, "SELECT", f"an aggregate inside an aggregate: {snippet(call)}")
        output = name if call is node and name is not None else f"_agg{len(found.names)}"
        found.aggs[output] = aggregate(parsed, call, found)
        found.names[text] = output
        found.calls[output] = call


def _empty(kinds: Mapping[str, str]) -> pd.DataFrame:
    """A frame with no rows and the columns ``kinds`` declares, of those types."""
    return RecordSchema(dict(kinds)).frame([], [])


def _result_kind(agg: aggregates.Agg, declared: Mapping[str, str]) -> str | None:
    """The declared type of an aggregate's results, where its kind and input fix it."""
    if agg.kind == "count":
        return "long"
    if agg.kind == "avg":
        return "double"
    return _KIND_OF_DTYPE.get(str(agg.typed(declared).dtype))


def _output_kinds(projection: Expressions, inputs: Mapping[str, str]) -> dict[str, str]:
    """The declared types of ``projection``'s outputs over inputs of types ``inputs``; none
    when it reads a column whose type is not known (its values will decide)."""
    if not inputs:
        return {}
    try:
        return projection.types(_empty(inputs))
    except SqlError:  # it reads a column of unknown type
        return {}


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
                # ksqlDB's WINDOWSTART/WINDOWEND are BIGINT epoch ms (the table keeps timestamps)
                return exp.Anonymous(this="epoch_ms", expressions=[exp.column(part.name, quoted=True)])
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
    if is_aggregate(node):
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
            if isinstance(part, exp.Anonymous) and not is_aggregate(part) \
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
