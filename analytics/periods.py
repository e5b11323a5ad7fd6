"""Timer-driven publishing: an analytic registered with ``every="1s"`` pushes once per period
what changed in it, merged (the latest row per key, the keys deleted in it), and nothing in a
period without change.

The merge happens on the state table's change rows, before the analytic's ``delta`` runs: so
``delta`` runs once per period per subscription, and sees each key's change from how it stood
before the period to how it stands at its end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ops import BATCH_COLUMN, CHANGE_COLUMN

from .errors import AnalyticsError, quoted

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: The shortest period: the server polls changelogs every few tens of milliseconds anyway.
MIN_EVERY_SECONDS = 0.05


def parse_every(analytic: str, every: str | float | None) -> float | None:
    """``every`` in seconds (``None``: publish on every batch). Takes ``"500ms"``, ``"1s"``,
    ``"2m"``, ``"1h"`` or a number of seconds, at least 50 ms.

    >>> parse_every("cpu", "1.5s"), parse_every("cpu", "250ms"), parse_every("cpu", None)
    (1.5, 0.25, None)
    >>> parse_every("cpu", "soon")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    analytics.errors.AnalyticsError: analytic 'cpu': every='soon' is not a period; use e.g. ...
    """
    if every is None:
        return None
    seconds: float | None = None
    if isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    elif isinstance(every, str) and (match := _DURATION.match(every)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds is None or not math.isfinite(seconds) or seconds < MIN_EVERY_SECONDS:
        raise AnalyticsError(f"analytic {analytic!r}: every={quoted(every)} is not a period; use "
                             f'e.g. "500ms", "1s", "2m", "1h" or a number of seconds (at least '
                             f"{MIN_EVERY_SECONDS})")
    return seconds


def merge_changes(batches: list[tuple[int, pd.DataFrame]], keys: tuple[str, ...]) -> pd.DataFrame:
    """One period's change rows (each batch's, in batch order) as one change per key: its last
    row, marked ``insert`` (absent before the period), ``update`` or ``delete`` (absent after);
    a key inserted and deleted within the period is left out.

    >>> rows = lambda *r: pd.DataFrame(r, columns=["sym", "cpu", "_change", "_batch_id"])
    >>> merge_changes([(1, rows(("a", 1.0, "insert", 1), ("b", 2.0, "update", 1))),
    ...                (2, rows(("a", 3.0, "update", 2), ("b", None, "delete", 2)))], ("sym",))
      sym  cpu _change  _batch_id
    0   a  3.0  insert          2
    1   b  NaN  delete          2
    """
    frames = [frame for _, frame in batches if len(frame)]
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    first = rows.drop_duplicates(list(keys), keep="first").set_index(list(keys))[CHANGE_COLUMN]
    last = rows.drop_duplicates(list(keys), keep="last")
    existed = last.set_index(list(keys)).index.map(first).to_numpy() != "insert"
    exists = (last[CHANGE_COLUMN] != "delete").to_numpy()
    merged = last.assign(**{CHANGE_COLUMN: [
        "update" if before and after else "insert" if after else "delete"
        for before, after in zip(existed, exists)]})
    return merged[existed | exists].reset_index(drop=True)


@dataclass
class PeriodBuffer:
    """The change rows of one target that timer subscriptions of one period have not been sent
    yet, and when the period next ends (on the manager's clock)."""

    every: float
    due: float
    batches: list[tuple[int, pd.DataFrame]] = field(default_factory=list)

    def add(self, batch: int, changes: pd.DataFrame) -> None:
        self.batches.append((batch, changes))

    def first(self) -> int | None:
        """The oldest batch held (``None`` when empty)."""
        return self.batches[0][0] if self.batches else None

    def after(self, floor: int) -> list[tuple[int, pd.DataFrame]]:
        """The batches held that came after batch ``floor``."""
        return [(b, rows) for b, rows in self.batches if b > floor]

    def tick(self, now: float) -> bool:
        """Whether a period ended at ``now``; moves ``due`` past ``now`` (periods a slow poll
        skipped are not made up: their changes go out in this one push)."""
        if now < self.due:
            return False
        self.due += self.every * (1 + math.floor((now - self.due) / self.every))
        return True

    def drop_through(self, batch: int) -> None:
        """Forget the batches up to ``batch`` (every subscription has had them)."""
        self.batches = [(b, rows) for b, rows in self.batches if b > batch]


class Periods:
    """A manager's period buffers: one per target and period of its timer analytics, each
    first due a period after it opened (on ``clock``, seconds)."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._buffers: dict[tuple[str, float], PeriodBuffer] = {}

    def open(self, target: str, every: float) -> PeriodBuffer:
        """The buffer of ``target``'s timer analytics of period ``every``, opened if need be."""
        key = (target, every)
        if key not in self._buffers:
            self._buffers[key] = PeriodBuffer(every, self._clock() + every)
        return self._buffers[key]

    def of(self, target: str) -> list[PeriodBuffer]:
        """``target``'s buffers, in the order they opened."""
        return [buffer for (name, _), buffer in self._buffers.items() if name == target]

    def close(self, target: str) -> None:
        """Drop ``target``'s buffers and what they hold."""
        for key in [k for k in self._buffers if k[0] == target]:
            del self._buffers[key]


def last_batch(batches: list[tuple[int, pd.DataFrame]]) -> int:
    """The newest batch of a period's (non-empty) list."""
    return max(b for b, _ in batches)


__all__ = ["BATCH_COLUMN", "MIN_EVERY_SECONDS", "PeriodBuffer", "Periods", "last_batch", "merge_changes",
           "parse_every"]
