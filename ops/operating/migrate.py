"""Migrating a pipeline's state to a changed pipeline: rename, drop, re-key, transform.

A run refuses a pipeline that would misread its checkpoint's state (:mod:`ops.runtime.meaning`);
a migration is how the user says what the change means. :func:`migrate` compares what the
latest checkpoint recorded with the changed pipeline, applies the edits asked for, and refuses
(writing nothing) unless, after them, every stored state is read as it was meant:

- ``rename={"old": "new"}``: an operator's state (its values, timers and TTL deadlines) or a
  tracked variable moves to the new name;
- ``drop=["name"]``: an operator's state, one of its state names, or a tracked variable, goes;
- ``rekey={"name": fn}``: each key becomes ``fn(old key)`` (keys must stay distinct); needed
  when the operator's key columns changed;
- ``transform={"name": fn}``: each value becomes ``fn(old value)`` and must encode with the
  operator's codec now; needed when its values' shape, class or meaning changed;
- with no edit asked, a state whose storage changed (``state_type=`` added or removed, or
  ``state_type="json"`` given for a state stored typed as inferred from ``state=``) is
  converted between JSON text and typed columns (:mod:`state.offline.conversion`).

``rekey`` and ``transform`` take the operator's name in the changed pipeline (or its old name).
The result is one new checkpoint in a new epoch (:func:`state.migrate_state`): older ones stay
readable and ``reset_to_checkpoint`` to the one before undoes the migration. Repeating a
migration that the latest checkpoint already made does nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from state import Checkpoint, CheckpointLog, MigrationError, StateType
from state.offline import Conversion, StateEdit, migrate_state

from ..pipeline import Pipeline
from ..runtime.meaning import EXPIRY, TIMERS, VALUES, Remedy, describe, differences, state_name
from ..runtime.storage import state_types

log = logging.getLogger(__name__)

Described = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Migration:
    """What a migration does (see the module docstring); ``name`` labels it in the checkpoint it
    makes and in the Dagster job ``migrate_state``, which runs migrations declared in code.

    >>> Migration(rename={"sum": "total"}, transform={"total": float}).label
    'rename sum->total; transform total'
    """

    rename: Mapping[str, str] = field(default_factory=dict)
    drop: Sequence[str] = ()
    rekey: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    transform: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    name: str = ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [f"rename {old}->{new}" for old, new in sorted(self.rename.items())]
        parts += [f"drop {name}" for name in sorted(self.drop)]
        parts += [f"rekey {name}" for name in sorted(self.rekey)]
        parts += [f"transform {name}" for name in sorted(self.transform)]
        return "; ".join(parts) or "recorded the pipeline as it is"


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate` did: the checkpoint it made (``None`` when the latest checkpoint
    already was this migration), and per state name the keys written and deleted."""

    pipeline: str
    checkpoint_id: int | None
    epoch: int | None
    written: dict[str, int]
    deleted: dict[str, int]
    label: str


def migrate(spark: SparkSession, pipeline: Pipeline, *, rename: Mapping[str, str] | None = None,
            drop: Sequence[str] = (), rekey: Mapping[str, Callable[[Any], Any]] | None = None,
            transform: Mapping[str, Callable[[Any], Any]] | None = None,
            warehouse: str | None = None, name: str = "") -> MigrationReport:
    """Migrate the state of ``pipeline``'s latest checkpoint to what ``pipeline`` now declares
    (see the module docstring); returns what it did. Raises :class:`state.MigrationError`,
    having written nothing, when the edits do not account for every difference or cannot be
    applied. Stop the pipeline's runs first: a run committing meanwhile makes one of the two
    fail with a ``CheckpointConflict``."""
    migration = Migration(rename=dict(rename or {}), drop=tuple(drop), rekey=dict(rekey or {}),
                          transform=dict(transform or {}), name=name)
    return apply(spark, pipeline, migration, warehouse)


