"""What a statement reads: ``FROM`` a stream, a TABLE of updates or a table an earlier
statement made, or two of them joined (``JOIN … ON``), as one stream of rows with the columns
its expressions may name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from ..columns import BATCH_COLUMN, ROW_COLUMN
from ..errors import PipelineDefinitionError, SqlError
from ..operators import JoinSide
from ..operators.basic import Filter
from ..operators.event_time import END, START
from ..operators.joins import KeyColumn
from ..operators.windows import WindowAggregate
from ..pipeline import Pipeline, Stream
from ..readers import read as sp_read
from ..sinks import DeltaSink, TableSink
from .catalog import Catalog, TableEntry
from .clauses import within_of
from .engine import Expressions
from .names import Columns, Scope, Side, snippet
from .statement import Statement

_UNSUPPORTED_CLAUSES = {"order": "ORDER BY", "limit": "LIMIT",
                        "offset": "OFFSET", "distinct": "DISTINCT", "qualify": "QUALIFY",
                        "with": "WITH", "with_": "WITH", "windows": "WINDOW",
                        "laterals": "LATERAL"}


# the join kinds each join takes, by sqlglot's side or kind of the JOIN
_STREAM_TABLE_JOINS = {"": "inner", "INNER": "inner", "LEFT": "left"}
_TWO_SIDED_JOINS = {**_STREAM_TABLE_JOINS, "FULL": "outer"}
#: ksqlDB runs ``a RIGHT JOIN b`` (streams) as ``b LEFT JOIN a``
_STREAM_STREAM_JOINS = {**_TWO_SIDED_JOINS, "RIGHT": "right"}


@dataclass(frozen=True)
class Input:
    """What ``FROM`` reads: its rows as a stream, their event time, their columns (one source,
    or two joined), and whether they are a table's changes (an aggregation takes rows back;
    ``joined``: the changes of a table–table join, keyed by the join key). ``kinds``: the
    declared types of the columns whose type is known, whatever a batch's values are."""

    stream: Stream
    timestamp: str | None
    columns: Scope
    table: bool = False
    joined: tuple[str, ...] = ()
    kinds: Mapping[str, str] = field(default_factory=dict)
    #: a column whose largest value stream time surely reached (see EventTimeAggregate.progress)
    progress: str | None = None


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

    @property
    def is_table(self) -> bool:
        """A table: one an earlier statement made, or a stream of updates (``primary_key``)."""
        return self.table is not None or bool(self.primary_key)

    def kinds(self) -> dict[str, str]:
        """The declared types of its columns, where known."""
        if self.table is not None:
            return dict(self.table.kinds)
        assert self.stream is not None
        return self.stream.source.kinds() if columns_kept(self.stream) else {}


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
    if parsed.within is not None and (left.is_table or right.is_table):
        raise parsed.error(join, "JOIN", "WITHIN bounds a stream–stream join; a join with a "
                           "table has none")
    if left.is_table and right.is_table:
        return _table_table_join(parsed, left, right, join, warehouse)
    if left.is_table:
        raise parsed.error(join, "JOIN", f"{left.name} is a table and {right.name} a stream: a "
                           "stream–table join reads the stream FROM and JOINs the table")
    if right.table is not None:
        return _stream_table_join(parsed, left, right, join, warehouse)
    if right.primary_key:
        return _stream_kept_table_join(parsed, left, right, join)
    return _stream_stream_join(parsed, left, right, join)


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
        return Input(named.stream, named.timestamp, named.scope(), kinds=named.kinds())
    columns = named.columns()
    key = [columns.find(column) or column for column in named.primary_key]
    rows = named.stream.as_table(*key, name=f"{named.name}_rows")
    return Input(rows.changes_as_rows(name=f"{named.name}_changes", kinds=named.kinds()),
                 named.timestamp, named.scope(), table=True, kinds=named.kinds())


def _changelog(entry: TableEntry, warehouse: str | None) -> Stream:
    sink = entry.pipeline.sink(entry.table)
    assert isinstance(sink, TableSink)  # the catalog registers state tables only
    return sp_read.from_delta(sink.changelog(entry.pipeline.layout(warehouse)),
                              name=entry.table, order_by=(BATCH_COLUMN, ROW_COLUMN))


