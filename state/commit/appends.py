"""How a checkpoint's changed state (:mod:`state.contract.changes`) is appended to ``_state``
with its record, in one commit with the checkpoint's transaction: by this process through
delta-rs where it can, else by Spark; and the files executors write for a checkpoint to
commit (:func:`write_state_files`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import delta_io
from ..contract.changes import ChangedState, SparkStateRows, StateRows, WrittenState
from ..contract.keygroups import key_groups
from ..contract.schema import (
    NEW_STATE_TABLE,
    STATE_ARROW,
    STATE_FILE_SCHEMA,
    STATE_FILES,
    STATE_SCHEMA,
    STATE_TABLE_PROPERTIES,
)
from ..contract.types import KEY_PREFIX, VALUE_PREFIX, key_columns, value_columns
from ..errors import CorruptStateError
from ..faults import fault_point
from ..lake import direct, tables
from ..lake.direct import Outcome
from ..layout import PipelineLayout
from .record import Checkpoint


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


def append(changed: ChangedState, commit: StateCommit) -> Outcome | None:
    """Append ``changed`` and ``commit.record`` to ``_state`` in one commit with
    ``commit.txn``; ``None``: Spark committed, and whether the commit is ours is read back
    from the log."""
    if isinstance(changed, StateRows):
        return _append_typed(changed, commit) if changed.tables else _append_rows(changed, commit)
    if isinstance(changed, SparkStateRows):
        frame = changed.frame
        commit.by_spark(
            frame.withColumn("checkpoint_id", F.lit(commit.checkpoint.checkpoint_id))
            .select(*STATE_SCHEMA.names, *key_columns(frame.columns), *value_columns(frame.columns))
            .unionByName(tables.to_frame(commit.spark, commit.record, STATE_SCHEMA),
                         allowMissingColumns=True))
        return None
    return _append_files(changed, commit)


def _append_rows(changed: StateRows, commit: StateCommit) -> Outcome | None:
    rows = _with_record(changed, commit)
    # the table may have typed states' columns these rows do not use: null in them
    done = direct.append(rows, commit.path, txn=commit.txn, user_metadata=commit.stamp,
                         create=NEW_STATE_TABLE, fill_missing=True, layout=STATE_FILES)
    if done is None:
        commit.by_spark(tables.to_frame(commit.spark, rows, STATE_SCHEMA))
    return done


def _append_typed(changed: StateRows, commit: StateCommit) -> Outcome | None:
    """The rows, typed ones among them, in one append: the table gets the typed columns it
    lacks first, in a commit of their own that changes no row (so this checkpoint is still one
    blind append, and a crash in between leaves only empty columns)."""
    untyped = pa.Table.from_pandas(_with_record(changed, commit)[STATE_SCHEMA.names],
                                   schema=STATE_ARROW, preserve_index=False)
    stamped = [typed.append_column("checkpoint_id", pa.array(
        [commit.checkpoint.checkpoint_id] * typed.num_rows, pa.int64())) for typed in changed.tables]
    rows = pa.concat_tables([untyped, *stamped], promote_options="default")
    done = None
    if widen_state_table(commit.path, [field for typed in changed.tables for field in typed.schema
                                       if field.name.startswith((KEY_PREFIX, VALUE_PREFIX))]):
        fault_point("state_columns_added")
        done = direct.append(rows, commit.path, txn=commit.txn, user_metadata=commit.stamp,
                             fill_missing=True, layout=STATE_FILES)
    if done is None:
        commit.by_spark(commit.spark.createDataFrame(rows))
    return done


def _with_record(changed: StateRows, commit: StateCommit) -> pd.DataFrame:
    state_rows = changed.rows
    if len(state_rows):
        state_rows = state_rows.assign(key_group=_key_groups(state_rows, commit.checkpoint.key_groups))
    rows = (pd.concat([state_rows, commit.record], ignore_index=True) if len(state_rows)
            else commit.record.copy())
    rows["checkpoint_id"] = commit.checkpoint.checkpoint_id  # key_group: Int32 in both parts
    typed = [*key_columns(rows.columns), *value_columns(rows.columns)]
    return rows[[*STATE_SCHEMA.names, *typed]]


def _append_files(changed: WrittenState, commit: StateCommit) -> Outcome:
    """Executors' files, and a file of the record, committed together through delta-rs."""
    checkpoint_id = commit.checkpoint.checkpoint_id
    if changed.checkpoint_id != checkpoint_id:  # a bug, never the user's
        raise CorruptStateError(
            f"state files written for checkpoint {changed.checkpoint_id} were about to be "
            f"committed by checkpoint {checkpoint_id}; nothing was committed")
    record = write_state_files(commit.path, commit.record, checkpoint_id)
    committed = delta_io.commit_files(commit.path, [*changed.actions, *record], STATE_FILE_SCHEMA,
                                      txn=commit.txn, user_metadata=commit.stamp, lacking=True)
    return Outcome.COMMITTED if committed else Outcome.SKIPPED



def widen_state_table(path: str, fields: list[pa.Field]) -> bool:
    """Whether the ``_state`` table at ``path`` exists with ``fields`` (typed states' columns)
    among its columns, made or added here in commits that change no state (``False``: delta-rs
    does not serve the path; Spark's append adds them). Before the first checkpoint of a typed
    state, so that checkpoint is one append of rows (or of files tasks wrote)."""
    creation = NEW_STATE_TABLE.creation(pd.DataFrame())
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
    with ``_state``'s columns and its own, ``key`` and ``value`` null (an entry state's: theirs)."""
    actions = []
    for rows in typed:
        if not rows.num_rows:
            continue
        nulls = pa.nulls(rows.num_rows, pa.string())
        own = [name for name in rows.column_names if name.startswith((KEY_PREFIX, VALUE_PREFIX))]
        files_rows = pa.table({  # an entry state's rows keep their key and value texts
            "key": rows["key"] if "key" in rows.column_names else nulls,
            "value": rows["value"] if "value" in rows.column_names else nulls, "deleted": rows["deleted"],
            "checkpoint_id": pa.array([checkpoint_id] * rows.num_rows, pa.int64()),
            "key_group": rows["key_group"].cast(pa.int32()), **{name: rows[name] for name in own}})
        actions.append(_state_file(path, files_rows, rows["operator"][0].as_py()))
    return actions