def apply(spark: SparkSession, pipeline: Pipeline, migration: Migration,
          warehouse: str | None = None) -> MigrationReport:
    """:func:`migrate` with the edits of ``migration``."""
    layout = pipeline.layout(warehouse)
    latest = CheckpointLog(spark, layout).latest()
    if latest is None:
        raise MigrationError(f"pipeline {pipeline.id!r} has no checkpoint, so no state to "
                             "migrate: its first run records what its state means")
    # as a run would store it now: an inferred type follows what is stored (a name stored typed
    # as inferred goes back to text by state_type="json", as a declared one by its removal)
    now = describe(pipeline.stream.operators, state_types(pipeline, layout.state, latest))
    tracked_now = [variable.name for variable in pipeline.tracked]
    if _made(latest, migration) and latest.operators is not None and not [
            d for d in differences(latest.operators, now, latest.tracked, tracked_now)
            if d.blocking]:
        log.info("%s: the latest checkpoint (%d) already made migration %r: nothing to do",
                 pipeline.id, latest.checkpoint_id, migration.label)
        return MigrationReport(pipeline.id, None, None, {}, {}, migration.label)
    edits, tracked = plan(latest, now, tracked_now, migration)
    migrated = migrate_state(spark, layout, edits, operators=now, tracked=tracked,
                             label=migration.label, run_id=uuid.uuid4().hex)
    checkpoint = migrated.checkpoint
    log.info("%s: migration %r committed as checkpoint %d (epoch %d): wrote %s, deleted %s",
             pipeline.id, migration.label, checkpoint.checkpoint_id, checkpoint.epoch,
             migrated.written or "nothing", migrated.deleted or "nothing")
    return MigrationReport(pipeline.id, checkpoint.checkpoint_id, checkpoint.epoch,
                           migrated.written, migrated.deleted, migration.label)


def _made(latest: Checkpoint, migration: Migration) -> bool:
    """Whether ``latest`` is ``migration``'s own checkpoint: by its name, or, for one without
    functions, by what it does (a changed function with the same label is a new migration)."""
    named_or_plain = bool(migration.name) or not (migration.rekey or migration.transform)
    return named_or_plain and latest.migration == migration.label


def plan(latest: Checkpoint, now: Described, tracked_now: Sequence[str],
         migration: Migration) -> tuple[list[StateEdit], dict[str, str]]:
    """The edits that turn ``latest``'s state into what ``now`` reads, and the tracked variables
    after them; a :class:`MigrationError` naming every difference they leave."""
    recorded = latest.operators if latest.operators is not None else _assumed(now, migration)
    _check_names(migration, recorded, now, latest.tracked, tracked_now)
    edits: list[StateEdit] = []
    left: list[str] = []
    for name, entry in recorded.items():
        edit, problem = _edit(name, entry, now, migration)
        edits += [edit] if edit is not None else []
        left += [problem] if problem else []
    tracked = _tracked_after(latest.tracked, migration)
    left += [f"tracked variable {var!r} is no longer tracked: rename or drop it"
             for var in tracked if var not in tracked_now]
    if left:
        raise MigrationError(
            "this migration leaves state the changed pipeline would misread or leave behind, "
            "so nothing was written:\n" + "\n".join(f"  - {problem}" for problem in left))
    return edits, {var: value for var, value in tracked.items() if var in tracked_now}


def _tracked_after(tracked: Mapping[str, str], migration: Migration) -> dict[str, str]:
    """The tracked variables after the migration's renames and drops."""
    after: dict[str, str] = {}
    for var, value in tracked.items():
        if var in migration.drop:
            continue
        to = migration.rename.get(var, var)
        if to in after or (to != var and to in tracked and to not in migration.rename
                           and to not in migration.drop):
            raise MigrationError(f"tracked variable {var!r} cannot become {to!r}: {to!r} holds "
                                 "a value the migration keeps. Nothing was written.")
        after[to] = value
    return after


