"""The one contract between a run and its checkpoint: the state a batch changed, in the form
the batch left it. The runtime builds one (:meth:`~state.run.store.StateStore.take_changes`, an
executor's files, a migration's rows) and hands it to
:meth:`~state.commit.log.CheckpointLog.commit_changes`; how each form is appended is the
commit's business (:mod:`state.commit.appends`), so neither side imports the other.

>>> WrittenState(4).actions
()
>>> len(StateRows(pd.DataFrame(columns=["operator", "key", "value", "deleted"])).rows)
0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame


@dataclass(frozen=True, eq=False)  # holds a frame: compared by identity
class StateRows:
    """``operator, key, value, deleted`` as pandas: the driver's store, a migration, an
    import; ``typed``, the typed states' changes as Arrow (``operator``, their ``k__`` and
    ``v__`` columns, ``deleted``, ``key_group``); and ``entries``, the changed entries of states
    of many rows per key as Arrow (``operator``, ``key``, the state's entry column ``k__…``,
    ``value``, ``deleted``, ``key_group``: :class:`~state.run.entries.EntryState`). Appended by
    this process where delta-rs can (:mod:`state.lake.direct`), else by Spark."""

    rows: pd.DataFrame
    typed: tuple[pa.Table, ...] = ()
    entries: tuple[pa.Table, ...] = ()

    @property
    def tables(self) -> tuple[pa.Table, ...]:
        """The changes held as Arrow, typed states' and entries', each with its own columns."""
        return self.typed + self.entries


@dataclass(frozen=True, eq=False)  # holds a frame: compared by identity
class SparkStateRows:
    """``_state``'s columns but the checkpoint id, key groups included (and an entry state's
    entry column), as a Spark DataFrame: what executors changed (distributed mode). Appended
    by Spark."""

    frame: DataFrame


@dataclass(frozen=True)
class WrittenState:
    """Changed state rows already written as ``_state`` data files of checkpoint
    ``checkpoint_id`` by the processes that changed them (Spark's executors), not yet
    committed: the files' add actions (see :func:`~state.commit.appends.write_state_files`).
    That checkpoint commits them, and a file of its record, through delta-rs."""

    checkpoint_id: int
    actions: tuple[str, ...] = ()


#: What a checkpoint commits: one of the three forms
ChangedState: TypeAlias = StateRows | SparkStateRows | WrittenState
