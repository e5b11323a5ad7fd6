"""The spec of issue 66 as cases: Spark ``StatefulProcessor``s (written here) with their input
batches, and what Spark's own ``transformWithStateInPandas`` / ``transformWithState`` gave for
them, batch by batch (``expected/<case>.json``, written by ``tests/tws/spark_reference.py``).

Each case is run by Spark in two queries over one checkpoint (the second a restart, as
lakestream's runs are), one input file per micro-batch. A lakestream port of the API must give
the same rows per batch (docs/plans/stateful-processor.md, step P0).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

INPUT_SCHEMA = "k string, item string, x long, ts timestamp"


def _frame(rows: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """A key's input rows as one frame (Spark hands them in chunks)."""
    return pd.concat(list(rows), ignore_index=True)


class RunningCount(StatefulProcessor):
    """A count of rows per key in a ``ValueState``: one row out per key and batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        total = (self.count.get()[0] if self.count.exists() else 0) + len(_frame(rows))
        self.count.update((total,))
        yield pd.DataFrame({"k": [key[0]], "total": [total]})

    def close(self) -> None:
        pass


class LastThree(StatefulProcessor):
    """The last three ``x`` of a key in a ``ListState``, appended one by one, then cut back
    with ``put``; a row with ``x`` < 0 clears the list."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.recent = handle.getListState("recent", "x long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        for x in _frame(rows)["x"].tolist():
            if x < 0:
                self.recent.clear()
            else:
                self.recent.appendValue((x,))
        kept = [value for (value,) in self.recent.get()][-3:]
        if kept:
            self.recent.put([(value,) for value in kept])
        yield pd.DataFrame({"k": [key[0]], "recent": [",".join(map(str, kept))],
                            "exists": [self.recent.exists()]})

    def close(self) -> None:
        pass


