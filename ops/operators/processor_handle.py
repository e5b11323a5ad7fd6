"""What a Spark ``StatefulProcessor`` is handed here: a :class:`ProcessorHandle` (pyspark's
``StatefulProcessorHandle``) whose ``ValueState``, ``ListState`` and ``MapState`` are
pyspark's own classes, answered from the operator's managed state.

A processor declares its variables once per batch, in ``init``; the operator then turns the
handle to each key in turn (:meth:`ProcessorHandle.turn_to`), so a variable always reads and
writes the key whose rows are being handled, as Spark's do. Each variable is a state of many
rows per key of its own (``store.entries``, a row per entry, its value in columns typed from
the variable's schema): a value variable's one entry is ``""``; a list element's is its
position (growing: an append adds positions, a ``put`` that drops the head and adds at the
tail, as a "last N" does, removes the dropped ones and adds the new); a map entry's is its
user key's JSON text. So a checkpoint writes the entries that changed, not the list or map. The
key's record holds its timers. A variable declared with ``ttlDurationMs`` (processing-time
mode, as in Spark) stores each value, list element and map entry as an
:class:`~state.Expiring` stamped with the batch's time plus the TTL at its write: from the
first batch at or after that time it reads as absent, and it is removed when the key is next
written or its earliest expiry wakes it (:meth:`ProcessorHandle.drop_expired`).

>>> from state import EntryColumns, StateStore
>>> store = StateStore(None, None, None)
>>> handle = ProcessorHandle("counts", entries=lambda name: store.entries(
...     f"counts.{name}", EntryColumns(f"k__counts__{name}")))
>>> count = handle.getValueState("count", "n long")
>>> handle.turn_to({}, "a")
>>> count.exists(), count.update((3,)), count.get(), dict(handle.stored_entries("count"))
(False, None, (3,), {'': (3,)})
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark.sql.streaming.stateful_processor import (
    ListState,
    MapState,
    StatefulProcessorHandle,
    ValueState,
)
from pyspark.sql.types import StructType

from state import EntryState, Expiring, codec_named, encode_key

from ..errors import OperatorError
from .aggregates import to_python
from .processor_schema import field_names

Record = dict[str, Any]

#: where a key's record keeps its timers (sorted epoch ms); no variable's name starts with ``__``
TIMERS = "__timers__"


class ProcessorHandle(StatefulProcessorHandle):
    """pyspark's handle, over the state of the key being handled. Variables are declared in
    ``init`` only (as Spark requires); a second declaration of a name must be of the same kind."""

    def __init__(self, operator: str, time_mode: str = "none", now: int | None = None,
                 entries: Callable[[str], EntryState] | None = None) -> None:
        # no API client: nothing goes over a socket
        self.operator = operator
        #: a variable's entries, by its name (``None``: declaring only), and those asked for
        self._entries = entries
        self._entry_states: dict[str, EntryState] = {}
        self.key: Any = None  # the key being handled
        self.entries_changed = False
        self._time_mode = time_mode
        self.now = now  # the batch's processing time, which TTLs count from
        self.has_ttl = False  # a variable was declared with one
        self.record: Record = {}
        self.changed = False
        self._kinds: dict[str, str] = {}
        #: each variable's value schema (a map's value's), and whether it has a TTL
        self.schemas: dict[str, StructType | str] = {}
        self.ttls: dict[str, bool] = {}
        self._declaring = True
        self.deleted: list[str] = []  # deleteIfExists in init: dropped from every key's record

    def turn_to(self, record: Record, key: Any = None) -> None:
        """From now on the variables read and write the state of ``key``, whose record (its
        timers) is ``record`` (``{}`` for a key holding nothing); declaring is over."""
        self._declaring = False
        # a copy: the store's own value changes only when the operator sets the new record
        self.record, self.changed = dict(record), False
        self.key, self.entries_changed = key, False
        for name in self.variables:
            if name in self.record:  # a checkpoint from before entries: the variable moves
                self._adopt(name, self.record.pop(name))
                self.changed = True

    def _adopt(self, name: str, held: Any) -> None:
        """A variable the key's record held (as releases before entries stored it) made the
        variable's entries."""
        if self._kinds[name] == "map":
            for user_key, stored in held.items():
                self.put_entry(name, _entry_of(user_key), stored)
        elif self._kinds[name] == "list":
            for position, stored in enumerate(held):
                self.put_entry(name, str(position), stored)
        else:
            self.put_entry(name, VALUE_ENTRY, held)

    @property
    def variables(self) -> list[str]:
        """The declared variables."""
        return list(self._kinds)

    def stored_entries(self, name: str) -> Mapping[str, Any]:
        """The current key's entries of variable ``name`` (as stored)."""
        return self._entry_state(name).entries(self.key)

    def put_entry(self, name: str, entry: str, stored: Any) -> None:
        self._entry_state(name).put(self.key, entry, stored)
        self.entries_changed = True

    def remove_entry(self, name: str, entry: str) -> None:
        self._entry_state(name).remove(self.key, entry)
        self.entries_changed = True

    def kind_of(self, name: str) -> str:
        """What variable ``name`` was declared as: ``"value"``, ``"list"`` or ``"map"``."""
        return self._kinds[name]

    def _entry_state(self, name: str) -> EntryState:
        held = self._entry_states.get(name)
        if held is None:
            assert self._entries is not None, "a variable is used while the processor is declaring"
            held = self._entry_states[name] = self._entries(name)
        return held

    def getValueState(self, stateName: str, schema: StructType | str,
                      ttlDurationMs: int | None = None) -> ValueState:
        return HeldValueState(self, self._declared(stateName, "value", ttlDurationMs, schema),
                              ttlDurationMs, schema)

    def getListState(self, stateName: str, schema: StructType | str,
                     ttlDurationMs: int | None = None) -> ListState:
        return HeldListState(self, self._declared(stateName, "list", ttlDurationMs, schema),
                             ttlDurationMs, schema)

    def getMapState(self, stateName: str, userKeySchema: StructType | str,
                    valueSchema: StructType | str, ttlDurationMs: int | None = None) -> MapState:
        name = self._declared(stateName, "map", ttlDurationMs, valueSchema)
        return HeldMapState(self, name, ttlDurationMs, userKeySchema, valueSchema)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._check_timers("registerTimer")
        self.write(TIMERS, tuple(sorted({*self.timers(), int(expiryTimestampMs)})))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._check_timers("deleteTimer")
        self.write(TIMERS, tuple(at for at in self.timers() if at != int(expiryTimestampMs)) or None)

    def _check_timers(self, call: str) -> None:
        if self._time_mode == "none":
            raise self._refused(call, "timers need time_mode='processing_time' or 'event_time'")

    def listTimers(self) -> Iterator[int]:
        return iter(self.timers())

    def timers(self) -> tuple[int, ...]:
        """The current key's timers, earliest first."""
        return self.record.get(TIMERS, ())

    def deleteIfExists(self, stateName: str) -> None:
        if not self._declaring:
            raise self._refused(f"deleteIfExists({stateName!r})", "a variable is deleted in "
                                "init(), before any row is handled")
        if stateName in self._kinds:
            raise self._refused(f"deleteIfExists({stateName!r})", "it is declared in this "
                                "init(): delete it before declaring it again")
        self.deleted.append(stateName)

    def _declared(self, name: str, kind: str, ttl_ms: int | None,
                  schema: StructType | str) -> str:
        if name.startswith("__"):
            raise self._refused(f"get{kind.title()}State({name!r})", "names starting with '__' "
                                "are lakestream's own")
        if not self._declaring:
            raise self._refused(f"get{kind.title()}State({name!r})", "state variables are "
                                "declared in init(), before any row is handled (as in Spark)")
        if ttl_ms is not None:
            self._check_ttl(f"get{kind.title()}State({name!r}, ttlDurationMs={ttl_ms!r})", ttl_ms)
        if self._kinds.setdefault(name, kind) != kind:
            raise self._refused(f"get{kind.title()}State({name!r})",
                                f"{name!r} is declared as a {self._kinds[name]} state already")
        self.schemas[name], self.ttls[name] = schema, ttl_ms is not None
        return name

    def _check_ttl(self, call: str, ttl_ms: Any) -> None:
        """Spark's rules: a TTL counts processing time, so it needs that mode; it is positive."""
        if self._time_mode != "processing_time":
            raise self._refused(call, f"cannot use TTL in time_mode={self._time_mode!r}; use "
                                "time_mode='processing_time' (as Spark requires)")
        if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms <= 0:
            raise self._refused(call, "the TTL is a positive number of milliseconds")
        self.has_ttl = True

    def stamped(self, value: Any, ttl_ms: int | None) -> Any:
        """``value`` as a variable with ``ttl_ms`` stores it."""
        return value if ttl_ms is None else Expiring(value, self._now() + ttl_ms)

    def live(self, stored: Any) -> Any:
        """What ``stored`` reads as: its value, or ``None`` once it expired."""
        if isinstance(stored, Expiring):
            return None if self.expired(stored) else stored.value
        return stored

    def expired(self, stored: Any) -> bool:
        """Whether ``stored`` is a value whose TTL passed: Spark's rule, expiry <= batch time."""
        return isinstance(stored, Expiring) and stored.expires_ms <= self._now()

    def _now(self) -> int:
        assert self.now is not None, "a TTL'd variable is read or written without a batch time"
        return self.now

    def drop_expired(self) -> None:
        """Remove the current key's values, list elements and map entries whose TTL passed."""
        for name in self.variables:
            if self.ttls[name]:
                for entry, stored in list(self.stored_entries(name).items()):
                    if self.expired(stored):
                        self.remove_entry(name, entry)

    def earliest_expiry(self) -> int | None:
        """When the current key's first TTL'd value expires (``None``: it holds none)."""
        return min((stored.expires_ms for name in self.variables if self.ttls[name]
                    for stored in self.stored_entries(name).values()
                    if isinstance(stored, Expiring)), default=None)

    def _refused(self, call: str, why: str) -> OperatorError:
        return OperatorError(f"transform_with_state {self.operator!r}: {call}: {why}")

    def write(self, name: str, value: Any) -> None:
        """Set ``name`` in the current key's record (its timers; ``None``: unset)."""
        if value is None:
            self.changed |= self.record.pop(name, None) is not None
        else:
            self.record[name], self.changed = value, True

    def value_of(self, name: str, fields: tuple[str, ...], given: Any) -> tuple:
        """``given`` (a tuple, list or Row) as the stored tuple of Python values, checked
        against the schema's ``fields``."""
        values = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        if len(values) != len(fields):
            raise OperatorError(
                f"transform_with_state {self.operator!r}: state {name!r}: a value of "
                f"{len(values)} field(s) {values!r} for the schema's {len(fields)} {fields}")
        return tuple(to_python(value) for value in values)


