"""Timers: per-key deadlines kept as managed state, so they are checkpointed, restored and rescaled
with their key's group like any state row.

An operator's timers live under their own state name (:func:`timer_state`): one row per key,
whose value is the deadline in epoch milliseconds (processing time or event time, as the
operator declares). The same table holds the operator's watermark (event time) under
:data:`WATERMARK`. :class:`Timers` reads them through an :class:`OperatorState` and keeps a heap
of deadlines, so finding the due ones costs what fires, not what is held.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from ..contract.codecs import encode_key

if TYPE_CHECKING:  # the store hands out Timers: a type here, not an import
    from .store import OperatorState

PROCESSING, EVENT = "processing", "event"
WATERMARK = "__watermark__"  # the timer table's entry for the operator's watermark (event time)


def timer_state(operator: str) -> str:
    """The state name an operator's timers are kept under."""
    return f"{operator}__timers"


def expiry_state(operator: str) -> str:
    """The state name an operator's state TTL deadlines are kept under."""
    return f"{operator}__expiry"


class Timers:
    """At most one deadline per key, over ``state`` (see the module docstring).

    The first :meth:`due` or :meth:`earliest` of a run reads every deadline the operator holds
    (on an executor: those handed in with the task's keys) and keeps them in a heap; later
    changes go to both the state and the heap.

    >>> from state import StateStore
    >>> import pandas as pd
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> timers = Timers(store.operator("t"))
    >>> timers.set("a", 30); timers.set("b", 10); timers.set("c", 20); timers.clear("c")
    >>> timers.due(before=25), timers.earliest()
    ([('b', 10)], 30)
    """

    def __init__(self, state: OperatorState) -> None:
        self._state = state
        self._heap: list[tuple[int, str, Hashable]] | None = None  # (at, encoded key, key)
        self._live = 0  # deadlines held; the heap also holds stale entries, dropped as met

    def get(self, key: Hashable) -> int | None:
        """The deadline of ``key``, or ``None``."""
        return self._state.get(key)

    def set(self, key: Hashable, at: int) -> None:
        """Give ``key`` the deadline ``at`` (epoch ms), replacing the one it had."""
        self._queue()
        if self._state.get(key) is None:
            self._live += 1
        self._state.set(key, int(at))
        self._push(int(at), key)

    def clear(self, key: Hashable) -> None:
        """Remove the deadline of ``key``, if it has one (a tombstone at the next checkpoint)."""
        self.clear_many([key])

    def clear_many(self, keys: Iterable[Hashable]) -> None:
        """:meth:`clear` of each of ``keys``."""
        held = [key for key in keys if self._state.get(key) is not None]
        self._state.delete_many(held)
        if self._heap is not None:
            self._live -= len(held)

    def due(self, before: int | None) -> list[tuple[Hashable, int]]:
        """Remove and return the deadlines earlier than ``before`` (strictly), as ``(key, at)``
        in deadline order (then key order: the same on every replay); none when ``before`` is
        ``None`` (an event-time clock that has seen no event)."""
        heap = self._queue()
        fired: dict[Hashable, int] = {}
        while before is not None and heap and heap[0][0] < before:
            at, _, key = heapq.heappop(heap)
            # else stale: changed or cleared since it was pushed, or pushed twice with one deadline
            if key not in fired and self._state.get(key) == at:
                fired[key] = at
        self.clear_many(fired)
        return list(fired.items())

    def earliest(self) -> int | None:
        """The earliest deadline held, or ``None``."""
        heap = self._queue()
        while heap and self._state.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    @property
    def watermark(self) -> int | None:
        """The operator's watermark (event time, epoch ms), ``None`` before any event."""
        return self._state.get(WATERMARK)

    def advance(self, watermark: int | None) -> None:
        """Move the watermark forward to ``watermark`` (never back)."""
        held = self.watermark
        if watermark is not None and (held is None or watermark > held):
            self._state.set(WATERMARK, int(watermark))

    def _queue(self) -> list[tuple[int, str, Hashable]]:
        if self._heap is None:
            held = [(self._state.get(key), key) for key in self._state.held_keys()
                    if key != WATERMARK]
            self._heap = [(at, encode_key(key), key) for at, key in held if at is not None]
            heapq.heapify(self._heap)
            self._live = len(self._heap)
        return self._heap

    def _push(self, at: int, key: Hashable) -> None:
        heap = self._queue()
        heapq.heappush(heap, (at, encode_key(key), key))
        if len(heap) > 2 * self._live + 64:  # mostly stale: rebuild from the live deadlines
            self._heap = None
            self._queue()
