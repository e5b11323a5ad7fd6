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
    behind: int = 0  # batches already planned after it, waiting to run (0: caught up)

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
class BatchTotals:
    """Sums over the batches a run reported."""

    batches: int = 0
    rows_in: int = 0
    rows_out: int = 0
    dead_letters: int = 0
    keys_touched: int = 0

    def add(self, batch: BatchReport) -> None:
        self.batches += 1
        self.rows_in += batch.rows_in
        self.rows_out += batch.rows_out
        self.dead_letters += batch.dead_letters
        self.keys_touched += batch.keys


@dataclass(frozen=True)
class CheckpointReport:
    """A checkpoint a run committed, with the batches it was the first to cover."""

    checkpoint_id: int
    batch_id: int
    batches: tuple[BatchReport, ...]

    @property
    def rows_in(self) -> int:
        return sum(b.rows_in for b in self.batches)

    @property
    def rows_out(self) -> int:
        return sum(b.rows_out for b in self.batches)


@dataclass
class RunReport:
    """What a run did, for logs and the Dagster UI. ``checkpoint_seconds``: how long each
    checkpoint's commit took, in order. ``batches`` lists every batch of a run that drains its
    source; a continuous run lists only those since its last checkpoint (it could run for
    months), and ``totals`` counts them all."""

    pipeline: str
    batches: list[BatchReport] = field(default_factory=list)
    checkpoint_id: int | None = None
    last_batch_id: int | None = None
    seconds: float = 0.0
    checkpoint_seconds: list[float] = field(default_factory=list)
    totals: BatchTotals = field(default_factory=BatchTotals)

    def add(self, batch: BatchReport) -> None:
        self.batches.append(batch)
        self.totals.add(batch)

    def covered_by(self, checkpoint_id: int, batch_id: int, forget: bool) -> CheckpointReport:
        """The listed batches up to ``batch_id`` as covered by checkpoint ``checkpoint_id``;
        with ``forget`` they leave the list (and the checkpoint times but the last go too)."""
        covered = tuple(b for b in self.batches if b.batch_id <= batch_id)
        if forget:
            self.batches = [b for b in self.batches if b.batch_id > batch_id]
            del self.checkpoint_seconds[:-1]
        return CheckpointReport(checkpoint_id, batch_id, covered)

    @property
    def rows_in(self) -> int:
        return self.totals.rows_in

    @property
    def rows_out(self) -> int:
        return self.totals.rows_out

    @property
    def dead_letters(self) -> int:
        return self.totals.dead_letters

    @property
    def keys_touched(self) -> int:
        return self.totals.keys_touched