class HeldValueState(ValueState):
    """pyspark's ``ValueState`` of one variable, on the handle's current key."""

    def __init__(self, handle: ProcessorHandle, name: str, ttl_ms: int | None,
                 schema: StructType | str) -> None:
        self._handle, self._name, self._ttl = handle, name, ttl_ms
        self._schema = field_names(schema)

    def exists(self) -> bool:
        return self.get() is not None

    def get(self) -> tuple | None:
        return self._handle.live(self._handle.stored_entries(self._name).get(VALUE_ENTRY))

    def update(self, newValue: tuple) -> None:
        value = self._handle.value_of(self._name, self._schema, newValue)
        self._handle.put_entry(self._name, VALUE_ENTRY, self._handle.stamped(value, self._ttl))

    def clear(self) -> None:
        if VALUE_ENTRY in self._handle.stored_entries(self._name):
            self._handle.remove_entry(self._name, VALUE_ENTRY)


class HeldListState(ListState):
    """pyspark's ``ListState``: a key's elements in position order, each an entry of the
    variable (absent when empty); with a TTL, each element expires on its own, as in Spark."""

    def __init__(self, handle: ProcessorHandle, name: str, ttl_ms: int | None,
                 schema: StructType | str) -> None:
        self._handle, self._name, self._ttl = handle, name, ttl_ms
        self._schema = field_names(schema)

    def exists(self) -> bool:
        return bool(self._held())

    def get(self) -> Iterator[tuple]:
        return iter([self._handle.live(stored) for _, stored in self._held()])

    def put(self, newState: list[tuple]) -> None:
        new, old = self._checked(newState), self._held()
        # without a TTL, elements kept at the list's tail stay where they are (every element
        # put with a TTL is stamped anew, so all are written)
        dropped = _dropped_head(old, new) if self._ttl is None else len(old)
        for position, _ in old[:dropped]:
            self._handle.remove_entry(self._name, str(position))
        self._add(new[len(old) - dropped:])

    def appendValue(self, newState: tuple) -> None:
        self.appendList([newState])

    def appendList(self, newState: list[tuple]) -> None:
        self._add(self._checked(newState))

    def clear(self) -> None:
        for entry in list(self._handle.stored_entries(self._name)):
            self._handle.remove_entry(self._name, entry)

    def _add(self, values: list[Any]) -> None:
        """``values`` (as stored) after the list's last position (expired elements' too)."""
        last = max(map(int, self._handle.stored_entries(self._name)), default=-1)
        for position, stored in enumerate(values, last + 1):
            self._handle.put_entry(self._name, str(position), stored)

    def _held(self) -> list[tuple[int, Any]]:
        """The positions and stored elements not expired, in position order."""
        held = sorted((int(entry), stored)
                      for entry, stored in self._handle.stored_entries(self._name).items())
        return [(position, stored) for position, stored in held if not self._handle.expired(stored)]

    def _checked(self, values: list[tuple]) -> list[Any]:
        return [self._handle.stamped(self._handle.value_of(self._name, self._schema, value),
                                     self._ttl) for value in values]


