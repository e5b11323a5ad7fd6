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


@dataclass(frozen=True)
class Side:
    """One source of a query: its columns, the names that qualify them (``orders``, ``o``),
    and the columns a join renamed in the rows (a table column clashing with the stream's)."""

    columns: Columns
    qualifiers: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...] = ()

    def output(self, name: str) -> str:
        """What the column ``name`` is called in the query's rows."""
        return dict(self.renamed).get(name, name)


@dataclass(frozen=True)
class Scope:
    """The sources a query reads (one, or two joined) and how its column references resolve:
    ``o.title`` in the side qualified ``o``; ``title`` in whichever side has it (the join key
    may be in both), refused as ambiguous otherwise.

    >>> scope = Scope.of("orders", ("ID", "TITLE"))
    >>> scope.resolve(exp.column("title", table="orders"), "", "SELECT")
    'TITLE'
    """

    sides: tuple[Side, ...]

    @classmethod
    def of(cls, source: str, names: tuple[str, ...] | None, alias: str | None = None) -> Scope:
        return cls((Side(Columns(source, names), _qualifiers(source, alias)),))

    @property
    def source(self) -> str:
        return " JOIN ".join(side.columns.source for side in self.sides)

    @property
    def names(self) -> tuple[str, ...] | None:
        """The columns of the query's rows, when every side's are known."""
        if any(side.columns.names is None for side in self.sides):
            return None
        return _output_columns(self.sides)

    def star(self, qualifier: str, text: str, node: exp.Expression, clause: str) -> tuple[str, ...]:
        """The row columns ``*`` stands for (``qualifier`` empty) or ``<qualifier>.*``: every
        column of the query's rows, or of the side so qualified.

        >>> Scope.of("orders", ("ID", "TITLE"), alias="o").star("o", "", exp.Star(), "SELECT")
        ('ID', 'TITLE')
        """
        sides = self.sides
        if qualifier:
            sides = tuple(s for s in self.sides if qualifier.lower() in s.qualifiers)
            if not sides:
                raise located(text, node, clause, f"no source {qualifier} in this query "
                              f"(it reads {self.source})")
        if any(side.columns.names is None for side in sides):
            raise located(text, node, clause, f"{qualifier + '.' if qualifier else ''}* needs "
                          f"the columns of {self.source} to be known (declare its schema)")
        return _output_columns(sides)

    def find(self, name: str) -> str | None:
        """The row column an unqualified, unquoted ``name`` reads, if exactly one does."""
        found = {side.output(hit) for side in self.sides
                 if (hit := side.columns.find(name)) is not None}
        return found.pop() if len(found) == 1 else None

    def resolve(self, column: exp.Column, text: str, clause: str) -> str:
        """The row column ``column`` reads (see the class docstring)."""
        identifier = column.this
        if column.table:
            side = next((s for s in self.sides if column.table.lower() in s.qualifiers), None)
            if side is None:
                raise located(text, identifier, clause, f"no source {column.table} in this query "
                              f"(it reads {self.source})")
            return side.output(side.columns.resolve(identifier, text, clause))
        if len(self.sides) == 1:
            side = self.sides[0]
            return side.output(side.columns.resolve(identifier, text, clause))
        hits = {side.output(side.columns.resolve(identifier, text, clause)) for side in self.sides
                if side.columns.names is None or _has(side.columns, identifier)}
        if len(hits) == 1:
            return hits.pop()
        if hits:
            raise located(text, identifier, clause, f"{identifier.name} is in more than one "
                          f"source ({self.source}); qualify it")
        raise located(text, identifier, clause, f"unknown column {identifier.name} in "
                      f"{self.source}; columns: " + "; ".join(
                          f"{side.columns.source} {list(side.columns.names or [])}"
                          for side in self.sides))


def _output_columns(sides: tuple[Side, ...]) -> tuple[str, ...]:
    """The columns of ``sides`` as the query's rows name them, each once, in order."""
    return tuple(dict.fromkeys(side.output(name) for side in sides
                               for name in side.columns.names or ()))


def _qualifiers(source: str, alias: str | None) -> tuple[str, ...]:
    return tuple(name.lower() for name in (source, alias) if name)


def _has(columns: Columns, identifier: exp.Identifier) -> bool:
    names = columns.names or ()
    if identifier.quoted:
        return identifier.name in names
    return columns.find(identifier.name) is not None
