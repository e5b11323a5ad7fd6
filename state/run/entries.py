"""A state of many rows per key: a list's elements or a map's entries, each stored as a row of
its own, so a change writes only the entries it touched, not the whole list or map.

A row holds the key's JSON text in ``key`` (so its key group, and which executor task holds
it, are the key's), the entry's identity as text in a column of the state's own
(``k__<stem>``, so every table-wide rule that tells rows apart by ``key`` and the ``k__``
columns, such as the newest row per identity and compaction, holds for entries too), and the
entry's value as its codec's text in ``value``; removing an entry writes a tombstone. A key's
entries are read on its first touch in the run, all at once, with the batch's other keys.

>>> state = EntryState("tops.recent", "k__tops__recent", loader=None, key_groups=256)
>>> state.put("a", "0", (1.5,)); state.put("a", "1", (2.5,)); state.remove("a", "0")
>>> dict(state.entries("a"))
{'1': (2.5,)}
>>> rows = state.changed_rows()
>>> rows.select(["key", "k__tops__recent", "deleted"]).to_pylist()  # doctest: +NORMALIZE_WHITESPACE
[{'key': '"a"', 'k__tops__recent': '0', 'deleted': True},
 {'key': '"a"', 'k__tops__recent': '1', 'deleted': False}]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..contract.codecs import codec_named, decode_key, encode_key, encode_value
from ..contract.keygroups import key_groups

#: ``(state name, encoded keys or None for every key)`` -> ``key``, the entry column and
#: ``value`` (encoded) of each live entry of those keys
EntryLoader = Callable[[str, pa.Array | None], pa.Table]

_REMOVED = object()  # a change that removes an entry


class EntryState:
    """The entries of one state name for one run: per key, entry identity (text) -> value."""

    def __init__(self, name: str, column: str, loader: EntryLoader | None, key_groups: int,
                 codec: str = "pickle"):
        self.name, self.column = name, column
        self._loader = loader
        self._groups = key_groups
        self._codec = codec_named(codec)
        self._held: dict[Hashable, dict[str, Any]] = {}
        self._changes: dict[tuple[Hashable, str], Any] = {}
        self._encoded: dict[tuple[Hashable, str], str] = {}  # changed values' texts, once

    def load(self, keys: Iterable[Hashable]) -> None:
        """Read the entries of those of ``keys`` not held yet, in one read."""
        wanted = [key for key in dict.fromkeys(keys) if key not in self._held]
        if not wanted:
            return
        for key in wanted:
            self._held[key] = {}
        if self._loader is None:  # no checkpoint: nothing stored
            return
        texts = {encode_key(key): key for key in wanted}
        self._place(self._loader(self.name, pa.array(list(texts), pa.string())), texts)

    def load_all(self) -> list[Hashable]:
        """Read every stored key's entries (those held stay as they are); the keys holding any."""
        if self._loader is not None:
            stored = self._loader(self.name, None)
            texts = {text: decode_key(text) for text in set(stored["key"].to_pylist())}
            new = {text: key for text, key in texts.items() if key not in self._held}
            for key in new.values():
                self._held[key] = {}
            self._place(stored.filter(pc.is_in(stored["key"], pa.array(list(new), pa.string()))), new)
        return [key for key, entries in self._held.items() if entries]

    def _place(self, stored: pa.Table, keys: Mapping[str, Hashable]) -> None:
        values = self._codec.decode_many(stored["value"]) if stored.num_rows else []
        for text, entry, value in zip(stored["key"].to_pylist(), stored[self.column].to_pylist(), values):
            self._held[keys[text]][entry] = value

    def entries(self, key: Hashable) -> Mapping[str, Any]:
        """The entries of ``key`` (read now if not held), a view: change them with :meth:`put`
        and :meth:`remove`."""
        self.load([key])
        return MappingProxyType(self._held[key])

    def put(self, key: Hashable, entry: str, value: Any) -> None:
        self.load([key])
        self._held[key][entry] = value
        self._changes[(key, entry)] = value
        self._encoded.pop((key, entry), None)

    def remove(self, key: Hashable, entry: str) -> None:
        self.load([key])
        if self._held[key].pop(entry, _REMOVED) is not _REMOVED:
            self._changes[(key, entry)] = _REMOVED

    @property
    def changed_keys(self) -> int:
        """Entries changed since the last checkpoint (what a checkpoint writes rows for)."""
        return len(self._changes)

    @property
    def keys_held(self) -> int:
        return sum(1 for entries in self._held.values() if entries)

    def encode_changes(self) -> None:
        """Check every changed value encodes (raises :class:`~state.errors.EncodingError`
        naming the state and key), at the end of the batch that set it."""
        for identity, value in self._changes.items():
            if value is not _REMOVED and identity not in self._encoded:
                self._encoded[identity] = encode_value(self._codec, value, operator=self.name,
                                                       key=identity[0])

    def changed_rows(self) -> pa.Table:
        """A row per entry changed since the last checkpoint: ``operator``, ``key``, the entry
        column, ``value`` (``None`` for a removed entry), ``deleted``, ``key_group``."""
        self.encode_changes()
        changes = list(self._changes.items())
        texts = [encode_key(key) for (key, _), _ in changes]
        removed = [value is _REMOVED for _, value in changes]
        values = [None if gone else self._encoded[identity]
                  for (identity, _), gone in zip(changes, removed)]
        return pa.table({
            "operator": pa.array([self.name] * len(changes), pa.string()),
            "key": pa.array(texts, pa.string()),
            self.column: pa.array([entry for (_, entry), _ in changes], pa.string()),
            "value": pa.array(values, pa.string()),
            "deleted": pa.array(removed, pa.bool_()),
            "key_group": pa.array(key_groups(texts, self._groups) if texts else [], pa.int32())})

    def mark_checkpointed(self) -> None:
        self._changes.clear()
        self._encoded.clear()
