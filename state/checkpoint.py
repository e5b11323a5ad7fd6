"""Checkpoints: the one commit point of the protocol.

A checkpoint is one Delta commit to the pipeline's ``_state`` table holding the state rows that
changed since the previous checkpoint plus one row with ``operator='__checkpoint__'`` whose value
is the :class:`Checkpoint` record (source offsets, tracked variables, hook markers).
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from . import delta_io, direct, tables
from .direct import Outcome
from .errors import CheckpointConflict, CorruptStateError
from .faults import fault_point
from .keygroups import DEFAULT_KEY_GROUPS, key_groups
from .layout import PipelineLayout
from .types import KEY_PREFIX, VALUE_PREFIX, key_columns, value_columns

CHECKPOINT_OPERATOR = "__checkpoint__"
STATE_SCHEMA = StructType([
    StructField("operator", StringType(), False),
    StructField("key", StringType(), True),  # null on a typed state's rows (its k__ columns)
    StructField("value", StringType(), True),
    StructField("deleted", BooleanType(), False),
    StructField("checkpoint_id", LongType(), False),
    # null on checkpoint records, and on rows written before key groups existed (see compact)
    StructField("key_group", IntegerType(), True),
])

# File statistics only for checkpoint ids and key groups, which reads filter on. Min/max of the
# key and value strings skip nothing (a commit's keys are spread over the key space) and
# collecting them cost 0.75 s of a 1.2 s commit of 30k state rows.
STATE_TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": "checkpoint_id,key_group"}
#: A checkpoint's ``_state`` file, the driver's or a task's: rows in key-group order, 16,384 to
#: a row group, so a read of a few keys' groups skips the others' row groups by their
#: statistics, however many groups the checkpoint changed and whether or not a compaction ran
#: since (1M rows over 256 groups: 62 row groups; a read of 10 keys took 0.022 s, against 0.088
#: for one row group in a batch's order: bench/state_reads.py).
STATE_FILES = delta_io.FileLayout(sorted_by="key_group", row_group_rows=16_384)
_RECORDS = ("operator", CHECKPOINT_OPERATOR)  # the partition of the checkpoint records
_NEW_STATE_TABLE = tables.new_table(STATE_SCHEMA, ("operator",), STATE_TABLE_PROPERTIES)


#: A ``_state`` data file's columns (``operator`` is the partition, in the folder and the log).
STATE_FILE_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("deleted", pa.bool_()),
                               ("checkpoint_id", pa.int64()), ("key_group", pa.int32())])
_STATE_ARROW = pa.schema([("operator", pa.string()), *STATE_FILE_SCHEMA])  # STATE_SCHEMA's


@dataclass(frozen=True, eq=False)  # holds a frame: compared by identity
class StateCommit:
    """One checkpoint's commit to ``_state``: what every form of changed state is appended
    with (its record row, its transaction and the commit's metadata)."""

    spark: SparkSession
    path: str
    checkpoint: Checkpoint
    record: pd.DataFrame  # the checkpoint's own row, STATE_SCHEMA's columns
    txn: tuple[str, int]
    stamp: str

    def by_spark(self, rows: DataFrame) -> None:
        """``rows`` (STATE_SCHEMA's columns, the record among them) appended by Spark: the
        first checkpoint creates the table, one from before key groups gains the column."""
        tables.append(rows, self.path, txn=self.txn, partition_by=("operator",),
                      user_metadata=self.stamp, properties=STATE_TABLE_PROPERTIES,
                      merge_schema=True)


class ChangedState(ABC):
    """The state rows a checkpoint commits, in the form its batch left them: the driver's
    (:class:`StateRows`), executors' rows in Spark (:class:`SparkStateRows`), or the files
    executors wrote of them (:class:`WrittenState`)."""

    @abstractmethod
    def append(self, commit: StateCommit) -> Outcome | None:
        """Append the rows and ``commit.record`` to ``_state`` in one commit with
        ``commit.txn``; ``None``: Spark committed, and whether the commit is ours is read
        back from the log."""


@dataclass(frozen=True, eq=False)  # holds a frame: compared by identity
class StateRows(ChangedState):
    """``operator, key, value, deleted`` as pandas: the driver's store, a migration, an
    import; and ``typed``, the typed states' changes as Arrow (``operator``, their ``k__`` and
    ``v__`` columns, ``deleted``, ``key_group``). Appended by this process where delta-rs can
    (:mod:`state.direct`), else by Spark."""

    rows: pd.DataFrame
    typed: tuple[pa.Table, ...] = ()

    def append(self, commit: StateCommit) -> Outcome | None:
        if self.typed:
            return self._append_typed(commit)
        rows = self._with_record(commit)
        # the table may have typed states' columns these rows do not use: null in them
        done = direct.append(rows, commit.path, txn=commit.txn, user_metadata=commit.stamp,
                             create=_NEW_STATE_TABLE, fill_missing=True, layout=STATE_FILES)
        if done is None:
            commit.by_spark(tables.to_frame(commit.spark, rows, STATE_SCHEMA))
        return done

    def _append_typed(self, commit: StateCommit) -> Outcome | None:
        """The rows, typed ones among them, in one append: the table gets the typed columns
        it lacks first, in a commit of their own that changes no row (so this checkpoint is
        still one blind append, and a crash in between leaves only empty columns)."""
        untyped = pa.Table.from_pandas(self._with_record(commit)[STATE_SCHEMA.names],
                                       schema=_STATE_ARROW, preserve_index=False)
        stamped = [typed.append_column("checkpoint_id", pa.array(
            [commit.checkpoint.checkpoint_id] * typed.num_rows, pa.int64())) for typed in self.typed]
        rows = pa.concat_tables([untyped, *stamped], promote_options="default")
        done = None
        if widen_state_table(commit.path, [field for typed in self.typed for field in typed.schema
                                           if field.name.startswith((KEY_PREFIX, VALUE_PREFIX))]):
            fault_point("state_columns_added")
            done = direct.append(rows, commit.path, txn=commit.txn, user_metadata=commit.stamp,
                                 fill_missing=True, layout=STATE_FILES)
        if done is None:
            commit.by_spark(commit.spark.createDataFrame(rows))
        return done

    def _with_record(self, commit: StateCommit) -> pd.DataFrame:
        state_rows = self.rows
        if len(state_rows):
            state_rows = state_rows.assign(key_group=_key_groups(state_rows, commit.checkpoint.key_groups))
        rows = (pd.concat([state_rows, commit.record], ignore_index=True) if len(state_rows)
                else commit.record.copy())
        rows["checkpoint_id"] = commit.checkpoint.checkpoint_id  # key_group: Int32 in both parts
        typed = [*key_columns(rows.columns), *value_columns(rows.columns)]
        return rows[[*STATE_SCHEMA.names, *typed]]


def widen_state_table(path: str, fields: list[pa.Field]) -> bool:
    """Whether the ``_state`` table at ``path`` exists with ``fields`` (typed states' columns)
    among its columns, made or added here in commits that change no state (``False``: delta-rs
    does not serve the path; Spark's append adds them). Before the first checkpoint of a typed
    state, so that checkpoint is one append of rows (or of files tasks wrote)."""
    creation = _NEW_STATE_TABLE.creation(pd.DataFrame())
    if creation is None or not delta_io.create(path, creation):
        return False
    try:
        return not fields or delta_io.add_columns(path, fields)
    except ValueError as error:  # a column of another type: the state's type changed
        raise CorruptStateError(f"{error}: a typed state's columns are of the type it was "
                                "first stored with; nothing was committed") from error


def _key_groups(rows: pd.DataFrame, groups: int) -> pd.arrays.IntegerArray:
    """The key group of each row: hashed from its key text; a typed state's row (no key text)
    keeps the group its writer gave it, which hashed the same text."""
    texts = rows["key"]
    if texts.notna().all():
        return pd.array(key_groups(texts, groups), dtype="Int32")
    given = rows["key_group"] if "key_group" in rows else pd.Series(pd.NA, index=rows.index)
    if given[texts.isna()].isna().any():  # a bug, never the user's
        raise CorruptStateError("a typed state row came without its key group; nothing was committed")
    found = pd.array(given, dtype="Int32")
    found[texts.notna().to_numpy()] = key_groups(texts[texts.notna()], groups)
    return found


@dataclass(frozen=True, eq=False)  # holds a frame: compared by identity
class SparkStateRows(ChangedState):
    """``_state``'s columns but the checkpoint id, key groups included, as a Spark DataFrame:
    what executors changed (distributed mode). Appended by Spark."""

    frame: DataFrame

    def append(self, commit: StateCommit) -> Outcome | None:
        commit.by_spark(
            self.frame.withColumn("checkpoint_id", F.lit(commit.checkpoint.checkpoint_id))
            .select(*STATE_SCHEMA.names)
            .unionByName(tables.to_frame(commit.spark, commit.record, STATE_SCHEMA)))
        return None


@dataclass(frozen=True)
class WrittenState(ChangedState):
    """Changed state rows already written as ``_state`` data files of checkpoint
    ``checkpoint_id`` by the processes that changed them (Spark's executors), not yet
    committed: the files' add actions (see :func:`write_state_files`). That checkpoint commits
    them, and a file of its record, through delta-rs.

    >>> WrittenState(4).actions
    ()
    """

    checkpoint_id: int
    actions: tuple[str, ...] = ()

    def append(self, commit: StateCommit) -> Outcome | None:
        checkpoint_id = commit.checkpoint.checkpoint_id
        if self.checkpoint_id != checkpoint_id:  # a bug, never the user's
            raise CorruptStateError(
                f"state files written for checkpoint {self.checkpoint_id} were about to be "
                f"committed by checkpoint {checkpoint_id}; nothing was committed")
        record = write_state_files(commit.path, commit.record, checkpoint_id)
        committed = delta_io.commit_files(commit.path, [*self.actions, *record], STATE_FILE_SCHEMA,
                                          txn=commit.txn, user_metadata=commit.stamp, lacking=True)
        return Outcome.COMMITTED if committed else Outcome.SKIPPED


def takes_state_files(layout: PipelineLayout) -> bool:
    """Whether ``layout``'s ``_state`` table exists and takes files written by
    :func:`write_state_files` (a table delta-rs appends to, with today's columns: and typed
    states' columns, which these files leave null)."""
    return delta_io.takes_files(layout.state, STATE_FILE_SCHEMA, lacking=True)


def write_state_files(path: str, rows: pd.DataFrame, checkpoint_id: int) -> list[str]:
    """Write ``rows`` (``operator, key, value, deleted, key_group``: state changed by a batch
    whose checkpoint will be ``checkpoint_id``) into the ``_state`` table at ``path`` as one
    data file per operator, uncommitted; their add actions, for :class:`WrittenState`."""
    actions = []
    for operator, part in rows.groupby("operator", sort=False):
        files_rows = pa.Table.from_pandas(
            part.assign(checkpoint_id=checkpoint_id)[STATE_FILE_SCHEMA.names],
            schema=STATE_FILE_SCHEMA, preserve_index=False)
        actions.append(_state_file(path, files_rows, str(operator)))
    return actions


def _state_file(path: str, rows: pa.Table, operator: str) -> str:
    """``rows`` of ``operator`` written as a ``_state`` data file, uncommitted; its add action."""
    return delta_io.write_file(path, rows, {"operator": operator},
                               statistics=("checkpoint_id", "key_group"),
                               dictionary=(), layout=STATE_FILES)  # dictionary: a key once per file


def write_typed_state_files(path: str, typed: tuple[pa.Table, ...], checkpoint_id: int) -> list[str]:
    """:func:`write_state_files` of typed states' changed rows (``operator``, the state's
    ``k__``/``v__`` columns, ``deleted``, ``key_group``: one table per state): each a data file
    with ``_state``'s columns and its own, ``key`` and ``value`` null."""
    actions = []
    for rows in typed:
        if not rows.num_rows:
            continue
        nulls = pa.nulls(rows.num_rows, pa.string())
        own = [name for name in rows.column_names if name.startswith((KEY_PREFIX, VALUE_PREFIX))]
        files_rows = pa.table({
            "key": nulls, "value": nulls, "deleted": rows["deleted"],
            "checkpoint_id": pa.array([checkpoint_id] * rows.num_rows, pa.int64()),
            "key_group": rows["key_group"].cast(pa.int32()), **{name: rows[name] for name in own}})
        actions.append(_state_file(path, files_rows, rows["operator"][0].as_py()))
    return actions


def next_checkpoint_id(previous: Checkpoint | None) -> int:
    """The id of the checkpoint after ``previous`` (1 for a pipeline's first).

    >>> next_checkpoint_id(None)
    1
    """
    return previous.checkpoint_id + 1 if previous else 1


@dataclass(frozen=True)
class Checkpoint:
    """What a pipeline needs to resume: the last batch included and everything saved with it.

    ``epoch`` changes when an operator rewinds the pipeline (reset to an older checkpoint), so the
    idempotency keys of later writes never collide with those of the abandoned timeline.
    """

    checkpoint_id: int
    batch_id: int
    offsets: dict[str, Any] = field(default_factory=dict)
    tracked: dict[str, str] = field(default_factory=dict)
    markers: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    run_id: str = ""
    created_at: float = 0.0
    # Set by a reset to an older checkpoint until sinks hold no batch after this one again.
    reset_to_batch: int | None = None
    # The checkpoint a reset went back to: this one's predecessor in the pipeline's history.
    resumed_from: int | None = None
    # How many key groups the pipeline's keys hash into; fixed by its first checkpoint (records
    # written before key groups existed read as the default, which their keys then take).
    key_groups: int = DEFAULT_KEY_GROUPS
    # When the earliest timer held then falls due (epoch ms: the ms after its deadline, as a
    # timer fires strictly after it; now, when an event-time timer is due under the
    # watermark): a run started at or after it fires timers even with no new input.
    wake_at: int | None = None
    # What the state means: per state name, the operator keeping it, its keys, codec and value
    # shape (``ops.runtime.meaning``). ``None`` in records written before it was recorded.
    operators: dict[str, Any] | None = None
    # The migration this checkpoint made (``ops.operating.migrate``), ``None`` for a batch's.
    migration: str | None = None

    @property
    def predecessor(self) -> int | None:
        if self.resumed_from is not None:
            return self.resumed_from
        return self.checkpoint_id - 1 if self.checkpoint_id > 1 else None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """The record ``text`` holds; fields a later release added are left out, so a pipeline
        can go back to this release after running a newer one."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in json.loads(text).items() if name in known})


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
        >>> from state.lookup import stored_values
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
        done = changed.append(StateCommit(self._spark, self._layout.state, checkpoint, record,
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


def new_checkpoint(previous: Checkpoint | None, *, batch_id: int, offsets: dict[str, Any],
                   tracked: dict[str, str], markers: dict[str, Any], run_id: str,
                   key_groups: int = DEFAULT_KEY_GROUPS, wake_at: int | None = None,
                   operators: dict[str, Any] | None = None) -> Checkpoint:
    """The checkpoint that follows ``previous`` (or the first one, with ``key_groups``: later
    ones keep the first one's); ``operators``: what its state means."""
    return Checkpoint(
        checkpoint_id=next_checkpoint_id(previous),
        batch_id=batch_id, offsets=offsets, tracked=tracked, markers=markers,
        epoch=previous.epoch if previous else 0, run_id=run_id, created_at=time.time(),
        key_groups=previous.key_groups if previous else key_groups, wake_at=wake_at,
        operators=operators)