class HeldMapState(MapState):
    """pyspark's ``MapState``: a key's user key tuples to value tuples, an entry of the
    variable each (keyed by the user key's JSON text), iterated in user key order; with a TTL,
    each entry expires on its own, as in Spark."""

    def __init__(self, handle: ProcessorHandle, name: str, ttl_ms: int | None,
                 key_schema: StructType | str, value_schema: StructType | str) -> None:
        self._handle, self._name, self._ttl = handle, name, ttl_ms
        self._key_schema, self._value_schema = field_names(key_schema), field_names(value_schema)

    def _entries(self) -> list[tuple[tuple, Any]]:
        """The user keys and stored values not expired, in user key order."""
        held = [(user_key(entry), stored)
                for entry, stored in self._handle.stored_entries(self._name).items()
                if not self._handle.expired(stored)]
        try:
            return sorted(held, key=lambda pair: pair[0])
        except TypeError:  # user keys of types that do not compare: by their text
            return sorted(held, key=lambda pair: _entry_of(pair[0]))

    def _stored(self, key: tuple) -> Any:
        stored = self._handle.stored_entries(self._name).get(_entry_of(self._key(key)))
        return None if stored is None or self._handle.expired(stored) else stored

    def exists(self) -> bool:
        return bool(self._entries())

    def getValue(self, key: tuple) -> tuple | None:
        return self._handle.live(self._stored(key))

    def containsKey(self, key: tuple) -> bool:
        return self._stored(key) is not None

    def updateValue(self, key: tuple, value: tuple) -> None:
        checked = self._handle.value_of(self._name, self._value_schema, value)
        self._handle.put_entry(self._name, _entry_of(self._key(key)),
                               self._handle.stamped(checked, self._ttl))

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter([(key, self._handle.live(value)) for key, value in self._entries()])

    def keys(self) -> Iterator[tuple]:
        return iter([key for key, _ in self._entries()])

    def values(self) -> Iterator[tuple]:
        return iter([self._handle.live(value) for _, value in self._entries()])

    def removeKey(self, key: tuple) -> None:
        entry = _entry_of(self._key(key))
        if entry in self._handle.stored_entries(self._name):
            self._handle.remove_entry(self._name, entry)

    def clear(self) -> None:
        for entry in list(self._handle.stored_entries(self._name)):
            self._handle.remove_entry(self._name, entry)

    def _key(self, key: tuple) -> tuple:
        return self._handle.value_of(self._name, self._key_schema, key)


