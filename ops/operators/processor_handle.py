"""What a Spark ``StatefulProcessor`` is handed here: a :class:`ProcessorHandle` (pyspark's
``StatefulProcessorHandle``) whose ``ValueState``, ``ListState`` and ``MapState`` are
pyspark's own classes, answered from the key's record in the operator's managed state.

A processor declares its variables once per batch, in ``init``; the operator then turns the
handle to each key in turn (:meth:`ProcessorHandle.turn_to`), so a variable always reads and
writes the key whose rows are being handled, as Spark's do. A key's record maps each variable's
name to its value: a tuple for a value, a list of tuples for a list, a dict of tuples for a map.

>>> handle = ProcessorHandle("counts")
>>> count = handle.getValueState("count", "n long")
>>> handle.turn_to({})
>>> count.exists(), count.update((3,)), count.get(), handle.record
(False, None, (3,), {'count': (3,)})
"""

from __future__ import annotations

from collections.abc import Iterator
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


class ProcessorHandle(StatefulProcessorHandle):
    """pyspark's handle, over the record of the key being handled. Variables are declared in
    ``init`` only (as Spark requires); a second declaration of a name must be of the same kind."""

    def __init__(self, operator: str, timers: bool = False) -> None:
        # no API client: nothing goes over a socket
        self.operator = operator
        self._timers = timers  # time_mode is not "none"
        self.record: Record = {}
        self.changed = False
        self._kinds: dict[str, str] = {}
        self._declaring = True

    def turn_to(self, record: Record) -> None:
        """From now on the variables read and write ``record`` (a key's, or ``{}`` for a key
        holding nothing); declaring is over."""
        self._declaring = False
        # a copy: the store's own value changes only when the operator sets the new record
        self.record, self.changed = dict(record), False

    def getValueState(self, stateName: str, schema: StructType | str,
                      ttlDurationMs: int | None = None) -> ValueState:
        return HeldValueState(self, self._declared(stateName, "value", ttlDurationMs), schema)

    def getListState(self, stateName: str, schema: StructType | str,
                     ttlDurationMs: int | None = None) -> ListState:
        return HeldListState(self, self._declared(stateName, "list", ttlDurationMs), schema)

    def getMapState(self, stateName: str, userKeySchema: StructType | str,
                    valueSchema: StructType | str, ttlDurationMs: int | None = None) -> MapState:
        name = self._declared(stateName, "map", ttlDurationMs)
        return HeldMapState(self, name, userKeySchema, valueSchema)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        if not self._timers:
            raise self._refused("registerTimer", "timers need time_mode='processing_time'")
        self.write(TIMERS, tuple(sorted({*self.timers(), int(expiryTimestampMs)})))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        if not self._timers:
            raise self._refused("deleteTimer", "timers need time_mode='processing_time'")
        self.write(TIMERS, tuple(at for at in self.timers() if at != int(expiryTimestampMs)) or None)

    def listTimers(self) -> Iterator[int]:
        return iter(self.timers())

    def timers(self) -> tuple[int, ...]:
        """The current key's timers, earliest first."""
        return self.record.get(TIMERS, ())

    def deleteIfExists(self, stateName: str) -> None:
        raise self._refused("deleteIfExists", "dropping a variable of every key is not yet "
                            "supported; drop it with sp.migrate_state")

    def _declared(self, name: str, kind: str, ttl_ms: int | None) -> str:
        if name.startswith("__"):
            raise self._refused(f"get{kind.title()}State({name!r})", "names starting with '__' "
                                "are lakestream's own")
        if not self._declaring:
            raise self._refused(f"get{kind.title()}State({name!r})", "state variables are "
                                "declared in init(), before any row is handled (as in Spark)")
        if ttl_ms is not None:
            raise self._refused(f"get{kind.title()}State({name!r}, ttlDurationMs=...)",
                                "TTL per variable is not yet supported")
        if self._kinds.setdefault(name, kind) != kind:
            raise self._refused(f"get{kind.title()}State({name!r})",
                                f"{name!r} is declared as a {self._kinds[name]} state already")
        return name

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

    def __init__(self, handle: ProcessorHandle, name: str, schema: StructType | str) -> None:
        self._handle, self._name, self._schema = handle, name, field_names(schema)

    def exists(self) -> bool:
        return self._name in self._handle.record

    def get(self) -> tuple | None:
        return self._handle.record.get(self._name)

    def update(self, newValue: tuple) -> None:
        self._handle.write(self._name, self._handle.value_of(self._name, self._schema, newValue))

    def clear(self) -> None:
        self._handle.write(self._name, None)


class HeldListState(ListState):
    """pyspark's ``ListState``: a key's list of tuples (absent when empty)."""

    def __init__(self, handle: ProcessorHandle, name: str, schema: StructType | str) -> None:
        self._handle, self._name, self._schema = handle, name, field_names(schema)

    def exists(self) -> bool:
        return bool(self._handle.record.get(self._name))

    def get(self) -> Iterator[tuple]:
        return iter(list(self._handle.record.get(self._name, ())))

    def put(self, newState: list[tuple]) -> None:
        self._handle.write(self._name, self._checked(newState) or None)

    def appendValue(self, newState: tuple) -> None:
        self.appendList([newState])

    def appendList(self, newState: list[tuple]) -> None:
        held = list(self._handle.record.get(self._name, ()))
        self._handle.write(self._name, held + self._checked(newState) or None)

    def clear(self) -> None:
        self._handle.write(self._name, None)

    def _checked(self, values: list[tuple]) -> list[tuple]:
        return [self._handle.value_of(self._name, self._schema, value) for value in values]


class HeldMapState(MapState):
    """pyspark's ``MapState``: a key's dict of user key tuples to value tuples."""

    def __init__(self, handle: ProcessorHandle, name: str, key_schema: StructType | str,
                 value_schema: StructType | str) -> None:
        self._handle, self._name = handle, name
        self._key_schema, self._value_schema = field_names(key_schema), field_names(value_schema)

    def _entries(self) -> dict[tuple, tuple]:
        return self._handle.record.get(self._name, {})

    def exists(self) -> bool:
        return bool(self._entries())

    def getValue(self, key: tuple) -> tuple | None:
        return self._entries().get(self._key(key))

    def containsKey(self, key: tuple) -> bool:
        return self._key(key) in self._entries()

    def updateValue(self, key: tuple, value: tuple) -> None:
        entries = dict(self._entries())
        entries[self._key(key)] = self._handle.value_of(self._name, self._value_schema, value)
        self._handle.write(self._name, entries)

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter(list(self._entries().items()))

    def keys(self) -> Iterator[tuple]:
        return iter(list(self._entries()))

    def values(self) -> Iterator[tuple]:
        return iter(list(self._entries().values()))

    def removeKey(self, key: tuple) -> None:
        entries = dict(self._entries())
        if entries.pop(self._key(key), None) is not None:
            self._handle.write(self._name, entries or None)

    def clear(self) -> None:
        self._handle.write(self._name, None)

    def _key(self, key: tuple) -> tuple:
        return self._handle.value_of(self._name, self._key_schema, key)
