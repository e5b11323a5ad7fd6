"""Write-behind: a driver-mode batch's writes and checkpoints run in threads, in protocol order.

A batch's writes run in two writer threads while the main thread plans, reads and computes the
next batch, so Spark writes while pandas computes. The sink lane writes each batch's dead
letters and sinks, batch after batch; the commit lane commits each checkpoint once the sinks of
the batches it covers are written. So durable effects keep the protocol's order (a checkpoint
never covers a batch whose output is not written), while a batch's sinks may be written as the
checkpoint before it commits: a crash then replays that batch, whose idempotent writes add
nothing. A third thread encodes state: a batch's changes (its sinks wait for them: a value that
cannot be stored writes nothing) and a checkpoint's rows. The next batch's operators wait only
for those encodings (they change state).

What is in flight says where it is: a batch is :class:`Computed`, then its :class:`BatchWrite`
is ``WRITING``, then ``WRITTEN`` or ``FAILED``; a checkpoint is :class:`Taken`, then its
:class:`CheckpointCommit` is ``COMMITTING``, then ``COMMITTED`` or ``FAILED``.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pandas as pd

from state import Checkpoint

from .reports import BatchReport


class Status(enum.Enum):
    """Where a batch's writes or a checkpoint's commit is."""

    UNDER_WAY = "under way"  # queued or running in its lane: writing, committing
    DONE = "done"  # written, committed
    FAILED = "failed"


def _status(future: Future) -> Status:
    if not future.done():
        return Status.UNDER_WAY
    return Status.FAILED if future.exception() is not None else Status.DONE


@dataclass(frozen=True)
class Computed:
    """A batch computed but not yet written."""

    report: BatchReport  # seconds set once written
    started: float
    frame: pd.DataFrame
    rejected: pd.DataFrame
    source: str
    encoded: Future  # the state the batch changed, encoded (sinks wait: a bad value writes nothing)


@dataclass(frozen=True)
class Taken:
    """A checkpoint taken in memory (hooks called, record built), its rows being encoded."""

    checkpoint: Checkpoint
    rows: Future


@dataclass(frozen=True)
class BatchWrite:
    """A computed batch given to the sink lane."""

    output: Computed
    done: Future  # when its sinks were written (time.perf_counter)

    @property
    def status(self) -> Status:
        return _status(self.done)

    def seconds(self) -> float:
        """The batch's seconds from its start until written; raises why its writes failed."""
        return self.done.result() - self.output.started


@dataclass(frozen=True)
class CheckpointCommit:
    """A taken checkpoint given to the commit lane."""

    taken: Taken
    done: Future  # the seconds its commit took

    @property
    def status(self) -> Status:
        return _status(self.done)

    def seconds(self) -> float:
        """Waits for the commit; raises why it (or a batch's writes it covers) failed."""
        return self.done.result()


class WriteBehind:
    """The three threads, and the batches and checkpoint in flight in them.

    ``write_sinks`` writes a batch's dead letters and sinks; ``commit`` commits a checkpoint
    with its state rows. Either runs in its lane, after what it must follow."""

    def __init__(self, write_sinks: Callable[[Computed], None],
                 commit: Callable[[Checkpoint, Any], None]):
        self.write_sinks, self.commit_rows = write_sinks, commit
        self.encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-encode")
        # Two lanes, so a batch's sinks are written while the checkpoint before it commits
        self.sink_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-sinks")
        self.commit_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-commit")
        self.writes: deque[BatchWrite] = deque()  # batches not yet reported
        self.committing: CheckpointCommit | None = None  # not yet reported
        self.batch_encoding: Future | None = None  # the last batch's changed state
        self.checkpoint_encoding: Future | None = None  # the taken checkpoint's state rows

    @property
    def busy(self) -> bool:
        """Whether a batch or a checkpoint is still to be reported."""
        return self.committing is not None or bool(self.writes)

    @property
    def commit_under_way(self) -> bool:
        return self.committing is not None and self.committing.status is Status.UNDER_WAY

    def encode_batch(self, encode: Callable[[], Any]) -> Future:
        """Encode a batch's changed state in the encoder thread."""
        self.batch_encoding = self.encoder.submit(encode)
        return self.batch_encoding

    def encode_checkpoint(self, take: Callable[[], Any]) -> Future:
        """Take a checkpoint's state rows in the encoder thread."""
        self.checkpoint_encoding = self.encoder.submit(take)
        return self.checkpoint_encoding

    def take_encoded(self) -> None:
        """Before operators change state again: the last batch's changes are encoded (raising
        what its state cannot be stored as) and the taken checkpoint has its rows, so the
        store counts changes for the next one."""
        batch, self.batch_encoding = self.batch_encoding, None
        if batch is not None:
            batch.result()
        rows, self.checkpoint_encoding = self.checkpoint_encoding, None
        if rows is not None:
            rows.result()

    def write(self, output: Computed) -> None:
        """Start writing ``output``'s sinks, after the previous batch's."""
        previous = self.writes[-1].done if self.writes else None
        self.writes.append(BatchWrite(output, self.sink_lane.submit(self._write, output, previous)))

    def commit(self, taken: Taken) -> None:
        """Start committing ``taken``, once the sinks of the batches it covers are written."""
        sinks = self.writes[-1].done if self.writes else None
        self.committing = CheckpointCommit(taken, self.commit_lane.submit(self._commit, taken, sinks))

    def written(self, wait: bool = False) -> Iterator[BatchWrite]:
        """Each batch whose writes ended, in order, taken off (all of them with ``wait``)."""
        while self.writes and (wait or self.writes[0].status is not Status.UNDER_WAY):
            yield self.writes.popleft()

    def committed(self) -> CheckpointCommit | None:
        """The checkpoint given to the commit lane, taken off (``seconds`` waits for it)."""
        committing, self.committing = self.committing, None
        return committing

    def close(self) -> None:
        """The run is over: the threads stop once idle (a write under way fails or is lost:
        its batch is replayed)."""
        self.sink_lane.shutdown(wait=False)
        self.commit_lane.shutdown(wait=False)
        self.encoder.shutdown(wait=False)

    def _write(self, output: Computed, previous: Future | None) -> float:
        """Sink lane: one batch's writes, once the batch before is written; returns when they
        were done (``time.perf_counter``)."""
        if previous is not None:
            previous.result()  # it failed: so does this batch, and every checkpoint after it
        output.encoded.result()  # state that cannot be stored: nothing of the batch is written
        self.write_sinks(output)
        return time.perf_counter()

    def _commit(self, taken: Taken, sinks: Future | None) -> float:
        """Commit lane: the checkpoint, once the sinks of the batches it covers are written;
        returns the seconds it took."""
        if sinks is not None:
            sinks.result()
        started = time.perf_counter()
        self.commit_rows(taken.checkpoint, taken.rows.result())
        return time.perf_counter() - started
