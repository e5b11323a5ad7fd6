"""Columns added to a table in a commit of their own, which changes no row: typed state's columns
(``k__<state>``, ``v__<state>``: docs/plans/typed-state.md) arrive in ``_state`` this way before
the first checkpoint that writes them, so that checkpoint stays one blind append.

Adding nullable columns is safe to repeat and to race: a commit that only widens the schema
leaves every row as it was (old files read the new columns as nulls), and a writer that finds
the columns there already has nothing to do.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake.exceptions import CommitFailedError
from deltalake.schema import Field, PrimitiveType

from .appends import ARROW_TYPES
from .cache import snapshots, synced
from .stores import calling, serves

_DELTA_TYPES = {arrow: delta for delta, arrow in ARROW_TYPES.items()}
_ATTEMPTS = 5  # racing writers: each attempt reads the schema the last one left


def add_columns(path: str, fields: list[pa.Field]) -> bool:
    """Make sure the table at ``path`` has nullable columns ``fields``: add those it lacks in one
    commit. ``False`` when delta-rs does not serve the path (Spark's ``ALTER TABLE … ADD
    COLUMNS`` is the caller's way then); ``ValueError`` naming the column when the table has
    one of the same name (Delta ignores case) of another type, or a field's type is not a
    plain Delta type; ``FileNotFoundError`` when there is no table."""
    if not serves(path):
        return False
    wanted = [(field.name, _delta_type(field)) for field in fields]
    for attempt in range(_ATTEMPTS):
        if _added(path, wanted, fresh=attempt > 0):
            return True
    raise RuntimeError(f"{path}: could not add columns {[n for n, _ in wanted]} in {_ATTEMPTS} "
                       "attempts: other writers kept changing the table")


def _added(path: str, wanted: list[tuple[str, str]], fresh: bool) -> bool:
    """One attempt: ``True`` once the table has the columns, ``False`` when another writer
    changed the table first (read it again). The first attempt brings the cached snapshot up to
    date (a checkpoint calls this each time, and usually finds the columns there); a retry,
    after losing a race, opens the table afresh."""
    with snapshots.lock_for(path):
        current = synced(path, fresh=fresh)
        if current is None:
            raise FileNotFoundError(f"{path}: no Delta table to add columns {[n for n, _ in wanted]} to")
        missing = _missing(path, current.schema().fields, wanted)
        if not missing:
            return True
        fields = [Field(name, PrimitiveType(kind), nullable=True) for name, kind in missing]
        try:
            calling(path, "adding columns", lambda: current.alter.add_columns(fields))
            return True
        except CommitFailedError:
            return False
        finally:
            snapshots.forget(path)


def _delta_type(field: pa.Field) -> str:
    if field.type not in _DELTA_TYPES:
        raise ValueError(f"column {field.name!r}: {field.type} is not a plain Delta type "
                         f"({sorted(ARROW_TYPES)})")
    return _DELTA_TYPES[field.type]


def _missing(path: str, present: list, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The wanted columns the table lacks; ``ValueError`` for one it has with another type."""
    types = {field.name.lower(): field.type for field in present}
    missing = []
    for name, kind in wanted:
        found = types.get(name.lower())
        if found is None:
            missing.append((name, kind))
        elif not isinstance(found, PrimitiveType) or found.type != kind:
            raise ValueError(f"{path}: column {name!r} exists with type {found}, not {kind}")
    return missing