class ItemCounts(StatefulProcessor):
    """Rows per ``item`` of a key in a ``MapState``: ``x`` < 0 removes the item, the item
    ``"*"`` clears the map; out, the map's entries in item order."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.items = handle.getMapState("items", "item string", "n long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        for item, x in _frame(rows)[["item", "x"]].itertuples(index=False):
            if item == "*":
                self.items.clear()
            elif x < 0:
                self.items.removeKey((item,))
            else:
                held = self.items.getValue((item,)) if self.items.containsKey((item,)) else (0,)
                self.items.updateValue((item,), (held[0] + 1,))
        entries = sorted((item, n) for (item,), (n,) in self.items.iterator())
        yield pd.DataFrame({"k": [key[0]],
                            "items": [";".join(f"{item}={n}" for item, n in entries)]})

    def close(self) -> None:
        pass


class SumUntilQuiet(StatefulProcessor):
    """Event time: a key's sum of ``x`` until 5 s of event time pass without a row of it (an
    event-time timer moved with each batch), then one row of the sum and the state cleared."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.sum = handle.getValueState("sum", "total long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = _frame(rows)
        self.sum.update(((self.sum.get()[0] if self.sum.exists() else 0) + int(frame["x"].sum()),))
        for due in list(self.handle.listTimers()):
            self.handle.deleteTimer(due)
        last = int(frame["ts"].max().value // 1_000_000)
        self.handle.registerTimer(last + 5_000)
        yield from ()

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        total = self.sum.get()[0]
        self.sum.clear()
        yield pd.DataFrame({"k": [key[0]], "total": [total],
                            "fired_at": [expiredTimerInfo.getExpiryTimeInMs()]})

    def close(self) -> None:
        pass


class CountFromInitial(RunningCount):
    """:class:`RunningCount` starting from the counts of an initial state (``k``, ``n``)."""

    def handleInitialState(self, key, initialState, timerValues) -> None:
        self.count.update((int(initialState["n"].sum()),))


class RowCount(StatefulProcessor):
    """:class:`RunningCount` in the Row form (``transformWithState``): ``Row``s in and out."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        total = (self.count.get()[0] if self.count.exists() else 0) + sum(1 for _ in rows)
        self.count.update((total,))
        yield Row(k=key[0], total=total)

    def close(self) -> None:
        pass


class WindowSums(StatefulProcessor):
    """Event time: a key's sum of ``x`` per 10 s window of ``ts`` in a ``MapState`` (window
    start -> sum), one event-time timer per window at its end; when the watermark passes it,
    one row of the window (``window_end``, the output's event time) and the entry removed."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = handle.getMapState("windows", "start long", "total long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = _frame(rows)
        for x, ts in frame[["x", "ts"]].itertuples(index=False):
            start = int(pd.Timestamp(ts).value // 1_000_000) // 10_000 * 10_000
            held = self.windows.getValue((start,)) if self.windows.containsKey((start,)) else (0,)
            self.windows.updateValue((start,), (held[0] + int(x),))
            self.handle.registerTimer(start + 10_000)
        yield from ()

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        end = expiredTimerInfo.getExpiryTimeInMs()
        (total,) = self.windows.getValue((end - 10_000,))
        self.windows.removeKey((end - 10_000,))
        yield pd.DataFrame({"k": [key[0]], "window_end": [pd.Timestamp(end, unit="ms")],
                            "total": [total]})

    def close(self) -> None:
        pass


class BestWindow(StatefulProcessor):
    """Chained after :class:`WindowSums` (event time from its ``window_end``): each window's
    row with the key's best window total so far, in a ``ValueState``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.best = handle.getValueState("best", "total long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = _frame(rows).sort_values("window_end")
        best = self.best.get()[0] if self.best.exists() else None
        out = []
        for end, total in frame[["window_end", "total"]].itertuples(index=False):
            best = int(total) if best is None else max(best, int(total))
            out.append({"k": key[0], "window_end": end, "total": int(total), "best": best})
        self.best.update((best,))
        yield pd.DataFrame(out)

    def close(self) -> None:
        pass


def _rows(*batch: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    """Input rows ``(k, item, x, event second)``."""
    return [{"k": k, "item": item, "x": x, "ts": f"2026-01-01T00:00:{second:02d}Z"}
            for k, item, x, second in batch]


BATCHES = [
    _rows(("a", "p", 1, 1), ("b", "q", 2, 1), ("a", "q", 3, 2)),
    _rows(("a", "p", 4, 3), ("c", "p", 5, 4)),
    _rows(("b", "q", -1, 9), ("a", "*", 6, 10), ("a", "r", 7, 11)),
    _rows(("c", "p", 8, 20)),
    _rows(("a", "p", -2, 30), ("b", "r", 9, 31)),
]


@dataclass(frozen=True)
class Case:
    """One processor over :data:`BATCHES`: how it is called, and where the restart falls (the
    first query runs the batches before it, the second the rest, from the same checkpoint)."""

    name: str
    processor: type[StatefulProcessor]
    output_schema: str
    time_mode: str = "None"
    form: str = "pandas"            # transformWithStateInPandas, or "rows": transformWithState
    watermark: str | None = None    # a delay on ``ts`` before the grouping
    initial_state: list[dict[str, Any]] = field(default_factory=list)
    restart_after: int = 2
    #: the output's event time column (``eventTimeColumnName``)
    event_time: str | None = None
    #: a second processor (event time) over the first's output by ``k``, and its output schema
    then: tuple[type[StatefulProcessor], str] | None = None


CASES = [
    Case("running_count", RunningCount, "k string, total long"),
    Case("last_three", LastThree, "k string, recent string, exists boolean"),
    Case("item_counts", ItemCounts, "k string, items string"),
    Case("sum_until_quiet", SumUntilQuiet, "k string, total long, fired_at long",
         time_mode="EventTime", watermark="2 seconds"),
    Case("count_from_initial", CountFromInitial, "k string, total long",
         initial_state=[{"k": "a", "n": 10}, {"k": "z", "n": 5}]),
    Case("row_count", RowCount, "k string, total long", form="rows"),
    Case("best_window", WindowSums, "k string, window_end timestamp, total long",
         time_mode="EventTime", watermark="2 seconds", event_time="window_end",
         then=(BestWindow, "k string, window_end timestamp, total long, best long")),
]
