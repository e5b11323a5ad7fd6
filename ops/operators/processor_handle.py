"""What a Spark ``StatefulProcessor`` is handed here: a :class:`ProcessorHandle` (pyspark's
``StatefulProcessorHandle``) whose ``ValueState``, ``ListState`` and ``MapState`` are
pyspark's own classes, answered from the key's record in the operator's managed state.

A processor declares its variables once per batch, in ``init``; the operator then turns the
handle to each key in turn (:meth:`ProcessorHandle.turn_to`), so a variable always reads and
writes the key whose rows are being handled, as Spark's do. A key's record maps each variable's
name to its value: a tuple for a value, a list of tuples for a list, a dict of tuples for a map.
A variable declared with ``ttlDurationMs`` (processing-time mode, as in Spark) stores each value,
list element and map entry as an :class:`Expiring` stamped with the batch's time plus the TTL at
its write: from the first batch at or after that time it reads as absent, and it leaves the
record when the key is next written or its earliest expiry wakes it (:meth:`ProcessorHandle.
drop_expired`).

>>> handle = ProcessorHandle("counts")
>>> count = handle.getValueState("count", "n long")
>>> handle.turn_to({})
>>> count.exists(), count.update((3,)), count.get(), handle.record
(False, None, (3,), {'count': (3,)})
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.stateful_processor import (
    ListState,
    MapState,
    StatefulProcessorHandle,
    ValueState,
)
from pyspark.sql.types import StructType

from ..errors import OperatorError
from .aggregates import to_python
from .processor_schema import field_names

Record = dict[str, Any]

#: where a key's record keeps its timers (sorted epoch ms); no variable's name starts with ``__``
TIMERS = "__timers__"


@dataclass(frozen=True)
class Expiring:
    """A value of a variable with a TTL and the processing time it expires at (epoch ms)."""

    value: Any
    expires_ms: int


class ProcessorHandle(StatefulProcessorHandle):
    """pyspark's handle, over the record of the key being handled. Variables are declared in
    ``init`` only (as Spark requires); a second declaration of a name must be of the same kind."""

    def __init__(self, operator: str, time_mode: str = "none", now: int | None = None) -> None:
        # no API client: nothing goes over a socket
        self.operator = operator
        self._time_mode = time_mode
        self.now = now  # the batch's processing time, which TTLs count from
        self.has_ttl = False  # a variable was declared with one
        self.record: Record = {}
        self.changed = False
        self._kinds: dict[str, str] = {}
        self._declaring = True
        self.deleted: list[str] = []  # deleteIfExists in init: dropped from every key's record

    def turn_to(self, record: Record) -> None:
        """From now on the variables read and write ``record`` (a key's, or ``{}`` for a key
        holding nothing); declaring is over."""
        self._declaring = False
        # a copy: the store's own value changes only when the operator sets the new record
        self.record, self.changed = dict(record), False

    def getValueState(self, stateName: str, schema: StructType | str,
                      ttlDurationMs: int | None = None) -> ValueState:
        return HeldValueState(self, self._declared(stateName, "value", ttlDurationMs),
                              ttlDurationMs, schema)

    def getListState(self, stateName: str, schema: StructType | str,
                     ttlDurationMs: int | None = None) -> ListState:
        return HeldListState(self, self._declared(stateName, "list", ttlDurationMs),
                             ttlDurationMs, schema)

    def getMapState(self, stateName: str, userKeySchema: StructType | str,
                    valueSchema: StructType | str, ttlDurationMs: int | None = None) -> MapState:
        name = self._declared(stateName, "map", ttlDurationMs)
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

    def _declared(self, name: str, kind: str, ttl_ms: int | None) -> str:
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

    def unexpired(self, stored: list[Any] | dict[Any, Any]) -> Any:
        """A list's elements, or a map's entries, whose TTL has not passed (as stored)."""
        if isinstance(stored, dict):
            return {key: value for key, value in stored.items() if not self.expired(value)}
        return [element for element in stored if not self.expired(element)]

    def _now(self) -> int:
        assert self.now is not None, "a TTL'd variable is read or written without a batch time"
        return self.now

    def drop_expired(self) -> None:
        """Remove from the current key's record every value, list element and map entry whose
        TTL passed (a variable left empty goes too)."""
        for name, stored in list(self.record.items()):
            if name == TIMERS:
                continue
            if isinstance(stored, (list, dict)):
                kept: Any = self.unexpired(stored)
            elif self.expired(stored):
                kept = None
            else:
                continue
            if not kept:
                self.write(name, None)
            elif len(kept) != len(stored):
                self.write(name, kept)

    def earliest_expiry(self) -> int | None:
        """When the current key's first TTL'd value expires (``None``: it holds none)."""
        stamps = [element.expires_ms for name, stored in self.record.items() if name != TIMERS
                  for element in (stored.values() if isinstance(stored, dict) else
                                  stored if isinstance(stored, list) else [stored])
                  if isinstance(element, Expiring)]
        return min(stamps, default=None)

    def _refused(self, call: str, why: str) -> OperatorError:
        return OperatorError(f"transform_with_state {self.operator!r}: {call}: {why}")

    def write(self, name: str, value: Any) -> None:
        """Set variable ``name`` of the current key (``None``: it holds nothing)."""
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
        return self._handle.live(self._handle.record.get(self._name))

    def update(self, newValue: tuple) -> None:
        value = self._handle.value_of(self._name, self._schema, newValue)
        self._handle.write(self._name, self._handle.stamped(value, self._ttl))

    def clear(self) -> None:
        self._handle.write(self._name, None)


class HeldListState(ListState):
    """pyspark's ``ListState``: a key's list of tuples (absent when empty); with a TTL, each
    element expires on its own, as in Spark."""

    def __init__(self, handle: ProcessorHandle, name: str, ttl_ms: int | None,
                 schema: StructType | str) -> None:
        self._handle, self._name, self._ttl = handle, name, ttl_ms
        self._schema = field_names(schema)

    def exists(self) -> bool:
        return bool(self._held())

    def get(self) -> Iterator[tuple]:
        return iter([self._handle.live(element) for element in self._held()])

    def put(self, newState: list[tuple]) -> None:
        self._handle.write(self._name, self._checked(newState) or None)

    def appendValue(self, newState: tuple) -> None:
        self.appendList([newState])

    def appendList(self, newState: list[tuple]) -> None:
        self._handle.write(self._name, self._held() + self._checked(newState) or None)

    def clear(self) -> None:
        self._handle.write(self._name, None)

    def _held(self) -> list[Any]:
        """The stored elements not expired (as stored)."""
        held = self._handle.record.get(self._name, [])
        if self._ttl is None and not self._handle.has_ttl:
            return list(held)
        return self._handle.unexpired(held)

    def _checked(self, values: list[tuple]) -> list[Any]:
        return [self._handle.stamped(self._handle.value_of(self._name, self._schema, value),
                                     self._ttl) for value in values]


class HeldMapState(MapState):
    """pyspark's ``MapState``: a key's dict of user key tuples to value tuples; with a TTL,
    each entry expires on its own, as in Spark."""

    def __init__(self, handle: ProcessorHandle, name: str, ttl_ms: int | None,
                 key_schema: StructType | str, value_schema: StructType | str) -> None:
        self._handle, self._name, self._ttl = handle, name, ttl_ms
        self._key_schema, self._value_schema = field_names(key_schema), field_names(value_schema)

    def _entries(self) -> dict[tuple, Any]:
        """The stored entries not expired (values as stored)."""
        held = self._handle.record.get(self._name, {})
        if self._ttl is None and not self._handle.has_ttl:
            return held
        return self._handle.unexpired(held)

    def exists(self) -> bool:
        return bool(self._entries())

    def getValue(self, key: tuple) -> tuple | None:
        return self._handle.live(self._entries().get(self._key(key)))

    def containsKey(self, key: tuple) -> bool:
        return self._key(key) in self._entries()

    def updateValue(self, key: tuple, value: tuple) -> None:
        entries = dict(self._entries())
        checked = self._handle.value_of(self._name, self._value_schema, value)
        entries[self._key(key)] = self._handle.stamped(checked, self._ttl)
        self._handle.write(self._name, entries)

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter([(key, self._handle.live(value)) for key, value in self._entries().items()])

    def keys(self) -> Iterator[tuple]:
        return iter(list(self._entries()))

    def values(self) -> Iterator[tuple]:
        return iter([self._handle.live(value) for value in self._entries().values()])

    def removeKey(self, key: tuple) -> None:
        entries = dict(self._entries())
        if entries.pop(self._key(key), None) is not None:
            self._handle.write(self._name, entries or None)

    def clear(self) -> None:
        self._handle.write(self._name, None)

    def _key(self, key: tuple) -> tuple:
        return self._handle.value_of(self._name, self._key_schema, key)
