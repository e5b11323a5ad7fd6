"""The checkpoint log: the one commit point of the protocol.

A checkpoint is one Delta commit to the pipeline's ``_state`` table holding the state rows that
changed since the previous checkpoint plus one row with ``operator='__checkpoint__'`` whose value
is the :class:`Checkpoint` record (source offsets, tracked variables, hook markers).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import delta_io
from ..contract.changes import ChangedState, StateRows
from ..contract.schema import CHECKPOINT_OPERATOR
from ..errors import CheckpointConflict, CorruptStateError
from ..faults import fault_point
from ..lake import tables
from ..lake.direct import Outcome
from ..layout import PipelineLayout
from .appends import StateCommit, append
from .record import Checkpoint

_RECORDS = ("operator", CHECKPOINT_OPERATOR)  # the partition of the checkpoint records


class CheckpointLog:
    """Reads and commits the checkpoints of one pipeline."""

    def __init__(self, spark: SparkSession, layout: PipelineLayout):
        self._spark = spark
        self._layout = layout

    def records(self) -> DataFrame:
        """All checkpoint rows, as a Spark DataFrame of ``checkpoint_id, value`` (empty before
        the first checkpoint, whose commit creates the table)."""
        if not tables.exists(self._spark, self._layout.state):
            return self._spark.createDataFrame([], "checkpoint_id long, value string")
        return (tables.read(self._spark, self._layout.state)
                .where(F.col("operator") == CHECKPOINT_OPERATOR)
                .select("checkpoint_id", "value"))

    def latest(self) -> Checkpoint | None:
        """The newest committed checkpoint, or ``None`` for a pipeline that never checkpointed.
        Where delta-rs reads ``_state``, only the file of the newest record is read (by the
        statistics of ``checkpoint_id``), without Spark: a run starts with this."""
        if not tables.exists(self._spark, self._layout.state):
            return None
        rows = delta_io.newest_rows(self._layout.state, "checkpoint_id", _RECORDS, ["value"])
        if rows is not None and rows.num_rows:  # a checkpoint id has one record
            return Checkpoint.from_json(rows["value"][0].as_py())
        row = self.records().orderBy(F.col("checkpoint_id").desc()).limit(1).collect()
        return Checkpoint.from_json(row[0]["value"]) if row else None

    def ids(self) -> list[int]:
        """The id of every checkpoint record, as often as it is recorded (once, unless the table
        is broken): only that column of the records' files by delta-rs where it serves
        ``_state``, else Spark."""
        rows = delta_io.rows_at_least(self._layout.state, "checkpoint_id", 0, _RECORDS,
                                      ["checkpoint_id"])
        if rows is not None:
            return [int(found) for found in rows["checkpoint_id"].to_pylist()]
        return [row[0] for row in self.records().select("checkpoint_id").collect()]

    def owners(self) -> set[tuple[int, str]]:
        """``(checkpoint id, run id)`` of every committed checkpoint: the rows a run may leave
        in a global table are those of these pairs (read like :meth:`ids`)."""
        if not tables.exists(self._spark, self._layout.state):
            return set()
        rows = delta_io.rows_at_least(self._layout.state, "checkpoint_id", 0, _RECORDS, ["value"])
        texts = (rows["value"].to_pylist() if rows is not None
                 else [row["value"] for row in self.records().select("value").collect()])
        return {(record.checkpoint_id, record.run_id)
                for record in map(Checkpoint.from_json, texts)}

    def lineage(self, latest: Checkpoint) -> list[int]:
        """Ids of ``latest`` and its predecessors, newest first: the checkpoints whose sink
        output is still there (a reset abandons those after the one it went back to)."""
        records = {row["checkpoint_id"]: Checkpoint.from_json(row["value"])
                   for row in self.records().collect()}
        ids: list[int] = []
        current: Checkpoint | None = latest
        while current is not None:
            ids.append(current.checkpoint_id)
            current = records.get(current.predecessor) if current.predecessor else None
        return ids

    def get(self, checkpoint_id: int) -> Checkpoint | None:
        """Checkpoint ``checkpoint_id`` if it is retained."""
        rows = self.records().where(F.col("checkpoint_id") == checkpoint_id).collect()
        if len(rows) > 1:
            raise CorruptStateError(
                f"{self._layout.state} holds {len(rows)} records for checkpoint {checkpoint_id}")
        return Checkpoint.from_json(rows[0]["value"]) if rows else None

    def commit(self, checkpoint: Checkpoint, state_rows: pd.DataFrame) -> None:
        """Append ``state_rows`` (``operator, key, value, deleted``) and the checkpoint record
        in one Delta commit: :meth:`commit_changes` of :class:`StateRows`."""
        if not isinstance(state_rows, pd.DataFrame):  # a Spark DataFrame: SparkStateRows
            raise TypeError(f"commit takes the changed state rows as pandas, got "
                            f"{type(state_rows).__name__}; commit_changes takes any ChangedState")
        self.commit_changes(checkpoint, StateRows(state_rows))

    def commit_changes(self, checkpoint: Checkpoint, changed: ChangedState) -> None:
        """Append ``changed`` and the checkpoint record in one Delta commit.

        1. The checkpoint's record row joins the changed state rows, each with its key group.
        2. They are appended with Delta's idempotent-transaction id ``(pipeline/checkpoint,
           id)``: a second writer of the same checkpoint id is skipped by Delta, never
           duplicated.
        3. The commit is verified ours (its metadata is in the log; else the record is read
           back): if another run committed this checkpoint id, this run must stop.

        >>> import tempfile
        >>> from state import WrittenState, key_groups, new_checkpoint, next_checkpoint_id, write_state_files
        >>> from state.read.lookup import stored_values
        >>> layout = PipelineLayout(tempfile.mkdtemp(), "demo")
        >>> log = CheckpointLog(spark, layout)
        >>> def after(previous):
        ...     return new_checkpoint(previous, batch_id=next_checkpoint_id(previous), offsets={},
        ...                           tracked={}, markers={}, run_id="r")
        >>> rows = pd.DataFrame({"operator": ["sum"], "key": ["7"], "value": ["3"],
        ...                      "deleted": [False]})
        >>> log.commit_changes(first := after(None), StateRows(rows))  # creates the table
        >>> second = after(first)
        >>> changed = rows.assign(value="5", key_group=key_groups(rows["key"], 256))
        >>> state_file = write_state_files(layout.state, changed, second.checkpoint_id)  # a task's
        >>> log.commit_changes(second, WrittenState(second.checkpoint_id, tuple(state_file)))
        >>> stored = stored_values(layout.state, "sum", 2, ["7"], 256).rows
        >>> log.latest().checkpoint_id, stored["value"].to_pylist()
        (2, ['5'])
        """
        record = pd.DataFrame([{
            "operator": CHECKPOINT_OPERATOR, "key": "", "value": checkpoint.to_json(),
            "deleted": False, "checkpoint_id": checkpoint.checkpoint_id, "key_group": None}]
        ).astype({"key_group": "Int32"})
        # Checkpoint ids never repeat, not even across a reset, so one id space serves all epochs
        # and a reset racing a run is caught like two runs racing.
        txn = (f"{self._layout.pipeline}/checkpoint", checkpoint.checkpoint_id)
        stamp = json.dumps({"checkpoint_id": checkpoint.checkpoint_id, "run_id": checkpoint.run_id,
                            "wake_at": checkpoint.wake_at, "offsets": checkpoint.offsets})
        fault_point("before_checkpoint_commit")
        done = append(changed, StateCommit(self._spark, self._layout.state, checkpoint, record,
                                          txn, stamp))
        fault_point("after_checkpoint_commit")
        if done is Outcome.COMMITTED or (
                done is None and stamp in tables.recent_metadata(self._spark, self._layout.state)):
            return
        stored = self.get(checkpoint.checkpoint_id)  # not among recent commits: look it up
        if stored is None or stored.run_id != checkpoint.run_id:
            raise CheckpointConflict(
                f"pipeline {self._layout.pipeline!r}: checkpoint {checkpoint.checkpoint_id} was "
                f"committed by another run ({stored.run_id if stored else 'unknown'}); this run "
                f"({checkpoint.run_id}) stopped without committing. Run only one instance at a time.")


def wake_time(layout: PipelineLayout, spark: SparkSession | None = None) -> int | None:
    """The ``wake_at`` of the pipeline's latest checkpoint (``None``: no timer held), read from
    the commit log's metadata: for a local or object-store warehouse no Spark session is
    needed (sensors)."""
    stamp = _latest_stamp(layout, spark)
    return None if stamp is None else stamp.get("wake_at")


def checkpointed_offsets(layout: PipelineLayout, spark: SparkSession | None = None
                         ) -> dict[str, Any] | None:
    """The source positions of the pipeline's latest checkpoint, read like :func:`wake_time`
    (``None``: no checkpoint yet, or one from before checkpoints stamped their offsets)."""
    stamp = _latest_stamp(layout, spark)
    return None if stamp is None else stamp.get("offsets")


def _latest_stamp(layout: PipelineLayout, spark: SparkSession | None) -> dict[str, Any] | None:
    """What the latest checkpoint's commit says of it in its metadata (``None``: none found)."""
    if not delta_io.serves(layout.state) and spark is None:
        raise ValueError(f"reading {layout.state} needs a Spark session (it is not a local path "
                         "or on an object store delta-rs reaches)")
    for stamp in tables.recent_metadata(spark, layout.state):  # type: ignore[arg-type]
        fields = json.loads(stamp)
        if "checkpoint_id" in fields:  # not a compaction's or a reset's commit
            return dict(fields)
    return None