def written_stream(pipeline: Pipeline, sink: str, kinds: Mapping[str, str],
                   warehouse: str | None) -> Stream:
    """The rows ``pipeline`` writes to its Delta sink ``sink`` under ``warehouse``, as a stream
    in the order they were written (columns of declared ``kinds``), for a later statement to
    read ``FROM`` it."""
    written = pipeline.sink(sink)
    assert isinstance(written, DeltaSink)  # a CREATE STREAM writes one
    location = written.location(pipeline.layout(warehouse))
    return sp_read.from_delta(location, name=sink, order_by=(BATCH_COLUMN, ROW_COLUMN),
                              schema=kinds)


def _table_source(parsed: Statement, named: _Named, warehouse: str | None) -> Input:
    """A table an earlier statement created, read from its changelog: as a table (its rows'
    changes) or, by a WINDOW, as the stream of its final windows."""
    entry = named.table
    assert entry is not None
    changelog = _changelog(entry, warehouse)
    if parsed.window is None:
        return Input(changelog.changes_as_rows(name=f"{entry.table}_changes",
                                               kinds=named.kinds()), None,
                     named.scope(), table=True, kinds=named.kinds())
    if not entry.final:
        raise SqlError(f"WINDOW over table {entry.table}: its rows change as it updates; a "
                       "window reads each row once, so window a stream, or make "
                       f"{entry.table} a windowed table with EMIT FINAL")
    return Input(changelog, START if START in entry.columns else None, named.scope(),
                 kinds=named.kinds(), progress=END if _tumbling(entry.pipeline) else None)


def _tumbling(pipeline: Pipeline) -> bool:
    """Whether ``pipeline`` aggregates tumbling windows: each of its final rows says the
    stream time its window's end (plus grace) was reached, and later rows start after it."""
    return any(isinstance(op, WindowAggregate) and op.window.advance == op.window.size
               for op in pipeline.stream.operators)


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
    how = _how(parsed, join, _STREAM_TABLE_JOINS, "a stream–table join is JOIN or LEFT JOIN")
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
    return Input(joined, left.timestamp, scope, kinds=_joined_kinds(left, right, renamed))


def _stream_kept_table_join(parsed: Statement, left: _Named, right: _Named,
                            join: exp.Join) -> Input:
    """``stream [LEFT] JOIN t ON stream.col = t.key`` over a TABLE of updates (``primary_key``,
    or ``as_table``): ksqlDB's most common join. One pipeline reads both, keeps the table in
    its state (see :class:`KeptTableJoin`) and enriches each event with its key's row as the
    updates before it left it."""
    assert left.stream is not None
    how = _how(parsed, join, _STREAM_TABLE_JOINS, "a stream–table join is JOIN or LEFT JOIN")
    stream_column, table_column = _join_columns(parsed, join, left, right)
    table = _updates(right, None)
    if table.keys != (table_column,):
        raise parsed.error(join.args["on"], "JOIN", f"a stream–table join is ON the table's key "
                           f"{list(table.keys)}, not {table_column}")
    if left.stream.operators:
        raise parsed.error(join, "JOIN", f"{left.name} is a stream with operators; a join with "
                           f"a TABLE of updates reads the stream as it is registered")
    stream_columns = left.columns().names or ()
    events = _merged(join, left.stream, table.updates)
    if stream_column != table_column:
        if table_column in stream_columns:
            raise parsed.error(join.args["on"], "JOIN", f"the stream has a column {table_column} "
                               "other than the join key; rename it in a CREATE STREAM first")
        # the key in one column: the table's for its updates, the stream's column for events
        events = events.map(KeyColumn(left.stream.source.name, stream_column, table_column),
                            name=f"{table.source}_key")
    renamed = tuple((c, f"{c}_table") for c in table.values if c in stream_columns)
    times = None
    if left.timestamp and right.timestamp:  # both have event times: rows are joined in their order
        times = (left.columns().find(left.timestamp) or left.timestamp,
                 right.columns().find(right.timestamp) or right.timestamp)
    joined = events.join_kept_table(table_column, (table.source, table.values), how,
                                    renamed=dict(renamed), times=times,
                                    kinds=table.kinds, name=f"join_{table.source}")
    scope = Scope((*left.scope().sides, *right.scope(renamed).sides))
    return Input(joined, left.timestamp, scope, kinds=_joined_kinds(left, right, renamed))


def _stream_stream_join(parsed: Statement, left: _Named, right: _Named, join: exp.Join) -> Input:
    """``a [LEFT|RIGHT|FULL OUTER] JOIN b WITHIN … ON a.k = b.k``: records of the two streams
    with the same key and close event times (see :class:`StreamStreamJoin`). The key is
    emitted under the left stream's name for it; a right column the left also has gets the
    right stream's name as a suffix. ``a RIGHT JOIN b`` is ``b LEFT JOIN a``, as in ksqlDB."""
    how = _how(parsed, join, _STREAM_STREAM_JOINS,
               "a stream–stream join is JOIN, LEFT JOIN, RIGHT JOIN or FULL OUTER JOIN")
    if parsed.within is None:
        raise parsed.error(join, "JOIN", "a stream–stream join needs a time bound: JOIN "
                           f"{right.name} WITHIN 1 HOUR ON … (or WITHIN (before, after))")
    within = within_of(parsed.within)
    if how == "right":  # b within (before, after) of a is a within (after, before) of b
        how, left, right = "left", right, left
        within = dataclasses.replace(within, before=within.after, after=within.before)
    on, right_key = _join_columns(parsed, join, left, right)
    columns, times, timed = [], [], []
    for side in (left, right):
        names = _reader_columns(side, "a stream–stream join keeps both streams' records")
        side, time = _timed(side)
        columns.append(names)
        times.append(side.columns().find(time) or time)
        timed.append(side)
    left, right = timed
    assert left.stream is not None and right.stream is not None
    events = _merged(join, left.stream, right.stream)
    if right_key != on:
        if on in columns[1]:
            raise parsed.error(join.args["on"], "JOIN", f"{right.name} has a column {on} other "
                               "than its join key; rename it in a CREATE STREAM first")
        events = events.map(KeyColumn(right.stream.source.name, right_key, on),
                            name=f"{right.stream.source.name}_key")
    suffix = (right.alias or right.name).lower()
    renamed = tuple((c, f"{c}_{suffix}") for c in columns[1] if c in columns[0] and c != on)
    shown = dict(renamed)
    sides = (JoinSide(left.stream.source.name, tuple((c, c) for c in columns[0] if c != on), times[0]),
             JoinSide(right.stream.source.name,
                      tuple((c, shown.get(c, c)) for c in columns[1] if c != on), times[1]))
    kinds = _joined_kinds(left, right, renamed)
    try:
        joined = events.join_within(on, *sides, before=within.before, after=within.after,
                                    grace=within.grace, how=how, kinds=kinds,
                                    name=f"join_{sides[0].source}_{sides[1].source}")
    except PipelineDefinitionError as exc:  # a bound pandas cannot hold, say
        raise SqlError(f"WITHIN {' '.join(t.text for t in parsed.within)}: {exc}") from None
    scope = Scope((*left.scope().sides, *right.scope(renamed).sides))
    # a ROWTIME is the join's event time, not one of its columns
    return Input(joined, times[0] if times[0] in columns[0] else None, scope, kinds=kinds)


def _timed(named: _Named) -> tuple[_Named, str]:
    """``named`` and its event-time column: its registered one, else its records' own
    (ksqlDB's ``ROWTIME``: a Kafka record's timestamp, a publish's or a file's time)."""
    if named.timestamp:
        return named, named.timestamp
    assert named.stream is not None
    source = named.stream.source
    found = source.with_rowtime()
    if found is None:
        raise SqlError(f"JOIN {named.name}: a stream–stream join needs each stream's event "
                       f"time, and {source.name}'s records have none of their own (no ROWTIME): "
                       f"sp.register({named.name!r}, …, timestamp='ts')")
    timed, column = found
    return dataclasses.replace(named, stream=dataclasses.replace(named.stream, source=timed),
                               timestamp=column), column


def _joined_kinds(left: _Named, right: _Named,
                  renamed: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The declared types of a stream–table join's columns: the stream's, then the table's
    (under the names they are emitted as)."""
    names = dict(renamed)
    return {**left.kinds(), **{names.get(c, c): kind for c, kind in right.kinds().items()
                               if names.get(c, c) not in left.kinds()}}


@dataclass(frozen=True)
class _Updates:
    """A table as a stream of its rows' updates, from a reader (merged with another's before
    any operator): its source's name, key, value columns and their declared types."""

    updates: Stream
    source: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    kinds: dict[str, str]