def _edit(name: str, entry: dict[str, Any], now: Described,
          migration: Migration) -> tuple[StateEdit | None, str]:
    """What becomes of state ``name`` (recorded as ``entry``): its edit (``None``: it stays as
    it is) or the difference left unresolved."""
    operator = entry["operator"]
    if operator in migration.drop or name in migration.drop:
        return StateEdit(name, None), ""
    to_operator = migration.rename.get(operator, operator)
    to = state_name(to_operator, entry["role"]) if to_operator != operator else name
    if to not in now:
        return None, (f"{name!r} ({operator!r}'s {entry['role']}): no operator keeps it now; "
                      f"rename it to its successor or drop it")
    found = differences({to: {**entry, "operator": to_operator}}, {to: now[to]})
    rekey = _given(migration.rekey, operator, to_operator)
    transform = _given(migration.transform, operator, to_operator) \
        if entry["role"] == VALUES else None
    if rekey is not None and entry.get("class", "Map") != "Map" and entry["role"] == VALUES:
        return None, (f"{name!r}: a {entry.get('class')} keeps keys of its own form (with window "
                      "starts, or as tuples): re-key only a map's state; drop this one instead")
    missing = [(d.what, hint) for d in found for remedy, hint, given in (
        (Remedy.REKEY, "rekey", rekey), (Remedy.TRANSFORM, "transform", transform))
        if d.remedy is remedy and given is None]
    if missing:
        hints = " and ".join(sorted({f"{hint}={{{to_operator!r}: fn}}" for _, hint in missing}))
        return None, f"{name!r}: {'; '.join(what for what, _ in missing)}: give {hints}"
    codec, new_codec = entry.get("codec", "json"), now[to].get("codec", "json")
    conversion = Conversion(name, _storage(entry), _storage(now[to]))
    edited = to != name or rekey is not None or transform is not None or codec != new_codec
    if conversion.before != conversion.after and not edited:
        return StateEdit(name, name, conversion=conversion), ""
    if not edited:
        return None, ""
    # an edit writes its state as text, and the checkpoint records it so (state.offline.migration): a
    # declared type is converted to by a migration of its own, at the next run's refusal
    return StateEdit(name, to, key=rekey, value=transform, codec=codec, new_codec=new_codec,
                     fixed=frozenset(entry.get("shared", ())),
                     key_parts=_key_parts(now[to]) if rekey is not None else None), ""


def _storage(entry: dict[str, Any]) -> StateType | None:
    """The type a state is stored typed as, as a checkpoint or the pipeline describes it."""
    storage = entry.get("storage")
    return None if storage is None else StateType.described(storage["type"])


def _key_parts(entry: dict[str, Any]) -> int:
    """How many parts a map's key has: 0 unkeyed (the key is ``None``), 1 a value, more a tuple."""
    return len(entry["keys"]) if entry["kind"] == "keyed" else 0


def _given(functions: Mapping[str, Callable[[Any], Any]], old: str,
           new: str) -> Callable[[Any], Any] | None:
    return functions.get(new, functions.get(old))


def _check_names(migration: Migration, recorded: Described, now: Described,
                 tracked_then: Mapping[str, str], tracked_now: Sequence[str]) -> None:
    """Every name the migration mentions must be one the checkpoint or the pipeline knows."""
    held = {entry["operator"] for entry in recorded.values()}
    kept = {entry["operator"] for entry in now.values()}
    variables = set(tracked_then) | set(tracked_now)
    wrong = [f"{name!r} is both an operator's state and a tracked variable: rename or drop "
             "neither by that name (give the tracked variable another name first)"
             for name in sorted((set(migration.rename) | set(migration.drop)) & variables
                                & (held | kept | set(recorded)))]
    wrong += [f"rename {old!r}: the checkpoint holds no state or tracked variable {old!r}"
             for old in migration.rename if old not in held and old not in tracked_then]
    wrong += [f"rename to {new!r}: the pipeline keeps no state or tracked variable {new!r}"
              for new in migration.rename.values() if new not in kept and new not in tracked_now]
    wrong += [f"drop {name!r}: the checkpoint holds no state or tracked variable {name!r}"
              for name in migration.drop
              if name not in held and name not in recorded and name not in tracked_then]
    renamed = set(migration.rename) | set(migration.rename.values())
    wrong += [f"{what} {name!r}: the pipeline keeps no state {name!r}"
              for what, names in (("rekey", migration.rekey), ("transform", migration.transform))
              for name in names if name not in kept and name not in renamed]
    if wrong:
        raise MigrationError("the migration names what is not there, so nothing was written "
                             f"(the checkpoint holds {sorted(held)}; the pipeline keeps "
                             f"{sorted(kept)}):\n" + "\n".join(f"  - {w}" for w in wrong))


def _assumed(now: Described, migration: Migration) -> Described:
    """What a checkpoint written before checkpoints recorded their meaning is taken to hold:
    the state of the pipeline as it is now, and of each renamed operator as its successor's."""
    assumed = dict(now)
    for old, new in migration.rename.items():
        for entry in now.values():
            if entry["operator"] == new:
                assumed[state_name(old, entry["role"])] = {**entry, "operator": old}
    for gone in migration.drop:  # whatever it held goes, under each name it may have used
        for role in (VALUES, TIMERS, EXPIRY):
            assumed.setdefault(state_name(gone, role), {
                "operator": gone, "role": role, "kind": "keyed", "keys": [], "shared": []})
    return assumed
