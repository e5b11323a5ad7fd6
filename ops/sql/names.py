"""Names in a statement: columns resolved as ksqlDB resolves them, and errors that point at the
user's text.

Unquoted identifiers are case-insensitive (``title`` reads a column ``TITLE``); quoted ones
(``"Title"``) must match exactly. A column the source does not have is refused when the
statement is compiled, naming the column, the source and the columns it has.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import SqlError


def located(text: str, node: exp.Expression | None, clause: str, message: str) -> SqlError:
    """An error for ``clause`` of the statement ``text`` that shows where ``node`` is in it.

    >>> import sqlglot
    >>> text = "SELECT a FROM s WHERE b > 1"
    >>> print(located(text, sqlglot.parse_one(text).find(exp.GT), "WHERE", "no column b"))
    WHERE: no column b (line 1, column 23)
      SELECT a FROM s WHERE b > 1
                            ^
    """
    start = _start(node) if node is not None else None
    if start is None:
        return SqlError(f"{clause}: {message}")
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start:line_end if line_end >= 0 else len(text)]
    number = text.count("\n", 0, start) + 1
    column = start - line_start + 1
    return SqlError(f"{clause}: {message} (line {number}, column {column})\n  {line}\n"
                    f"  {' ' * (column - 1)}^")


def _start(node: exp.Expression) -> int | None:
    """Where the earliest token of ``node`` starts in the text (sqlglot keeps positions on
    identifiers and function names)."""
    starts = [part.meta["start"] for part in node.walk() if "start" in part.meta]
    return min(starts) if starts else None


def snippet(node: exp.Expr) -> str:
    """A short quote of ``node``'s SQL for an error message."""
    text = node.sql()
    return repr(text if len(text) <= 80 else text[:77] + "...")


@dataclass(frozen=True)
class Columns:
    """The columns a source has (``names=None``: not known before it runs, so not checked)."""

    source: str
    names: tuple[str, ...] | None

    def resolve(self, identifier: exp.Identifier, text: str, clause: str) -> str:
        """The source's column ``identifier`` names (see the module docstring for the rules).

        >>> columns = Columns("sales", ("TITLE", "price"))
        >>> columns.resolve(exp.to_identifier("title"), "", "SELECT")
        'TITLE'
        """
        name = identifier.name
        if self.names is None:
            return name
        if name in self.names:
            return name
        matches = [] if identifier.quoted else [c for c in self.names if c.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise located(text, identifier, clause,
                          f"{name} matches several columns of {self.source} ({matches}); "
                          "quote it to choose one")
        raise located(text, identifier, clause,
                      f"unknown column {name} in {self.source}; its columns: {list(self.names)}")

    def find(self, name: str) -> str | None:
        """The column an unquoted ``name`` reads, or ``None``."""
        if self.names is None:
            return None
        if name in self.names:
            return name
        matches = [c for c in self.names if c.lower() == name.lower()]
        return matches[0] if len(matches) == 1 else None
