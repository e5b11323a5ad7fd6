"""The streams and tables SQL statements can read ``FROM``: a catalog object, so several can
coexist."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import SqlError
from ..operators import LatestByKey
from ..pipeline import Pipeline, Stream
from ..sinks import TableSink


@dataclass(frozen=True)
class Entry:
    """A registered stream, its event-time column (for WINDOW clauses) and, for a stream of
    updates to a table, the table's ``primary_key``."""

    stream: Stream
    timestamp: str | None = None
    primary_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableEntry:
    """A state table made by ``CREATE TABLE … AS SELECT``: its pipeline, table name, key
    columns, all its columns, and whether each of its rows is written once (windows emitted
    ``FINAL``), so that its changelog is also a plain stream of rows."""

    pipeline: Pipeline
    table: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    final: bool = False
    #: the declared kinds (``long``, ``string``…) of the columns whose type the statement fixes
    kinds: tuple[tuple[str, str], ...] = ()


class Catalog:
    """Named streams for ``FROM``; names are case-insensitive, as in ksqlDB.

    ``sp.register``/``sp.sql`` use one default catalog; make your own to keep sets of names
    apart (two applications, or tests, in one process).

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("Clicks", sp.read.from_callback("clicks", key="user"))
    >>> catalog.names()
    ['clicks']
    >>> sp.Catalog().names()
    []
    """

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._tables: dict[str, TableEntry] = {}

    def register(self, name: str, stream: Stream, timestamp: str | None = None, *,
                 primary_key: str | tuple[str, ...] | None = None) -> None:
        """Make ``stream`` usable as ``FROM name``; ``timestamp`` names its event-time column.

        With ``primary_key``, or as ``stream.as_table(key)`` (the same thing said in Python), it
        is a TABLE (ksqlDB's ``CREATE TABLE … (… PRIMARY KEY)``): each record is the new row of
        its key, a record of nulls besides the key deletes it, an aggregation over it takes a
        row's old values back before adding its new ones, and a stream or another table joins
        it on its key.

        >>> import ops as sp
        >>> catalog = sp.Catalog()
        >>> users = sp.read.from_callback("users", schema={"id": "string", "name": "string"})
        >>> catalog.register("users", users.as_table("id"))
        >>> catalog.lookup("users").primary_key
        ('id',)
        """
        if not isinstance(stream, Stream):
            raise SqlError(f"register {name!r}: expected a stream such as sp.read.from_delta(...), "
                           f"got {type(stream).__name__}")
        key = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key or ())
        last = stream.operators[-1] if stream.operators else None
        if isinstance(last, LatestByKey):  # stream.as_table(key): a TABLE keyed by key
            if key and key != last.keys:
                raise SqlError(f"register {name!r}: primary_key={list(key)} but the stream is "
                               f"as_table{last.keys}; say the key once")
            key, stream = last.keys, dataclasses.replace(stream, operators=stream.operators[:-1])
        self._entries[name.lower()] = Entry(stream, timestamp, key)

    def lookup(self, name: str) -> Entry:
        """The stream registered as ``name``; the error lists the names there are."""
        entry = self._entries.get(name.lower())
        if entry is None:
            raise SqlError(f"FROM {name}: no such stream; registered: {self.names()}")
        return entry

    def register_table(self, name: str, pipeline: Pipeline, columns: tuple[str, ...],
                       final: bool = False, kinds: dict[str, str] | None = None) -> None:
        """Make the state table ``name`` of ``pipeline`` (with ``columns``, of declared
        ``kinds`` where known) readable by queries and by later statements; ``sp.sql``
        registers each table it creates."""
        sink = pipeline.sink(name)
        if not isinstance(sink, TableSink):
            raise SqlError(f"{pipeline.name}'s sink {name!r} is not a state table")
        self._tables[name.lower()] = TableEntry(pipeline, name, sink.keys, tuple(columns), final,
                                                tuple((kinds or {}).items()))

    def has_table(self, name: str) -> bool:
        return name.lower() in self._tables

    def tables(self) -> list[str]:
        """Every registered table's name, sorted."""
        return sorted(self._tables)

    def table(self, name: str) -> TableEntry:
        """The state table registered as ``name``; the error lists the tables there are."""
        entry = self._tables.get(name.lower())
        if entry is None:
            raise SqlError(f"FROM {name}: no such table; tables: {sorted(self._tables)}")
        return entry

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries
