"""Rewriting a pipeline's stored state: renamed, dropped, re-keyed or transformed, as one
checkpoint.

A migration reads the live state of the names it edits at the latest checkpoint, works out
every new row in memory (each key and value through the user's functions, each new value
encoded with the new codec) and only then commits them, with tombstones for what moved or went,
and a checkpoint record, in one Delta commit: a crash or a bad value anywhere before that commit
leaves the previous checkpoint in force, and nothing written.

The checkpoint it makes opens a new epoch and carries ``reset_to_batch`` (as a reset does): the
next run removes whatever batches planned before the migration, but never checkpointed, wrote to
the sinks, and plans them again with the migrated pipeline. Older checkpoints stay readable, so
``reset_to_checkpoint`` to the one before undoes the migration.

An edited state stored in typed columns (``state_type=``, declared or inferred from ``state=``)
is read through its text form (:class:`~state.offline.conversion.Conversion`), its typed rows
tombstoned, and what the edits make of it is written as text, which the checkpoint records: a
state inferred typed then stays text, and a declared type asks for a conversion
(``sp.migrate``) at the next run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession

from ..commit.log import CheckpointLog
from ..commit.record import Checkpoint
from ..contract.changes import StateRows
from ..contract.codecs import codec_named, decode_key, decode_value, encode_key, encode_value
from ..contract.types import StateType
from ..errors import MigrationError, StreamError
from ..faults import fault_point
from ..layout import PipelineLayout
from ..read import lookup
from ..read.latest import stored_values
from .conversion import NOTHING_WRITTEN as _NOTHING
from .conversion import Conversion


@dataclass(frozen=True)
class StateEdit:
    """What becomes of the state stored under ``name``: moved to ``to`` (``None``: dropped), each
    key through ``key`` and each value through ``value``, decoded with ``codec`` and encoded
    with ``new_codec``. ``fixed``: keys ``key`` leaves as they are (an operator's own entries,
    such as a window's stream time or a timer table's watermark).

    >>> StateEdit("sum", "total").moves, StateEdit("sum", None).moves
    (True, False)
    """

    name: str
    to: str | None
    key: Callable[[Any], Any] | None = None
    value: Callable[[Any], Any] | None = None
    codec: str = "json"
    new_codec: str = "json"
    fixed: frozenset[Any] = frozenset()
    #: what ``key`` must return: 0 ``None`` (unkeyed), 1 one value, n a tuple of n (unchecked:
    #: ``None``)
    key_parts: int | None = None
    #: the state moves between text and typed columns (then it is all the edit does)
    conversion: Conversion | None = None

    @property
    def moves(self) -> bool:
        return self.to is not None

    @property
    def recodes(self) -> bool:
        return self.value is not None or self.codec != self.new_codec


@dataclass(frozen=True)
class Migrated:
    """What a migration committed: the checkpoint, and per state name the keys written and the
    keys deleted (tombstoned)."""

    checkpoint: Checkpoint
    written: dict[str, int]
    deleted: dict[str, int]


def migrate_state(spark: SparkSession, layout: PipelineLayout, edits: Iterable[StateEdit], *,
                  operators: dict[str, Any], tracked: dict[str, str], label: str,
                  run_id: str) -> Migrated:
    """Apply ``edits`` to the state of the latest checkpoint and commit the result as the next
    checkpoint (a new epoch), which records ``operators`` (what its state now means),
    ``tracked`` (the tracked variables it keeps) and ``label``. Raises :class:`MigrationError`
    (nothing written) when an edit cannot be applied: a key or value function fails, two keys
    become one, a value does not encode, or a name moves onto state the migration keeps."""
    edits = list(edits)
    log = CheckpointLog(spark, layout)
    latest = log.latest()
    if latest is None:
        raise MigrationError(f"pipeline {layout.pipeline!r} has no checkpoint, so no state to "
                             "migrate: its first run records what its state means")
    conversions = [edit.conversion for edit in edits if edit.conversion is not None]
    edits = [edit for edit in edits if edit.conversion is None]
    names = {e.name for e in edits} | _targets(edits)
    typed = _typed(latest, names)
    live = _live_rows(spark, layout, latest, names - set(typed))
    as_text = {name: Conversion(name, kind, None).rows(layout, latest)
               for name, kind in typed.items()}
    live.update({name: text[["key", "value"]] for name, (text, _) in as_text.items()})
    rows = [_edited(edit, live.get(edit.name, _NO_ROWS), typed=edit.name in typed)
            for edit in edits]
    _check_targets(edits, live)
    converted = [conversion.rows(layout, latest) for conversion in conversions]
    rows += [text for text, _ in converted]
    sources = {e.name for e in edits}  # an edited typed state's rows all go: tombstones
    typed_rows = tuple(table for name, (_, table) in as_text.items() if name in sources) + tuple(
        table for _, table in converted)
    typed_rows = tuple(table for table in typed_rows if table.num_rows)
    operators = _written_as_text(operators, edits)
    changes = pd.concat(rows, ignore_index=True) if rows else _NO_CHANGES
    # a key both tombstoned (it left, or its name was dropped) and written (it arrived, by this
    # or another edit) keeps the write: tombstones first, then the last row per key
    changes = (changes.sort_values("deleted", ascending=False, kind="stable")
               .drop_duplicates(["operator", "key"], keep="last"))
    fault_point("migration_rows_built")
    migrated = dataclasses.replace(
        latest, checkpoint_id=latest.checkpoint_id + 1, epoch=latest.epoch + 1, run_id=run_id,
        created_at=time.time(), reset_to_batch=latest.batch_id, resumed_from=None,
        operators=operators, tracked=tracked, migration=label)
    log.commit_changes(migrated, StateRows(changes[["operator", "key", "value", "deleted"]],
                                           typed_rows))
    return Migrated(migrated, _counts(changes, typed_rows, deleted=False),
                    _counts(changes, typed_rows, deleted=True))


_NO_ROWS = pd.DataFrame({"key": pd.Series([], dtype=object), "value": pd.Series([], dtype=object)})
_NO_CHANGES = pd.DataFrame(columns=["operator", "key", "value", "deleted"])


def _targets(edits: list[StateEdit]) -> set[str]:
    return {e.to for e in edits if e.to is not None and e.to != e.name}


def _typed(latest: Checkpoint, names: set[str]) -> dict[str, StateType]:
    """The types of those of ``names`` that ``latest`` recorded as stored in typed columns."""
    recorded = latest.operators or {}
    return {name: StateType.described(recorded[name]["storage"]["type"]) for name in sorted(names)
            if recorded.get(name, {}).get("storage")}


def _written_as_text(operators: dict[str, Any], edits: list[StateEdit]) -> dict[str, Any]:
    """``operators`` as the migration leaves them stored: the states its edits write, as text."""
    written = {e.to for e in edits if e.to is not None}
    return {name: {key: value for key, value in entry.items()
                   if not (name in written and key == "storage")}
            for name, entry in operators.items()}


def _live_rows(spark: SparkSession, layout: PipelineLayout, latest: Checkpoint,
               names: set[str]) -> dict[str, pd.DataFrame]:
    """``key, value`` (encoded) of every live key of each of ``names`` at ``latest``."""
    read = [lookup.stored_values(layout.state, name, latest.checkpoint_id, None, latest.key_groups)
            for name in sorted(names)]
    if all(found is not None for found in read):
        return {name: found.rows.to_pandas() for name, found in zip(sorted(names), read)
                if found is not None}
    # delta-rs does not read this table: Spark does
    frame: pd.DataFrame = stored_values(spark, layout, sorted(names), latest.checkpoint_id).toPandas()
    return {str(name): rows[["key", "value"]] for name, rows in frame.groupby("operator")}


def _edited(edit: StateEdit, rows: pd.DataFrame, typed: bool = False) -> pd.DataFrame:
    """The changelog rows ``edit`` makes of ``rows`` (its name's live ``key, value``); ``typed``:
    those rows are a typed state's as text, whose tombstones are typed rows of their own."""
    old_keys = rows["key"].tolist()
    gone = pd.DataFrame({"operator": edit.name, "key": [] if typed else old_keys, "value": None,
                         "deleted": True})
    if not edit.moves:
        return gone
    keys = _new_keys(edit, old_keys)
    values = _new_values(edit, old_keys, rows["value"].tolist())
    written = pd.DataFrame({"operator": edit.to, "key": keys, "value": values, "deleted": False})
    return pd.concat([gone, written], ignore_index=True)  # a key that stays: the write wins


def _new_keys(edit: StateEdit, old_keys: list[str]) -> list[str]:
    if edit.key is None:
        return old_keys
    new: list[str] = []
    came_from: dict[str, str] = {}
    for text in old_keys:
        key = decode_key(text)
        moved = key if key in edit.fixed else _called(edit.key, key, edit, text, "re-key")
        if key not in edit.fixed and not _has_parts(moved, edit.key_parts):
            raise MigrationError(
                f"{_where(edit, text)}: the re-key function returned {moved!r}, but the "
                f"operator's keys have {edit.key_parts} part(s) (None for unkeyed state, one "
                f"value for one key column, a tuple for several). {_NOTHING}")
        try:
            encoded = encode_key(moved)
        except (TypeError, ValueError) as exc:
            raise MigrationError(f"{_where(edit, text)}: the new key {moved!r} cannot be a state "
                                 f"key ({exc}); {_NOTHING}") from exc
        if encoded in came_from:
            raise MigrationError(
                f"state {edit.name!r}: keys {decode_key(came_from[encoded])!r} and {key!r} both "
                f"become {moved!r}; a re-key must keep keys apart. {_NOTHING}")
        came_from[encoded] = text
        new.append(encoded)
    return new


def _has_parts(key: Any, parts: int | None) -> bool:
    if parts is None:
        return True
    if parts == 0:
        return key is None
    if parts == 1:
        return key is not None and not isinstance(key, tuple)
    return isinstance(key, tuple) and len(key) == parts


def _new_values(edit: StateEdit, keys: list[str], texts: list[str]) -> list[str]:
    if not edit.recodes:
        return texts
    old, new = codec_named(edit.codec), codec_named(edit.new_codec)
    values = []
    for key_text, text in zip(keys, texts):
        key = decode_key(key_text)
        try:
            value = decode_value(old, text, operator=edit.name, key=key)
        except StreamError as exc:
            raise MigrationError(f"state {edit.name!r}, key {key!r}: its stored value does not "
                                 f"decode with the {edit.codec} codec. {_NOTHING}") from exc
        if edit.value is not None and key not in edit.fixed:
            value = _called(edit.value, value, edit, key_text, "transform")
        try:
            values.append(encode_value(new, value, operator=edit.to or edit.name, key=key))
        except StreamError as exc:
            raise MigrationError(f"{exc}. {_NOTHING}") from exc
    return values


def _called(fn: Callable[[Any], Any], argument: Any, edit: StateEdit, key_text: str,
            what: str) -> Any:
    try:
        return fn(argument)
    except Exception as exc:
        raise MigrationError(f"{_where(edit, key_text)}: the {what} function failed on "
                             f"{argument!r}: {type(exc).__name__}: {exc}. {_NOTHING}") from exc


def _check_targets(edits: list[StateEdit], live: dict[str, pd.DataFrame]) -> None:
    """A name may receive state only when no state stays there: it is empty, or its own state
    is dropped or moved away by the same migration; and only one edit may move onto it."""
    leaving = {e.name for e in edits if e.to != e.name}
    arriving: dict[str, str] = {}
    for edit in edits:
        if edit.to is None or edit.to == edit.name:
            continue
        if edit.to in arriving:
            raise MigrationError(f"states {arriving[edit.to]!r} and {edit.name!r} would both "
                                 f"move to {edit.to!r}. {_NOTHING}")
        arriving[edit.to] = edit.name
        held = len(live.get(edit.to, _NO_ROWS))
        if held and edit.to not in leaving:
            raise MigrationError(
                f"state {edit.name!r} cannot move to {edit.to!r}: {edit.to!r} already holds "
                f"{held} key(s); drop it in the same migration first. {_NOTHING}")


def _where(edit: StateEdit, key_text: str) -> str:
    return f"state {edit.name!r}, key {decode_key(key_text)!r}"


def _counts(changes: pd.DataFrame, typed: tuple[pa.Table, ...], deleted: bool) -> dict[str, int]:
    chosen = changes[changes["deleted"] == deleted]
    counts = {str(name): int(count) for name, count in chosen.groupby("operator").size().items()}
    for table in typed:  # a converted state's rows: one state each
        count = int(np.count_nonzero(table["deleted"].to_numpy() == deleted))
        if count:
            counts[table["operator"][0].as_py()] = counts.get(table["operator"][0].as_py(), 0) + count
    return counts




def dropped(names: Iterable[Hashable]) -> list[StateEdit]:
    """Edits that drop the state of each of ``names``."""
    return [StateEdit(str(name), None) for name in names]
