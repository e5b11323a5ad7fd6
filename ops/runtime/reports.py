"""What a run reports: per batch and for the whole run (logs, the Dagster UI, benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did. ``keys``: the distinct keys its keyed operators saw (the most
    any one keying saw: a group-by's groups, a keyed map's stream keys; 0 without keyed
    state). ``seconds`` runs from its start until its output was written (the checkpoint after
    it commits while the next batch runs)."""

    batch_id: int
    rows_in: int
    rows_out: int
    dead_letters: int
    keys: int
    seconds: float
    replayed: bool
    mode: str = "driver"  # where its operators ran: driver or distributed

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0


def distinct_keys(frame: pd.DataFrame, columns: tuple[str, ...]) -> int:
    """Distinct values of ``columns`` in ``frame`` (0 without them: the operator says why).

    >>> distinct_keys(pd.DataFrame({"k": [1, 1, 2]}), ("k",))
    2
    """
    if not columns or not set(columns) <= set(frame.columns):
        return 0
    if len(columns) == 1:
        return int(frame[columns[0]].nunique())
    return len(frame[list(columns)].drop_duplicates())


@dataclass
class RunReport:
    """What a run did, for logs and the Dagster UI. ``checkpoint_seconds``: how long each
    checkpoint's commit took, in order."""

    pipeline: str
    batches: list[BatchReport] = field(default_factory=list)
    checkpoint_id: int | None = None
    last_batch_id: int | None = None
    seconds: float = 0.0
    checkpoint_seconds: list[float] = field(default_factory=list)

    @property
    def rows_in(self) -> int:
        return sum(b.rows_in for b in self.batches)

    @property
    def rows_out(self) -> int:
        return sum(b.rows_out for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def keys_touched(self) -> int:
        return sum(b.keys for b in self.batches)