#: a value variable's one entry
VALUE_ENTRY = ""

_PICKLED = codec_named("pickle")




def _entry_of(user_key: tuple) -> str:
    """A map entry's identity: its user key's JSON text, or (for values JSON does not hold,
    such as timestamps) ``~`` and its pickle."""
    try:
        return encode_key(user_key)
    except (TypeError, ValueError):
        return "~" + _PICKLED.encode(user_key)


def user_key(entry: str) -> tuple:
    """The user key whose entry is ``entry`` (:func:`_entry_of`'s inverse)."""
    if entry.startswith("~"):
        return _PICKLED.decode(entry[1:])
    decoded = json.loads(entry)
    return tuple(decoded) if isinstance(decoded, list) else (decoded,)


def _dropped_head(old: list[tuple[int, Any]], new: list[Any]) -> int:
    """How many of the ``old`` elements (positions and values) ``new`` drops from the head
    while keeping the rest as its own head: ``len(old)`` when it keeps none.

    >>> _dropped_head([(0, ("a",)), (1, ("b",)), (2, ("c",))], [("b",), ("c",), ("d",)])
    1
    >>> _dropped_head([(0, ("a",))], [("b",)]), _dropped_head([], [("b",)])
    (1, 0)
    """
    values = [stored for _, stored in old]
    for dropped in range(len(values)):
        kept = values[dropped:]
        if kept[0] == (new[0] if new else None) and new[:len(kept)] == kept:
            return dropped
    return len(values)
