"""The streams SQL statements can read ``FROM``: a catalog object, so several can coexist."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SqlError
from ..pipeline import Stream


@dataclass(frozen=True)
class Entry:
    """A registered stream and its event-time column (for WINDOW clauses), if any."""

    stream: Stream
    timestamp: str | None = None


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

    def register(self, name: str, stream: Stream, timestamp: str | None = None) -> None:
        """Make ``stream`` usable as ``FROM name``; ``timestamp`` names its event-time column."""
        if not isinstance(stream, Stream):
            raise SqlError(f"register {name!r}: expected a stream such as sp.read.from_delta(...), "
                           f"got {type(stream).__name__}")
        self._entries[name.lower()] = Entry(stream, timestamp)

    def lookup(self, name: str) -> Entry:
        """The stream registered as ``name``; the error lists the names there are."""
        entry = self._entries.get(name.lower())
        if entry is None:
            raise SqlError(f"FROM {name}: no such stream; registered: {self.names()}")
        return entry

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries
