"""A state of many rows per key: a list's elements or a map's entries (or a value variable's
one entry), each stored as a row of its own, so a change writes only the entries it touched.

A row holds the key's JSON text in ``key`` (so its key group, and which executor task holds
it, are the key's), the entry's identity as text in a column of the state's own
(:attr:`EntryColumns.entry`, ``k__<stem>``: every table-wide rule that tells rows apart by
``key`` and the ``k__`` columns, such as the newest row per identity and compaction, holds for
entries too), and the value: in typed columns of its own (:attr:`EntryColumns.fields`,
``v__<stem>__<field>``, a value being a tuple of the fields, and with a TTL its expiry in
``v__<stem>___expires``), which any engine reads, or as its codec's text in ``value`` for
values no plain column holds. Removing an entry writes a tombstone. A key's entries are read
on its first touch in the run, all at once, with the batch's other keys.

>>> from state.contract.entries import EntryColumns
>>> columns = EntryColumns("k__tops__recent", (("x", "v__tops__recent__x", pa.float64()),))
>>> state = EntryState("tops.recent", columns, loader=None, key_groups=256)
>>> state.put("a", "0", (1.5,)); state.put("a", "1", (2.5,)); state.remove("a", "0")
>>> dict(state.entries("a"))
{'1': (2.5,)}
>>> rows = state.changed_rows()
>>> rows.select(["key", "k__tops__recent", "v__tops__recent__x", "deleted"]).to_pylist()
... # doctest: +NORMALIZE_WHITESPACE
[{'key': '"a"', 'k__tops__recent': '0', 'v__tops__recent__x': None, 'deleted': True},
 {'key': '"a"', 'k__tops__recent': '1', 'v__tops__recent__x': 2.5, 'deleted': False}]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..contract.codecs import codec_named, decode_key, encode_key, encode_value
from ..contract.entries import EntryColumns
from ..contract.keygroups import key_groups
from ..errors import EncodingError

#: ``(state name, encoded keys or None for every key)`` -> ``key``, the entry column and the
#: value columns (:attr:`EntryColumns.value_columns`) of each live entry of those keys
EntryLoader = Callable[[str, pa.Array | None], pa.Table]

_REMOVED = object()  # a change that removes an entry


@dataclass(frozen=True)
class Expiring:
    """A value with a TTL, and the processing time it expires at (epoch ms)."""

    value: Any
    expires_ms: int


class EntryState:
    """The entries of one state name for one run: per key, entry identity (text) -> value."""

    def __init__(self, name: str, columns: EntryColumns, loader: EntryLoader | None,
                 key_groups: int, codec: str = "pickle"):
        self.name, self.columns = name, columns
        self._loader = loader
        self._groups = key_groups
        self._codec = codec_named(codec)
        self._held: dict[Hashable, dict[str, Any]] = {}
        self._changes: dict[tuple[Hashable, str], Any] = {}
        self._encoded: pa.Table | None = None  # the changes' rows, once encoded

    @property
    def column(self) -> str:
        return self.columns.entry

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
        for text, entry, value in zip(stored["key"].to_pylist(), stored[self.column].to_pylist(),
                                      self._values_of(stored)):
            self._held[keys[text]][entry] = value

    def _values_of(self, stored: pa.Table) -> list[Any]:
        """The stored rows' values: tuples of the typed fields (an :class:`Expiring` where a
        stamp is), or the codec's decoded texts."""
        if not stored.num_rows:
            return []
        if not self.columns.fields:
            texts = stored["value"].to_pylist()  # null: a typed value read as text (a sweep's)
            return [None if text is None else self._codec.decode(text) for text in texts]
        fields = [stored[column].to_pylist() for _, column, _ in self.columns.fields]
        values = list(zip(*fields))
        if self.columns.expiry is None:
            return values
        return [value if stamp is None else Expiring(value, stamp)
                for value, stamp in zip(values, stored[self.columns.expiry].to_pylist())]

    def entries(self, key: Hashable) -> Mapping[str, Any]:
        """The entries of ``key`` (read now if not held), a view: change them with :meth:`put`
        and :meth:`remove`."""
        if key not in self._held:
            self.load([key])
        return MappingProxyType(self._held[key])

    def put(self, key: Hashable, entry: str, value: Any) -> None:
        if key not in self._held:
            self.load([key])
        self._held[key][entry] = value
        self._changes[(key, entry)] = value
        self._encoded = None

    def remove(self, key: Hashable, entry: str) -> None:
        if key not in self._held:
            self.load([key])
        if self._held[key].pop(entry, _REMOVED) is not _REMOVED:
            self._changes[(key, entry)] = _REMOVED
            self._encoded = None

    @property
    def changed_keys(self) -> int:
        """Entries changed since the last checkpoint (what a checkpoint writes rows for)."""
        return len(self._changes)

    @property
    def keys_held(self) -> int:
        return sum(1 for entries in self._held.values() if entries)

    def encode_changes(self) -> None:
        """Encode the changed values (raises :class:`~state.errors.EncodingError` naming the
        state and the key), at the end of the batch that set them."""
        if self._encoded is None:
            self._encoded = self._rows()

    def changed_rows(self) -> pa.Table:
        """A row per entry changed since the last checkpoint: ``operator``, ``key``, the entry
        column, the value columns (null for a removed entry), ``deleted``, ``key_group``."""
        self.encode_changes()
        assert self._encoded is not None
        return self._encoded

    def _rows(self) -> pa.Table:
        changes = list(self._changes.items())
        texts = [encode_key(key) for (key, _), _ in changes]
        removed = [value is _REMOVED for _, value in changes]
        values = [None if gone else value for (_, value), gone in zip(changes, removed)]
        return pa.table({
            "operator": pa.array([self.name] * len(changes), pa.string()),
            "key": pa.array(texts, pa.string()),
            self.column: pa.array([entry for (_, entry), _ in changes], pa.string()),
            **self._value_arrays([key for (key, _), _ in changes], values),
            "deleted": pa.array(removed, pa.bool_()),
            "key_group": pa.array(key_groups(texts, self._groups) if texts else [], pa.int32())})

    def _value_arrays(self, keys: list[Hashable], values: list[Any]) -> dict[str, pa.Array]:
        if not self.columns.fields:
            return {"value": pa.array([None if value is None else encode_value(
                self._codec, value, operator=self.name, key=key)
                for key, value in zip(keys, values)], pa.string())}
        plain = [value.value if isinstance(value, Expiring) else value for value in values]
        arrays = {column: self._field_array(keys, plain, at, field, kind)
                  for at, (field, column, kind) in enumerate(self.columns.fields)}
        if self.columns.expiry is not None:
            arrays[self.columns.expiry] = pa.array(
                [value.expires_ms if isinstance(value, Expiring) else None for value in values],
                pa.int64())
        return arrays

    def _field_array(self, keys: list[Hashable], values: list[Any], at: int, field: str,
                     kind: pa.DataType) -> pa.Array:
        column = [None if value is None else value[at] for value in values]
        try:
            return pa.array(column, kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            for key, value in zip(keys, column):  # find the value, and raise naming its key
                try:
                    pa.array([value], kind)
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
                    raise EncodingError(
                        f"state {self.name!r} for key {key!r}: field {field!r} is {kind}, "
                        f"and {value!r} is not ({error})") from error
            raise

    def mark_checkpointed(self) -> None:
        self._changes.clear()
        self._encoded = None
