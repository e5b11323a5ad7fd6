"""A state moved between storages, JSON text and typed columns (``state_type=``), as part of a
migration's checkpoint (:func:`state.migrate_state`).

A conversion writes every live key of the state in its new form and a tombstone for each in its
old one, in the migration's one commit: every reader (a run's lookups, ``read_state``, a reset,
compaction, an engine reading the latest row per key) then finds the key in one form only, and
a reset to the checkpoint before the conversion brings the old form back. Keys keep their key
groups (a typed key's group is its JSON text's). A value or key the new form cannot hold (a
float in an int state, a tuple key) stops the migration before anything is written, naming it.

>>> from state.contract.types import declared
>>> Conversion("sum", None, declared(int)).describe()
'text (json) -> typed int64'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa

from ..commit.record import Checkpoint
from ..contract.codecs import JsonCodec, decode_key, decode_values
from ..contract.types import KEY_PREFIX, StateType
from ..errors import EncodingError, MigrationError, StreamError
from ..layout import PipelineLayout
from ..read import lookup
from ..read.found import Found
from ..run.encodings import JsonEncoding, TypedEncoding

#: How a migration's error ends when it stopped before its commit (a conversion's and the rest's).
NOTHING_WRITTEN = "Nothing was written: the checkpoint before the migration is still in force."


@dataclass(frozen=True)
class Conversion:
    """State ``name`` stored as ``before`` becomes stored as ``after`` (``None``: JSON text)."""

    name: str
    before: StateType | None
    after: StateType | None

    def describe(self) -> str:
        return f"{_form(self.before)} -> {_form(self.after)}"

    def rows(self, layout: PipelineLayout, latest: Checkpoint) -> tuple[pd.DataFrame, pa.Table]:
        """The rows of the conversion as of ``latest``: text rows (``operator, key, value,
        deleted``) and typed rows (the state's columns); one of them tombstones."""
        if (self.before is None) == (self.after is None):
            raise MigrationError(f"state {self.name!r}: {self.describe()}: a state moves between "
                                 f"text and typed columns, not from one type to another. {NOTHING_WRITTEN}")
        try:
            if self.after is not None:
                return self._to_typed(layout, latest, self.after)
            assert self.before is not None
            return self._to_text(layout, latest, self.before)
        except (EncodingError, StreamError) as error:
            raise MigrationError(f"state {self.name!r} cannot be converted ({self.describe()}): "
                                 f"{error}. {NOTHING_WRITTEN}") from error

    def _to_typed(self, layout: PipelineLayout, latest: Checkpoint,
                  after: StateType) -> tuple[pd.DataFrame, pa.Table]:
        live = _read(lookup.stored_values(layout.state, self.name, latest.checkpoint_id, None,
                                          latest.key_groups), layout.state, self.name).rows
        texts = live["key"].to_pylist()
        keys = [decode_key(text) for text in texts]
        values = decode_values(JsonCodec(), live["value"], keys, operator=self.name)
        typed = self._typed(layout, latest, after)
        written = typed.checkpoint_rows([typed.changes(keys, values, np.zeros(len(keys), np.int8))])
        gone = pd.DataFrame({"operator": self.name, "key": pd.Series(texts, dtype=object),
                             "value": None, "deleted": True})
        return gone, written

    def _to_text(self, layout: PipelineLayout, latest: Checkpoint,
                 before: StateType) -> tuple[pd.DataFrame, pa.Table]:
        typed = self._typed(layout, latest, before, reading=True)
        keys, stored = typed.load_all()
        values = typed.objects(stored, keys)
        text = JsonEncoding(self.name, JsonCodec(), loader=None)
        written = text.checkpoint_rows([text.changes(keys, values, np.zeros(len(keys), np.int8))])
        gone = typed.checkpoint_rows([typed.changes(keys, [], np.ones(len(keys), np.int8))])
        return written, gone

    def _typed(self, layout: PipelineLayout, latest: Checkpoint, state_type: StateType,
               reading: bool = False) -> TypedEncoding:
        key_type = lookup.column_types(layout.state).get(KEY_PREFIX + self.name)
        loader = partial(_stored_typed, layout.state, self.name, latest) if reading else None
        return TypedEncoding(self.name, state_type, key_type=key_type,
                             key_groups=latest.key_groups, loader=loader)


def _stored_typed(path: str, name: str, latest: Checkpoint, keys: pa.Array | None,
                  key_column: str, value_columns: list[str]) -> Found:
    return _read(lookup.stored_typed_values(path, name, latest.checkpoint_id, keys,
                                            latest.key_groups, key_column, value_columns),
                 path, name)


def _read(found: Found | None, path: str, name: str) -> Found:
    """What a conversion read of state ``name`` without Spark (``None``: it could not)."""
    if found is None:
        raise MigrationError(f"{path}: converting state {name!r} reads it without Spark, which "
                             f"this table does not allow. {NOTHING_WRITTEN}")
    return found


def _form(state_type: StateType | None) -> str:
    return "text (json)" if state_type is None else f"typed {state_type.describe()}"