def _updates(named: _Named, warehouse: str | None) -> _Updates:
    """``named`` (a table an earlier statement made, or a TABLE of updates) as its updates:
    the changelog of the first, the registered stream of the second."""
    if named.table is not None:
        entry = named.table
        return _Updates(_changelog(entry, warehouse), entry.table, entry.keys,
                        tuple(c for c in entry.columns if c not in entry.keys), named.kinds())
    assert named.stream is not None
    names = _reader_columns(named, "a join keeps the table from its updates")
    columns = named.columns()
    keys = tuple(columns.find(column) or column for column in named.primary_key)
    return _Updates(named.stream, named.stream.source.name, keys,
                    tuple(c for c in names if c not in keys), named.kinds())


def _reader_columns(named: _Named, why: str) -> tuple[str, ...]:
    """The columns of a stream a join reads merged with another, which must be a reader (no
    operator yet) with a declared schema."""
    names = named.columns().names
    if names is None or named.stream is None or named.stream.operators:
        raise SqlError(f"JOIN {named.name}: {why}, so the stream registered as {named.name} "
                       "must be a reader with a declared schema (schema={...}) and no operators")
    return names


def _merged(join: exp.Join, first: Stream, second: Stream) -> Stream:
    """One stream of both sides' rows, for a join that keeps state of both."""
    try:
        return first.merge(second)
    except PipelineDefinitionError as exc:
        raise SqlError(f"JOIN {snippet(join)}: {exc}") from None


def _how(parsed: Statement, join: exp.Join, kinds: Mapping[str, str], expected: str) -> str:
    how = kinds.get(join.side or join.kind or "")
    if how is None:
        raise parsed.error(join, "JOIN", f"{expected}, not {join.side or join.kind} JOIN")
    return how


def _table_table_join(parsed: Statement, left: _Named, right: _Named, join: exp.Join,
                      warehouse: str | None) -> Input:
    """``table [LEFT|FULL OUTER] JOIN table ON a.key = b.key``: a table of the two, changed
    whenever either side changes (see :class:`TableTableJoin`). Each side is a table an
    earlier statement made (read from its changelog) or a TABLE of updates."""
    how = _how(parsed, join, _TWO_SIDED_JOINS,
               "a table–table join is JOIN, LEFT JOIN or FULL OUTER JOIN")
    left_key, right_key = _join_columns(parsed, join, left, right)
    if parsed.window is not None:
        raise SqlError("WINDOW: a table–table join has no window")
    sides = (_updates(left, warehouse), _updates(right, warehouse))
    if sides[0].keys != (left_key,) or sides[1].keys != (right_key,):
        raise parsed.error(join.args["on"], "JOIN", "a table–table join is ON both tables' keys "
                           f"({list(sides[0].keys)}, {list(sides[1].keys)})")
    if left_key != right_key:
        raise parsed.error(join.args["on"], "JOIN", f"the keys are named {left_key} and "
                           f"{right_key}: name them alike (as in the statements that made them)")
    clash = sorted(set(sides[0].values) & set(sides[1].values))
    if clash:
        raise parsed.error(join, "JOIN", f"both tables have columns {clash}; name them apart in "
                           "the statements that made them")
    kinds = {**sides[1].kinds, **sides[0].kinds}
    merged = _merged(join, sides[0].updates, sides[1].updates)
    joined = merged.join_tables(on=left_key, left=(sides[0].source, sides[0].values),
                                right=(sides[1].source, sides[1].values), how=how,
                                name=f"join_{sides[0].source}_{sides[1].source}", kinds=kinds)
    scope = Scope((*left.scope().sides, *right.scope().sides))
    return Input(joined, None, scope, table=True, joined=(left_key,), kinds=kinds)


def _first(value: Any) -> exp.Expression:
    return value[0] if isinstance(value, list) else value


def columns_kept(stream: Stream) -> bool:
    """Whether the stream's rows still have its source's columns (no operator, or filters)."""
    return all(isinstance(op, Filter) for op in stream.operators)
