"""The stored state of a batch's keys, read from ``_state``'s Parquet files without Spark.

A run's first touch of a key reads the key's value as of the checkpoint it started from. With
Spark that was a job per batch and operator (a semi-join of the batch's keys with the
changelog, the newest row per key, back to the driver through Arrow): about 10 µs per key, so a
run of one batch over 630k keys spent 6 s reading state before its operator ran. Here the
files of the operator's partition that can hold the keys are read with pyarrow (delta-rs lists
them with their statistics), filtered to the keys and to checkpoints up to the one the run
started from, and the newest row per key is picked with NumPy: Parquet's speed.

Which files are read: those of the operator's partition whose ``checkpoint_id`` statistics
start at or before ``as_of``, and, for a small set of keys, whose ``key_group`` range holds one
of the keys' groups. A checkpoint appends one file per operator holding every group it changed
(in distributed mode one per operator and task, each of the task's range of groups), so it is
compaction (``compact``: files of contiguous group ranges) that lets a read of a few
groups skip most of the table. Rows written before key groups existed have none; their files
are always read.

>>> import pyarrow as pa
>>> rows = pa.table({"key": ["a", "b", "a", "c"], "value": ["1", "2", "5", None],
...                  "deleted": [False, False, False, True], "checkpoint_id": [1, 1, 2, 2]})
>>> newest_per_key(rows).to_pydict()["value"]
['5', None, '2']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import delta_io, tables
from .codecs import encoded_integers
from .keygroups import key_groups

#: Up to this many keys, a read skips files by the keys' groups: hashing a key costs about
#: 0.4 µs, and a batch with more keys than a few times the groups touches nearly all of them.
GROUP_PRUNING_KEYS = 20_000

_COLUMNS = ["key", "value", "deleted", "checkpoint_id"]


def stored_values(path: str, operator: str, as_of: int, keys: pa.Array | Sequence[str] | None,
                  groups: int, within: tuple[int, int] | None = None) -> pa.Table | None:
    """``key, value`` (encoded) of each of ``keys`` (every key, when ``None``) that holds a
    value for ``operator`` as of checkpoint ``as_of`` in the ``_state`` table at ``path``,
    whose keys hash into ``groups`` key groups; ``within=(first, end)``: the keys are all of
    groups ``first <= group < end`` (an executor's bucket), so only files holding those are
    read. ``None`` when delta-rs cannot read the table (it is not on a local disk or an object
    store it reaches, or its files need more than Parquet to read): then ask Spark."""
    files = delta_io.file_statistics(path)
    if files is None:
        return None
    wanted = keys if keys is None or isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    chosen = _files_to_read(files, operator, as_of, wanted, groups, within)
    # a table from before key groups has no such column: its keys' groups are worked out here
    grouped = within is not None and "key_group" in (tables.columns(path) or ())
    columns = _COLUMNS + (["key_group"] if grouped else [])
    rows = delta_io.read_data_files(path, chosen, columns, partition=("operator", operator))
    if not chosen or rows.num_rows == 0:
        return pa.table({"key": pa.array([], pa.string()), "value": pa.array([], pa.string())})
    keep = rows["checkpoint_id"].to_numpy() <= as_of
    if within is not None:  # a file of a range of groups may hold a few groups beyond it
        keep &= _in_groups(rows, within, groups)
    latest = _newest_of_wanted(rows, wanted, keep)
    return latest.filter(pc.invert(latest["deleted"])).select(["key", "value"])


def _newest_of_wanted(rows: pa.Table, wanted: pa.Array | None, keep: np.ndarray) -> pa.Table:
    """:func:`newest_per_key` of the rows ``keep`` marks whose key is one of ``wanted``
    (any key, for ``None``)."""
    asked = None if wanted is None else encoded_integers(wanted)
    numbers = encoded_integers(rows["key"]) if wanted is None or asked is not None else None
    if numbers is not None:
        # every key an int's text (a common case): hashed as int64s, several times faster
        if asked is not None:
            keep = keep & pd.Series(numbers, copy=False).isin(asked).to_numpy()
        return _newest_where(rows, keep, numbers)
    if wanted is not None:
        keep = keep & pc.is_in(rows["key"], value_set=wanted).to_numpy()
    return newest_per_key(rows.filter(pa.array(keep)))


def _newest_where(rows: pa.Table, keep: np.ndarray, keys: np.ndarray) -> pa.Table:
    """The row of the highest ``checkpoint_id`` of each key among the rows ``keep`` marks (a
    checkpoint writes a key at most once), in no particular order; ``keys``: one number per
    row standing for its key (the int it encodes, or its dictionary code)."""
    chosen = np.flatnonzero(keep)
    if len(chosen) == 0:
        return rows.slice(0, 0)
    checkpoints = rows["checkpoint_id"].to_numpy()[chosen]
    age = checkpoints.max() - checkpoints  # 0 for the newest
    if age.max() < 2**16:  # checkpoints a run reads span few ids: a radix sort, O(rows)
        age = age.astype(np.uint16)
    newest_first = chosen[np.argsort(age, kind="stable")]
    # a key's first row is its newest: found by hashing, not sorting
    return rows.take(newest_first[~pd.Series(keys[newest_first]).duplicated().to_numpy()])


def _files_to_read(files: pa.Table, operator: str, as_of: int, keys: pa.Array | None,
                   groups: int, within: tuple[int, int] | None) -> list[str]:
    """The data files of ``operator``'s partition that can hold a row of ``keys`` written by a
    checkpoint up to ``as_of``, by their statistics (a file without them is read)."""
    names = files.column_names
    keep = pc.equal(files["partition.operator"], operator)
    if "min.checkpoint_id" in names:
        keep = pc.and_(keep, pc.fill_null(pc.less_equal(files["min.checkpoint_id"], as_of), True))
    chosen = files.filter(keep)
    if "min.key_group" in names:
        if within is not None:
            chosen = chosen.filter(_holds_a_group(chosen, np.arange(*within)))
        elif keys is not None and len(keys) <= GROUP_PRUNING_KEYS:
            chosen = chosen.filter(_holds_a_group(chosen, key_groups(keys.to_pylist(), groups)))
    return chosen["path"].to_pylist()


def _holds_a_group(files: pa.Table, wanted: np.ndarray) -> np.ndarray:
    """Per file: whether its ``key_group`` range holds one of the ``wanted`` groups (or it has
    rows without a group, or no statistics)."""
    lowest = files["min.key_group"].to_numpy(zero_copy_only=False)
    highest = files["max.key_group"].to_numpy(zero_copy_only=False)
    unknown = np.isnan(lowest) | np.isnan(highest) if lowest.dtype.kind == "f" else np.zeros(len(files), bool)
    if "null_count.key_group" in files.column_names:
        unknown |= pc.fill_null(pc.greater(files["null_count.key_group"], 0), True).to_numpy(
            zero_copy_only=False)
    groups = np.unique(wanted)
    # the first wanted group at or above each file's lowest: inside the file's range?
    at = np.searchsorted(groups, np.nan_to_num(lowest, nan=0).astype(np.int64))
    inside = (at < len(groups)) & (groups[np.minimum(at, len(groups) - 1)]
                                   <= np.nan_to_num(highest, nan=0).astype(np.int64))
    return unknown | inside


def _in_groups(rows: pa.Table, within: tuple[int, int], groups: int) -> np.ndarray:
    """Per row: whether its key is of a group ``first <= group < end`` (rows written before
    key groups existed have none: their keys are hashed here)."""
    if "key_group" not in rows.column_names:
        group = key_groups(rows["key"].to_pylist(), groups)
    else:
        group = rows["key_group"].to_numpy(zero_copy_only=False)
        if rows["key_group"].null_count:
            unknown = np.isnan(group)
            group[unknown] = key_groups(np.asarray(rows["key"].to_pylist(), object)[unknown], groups)
    return (group >= within[0]) & (group < within[1])


def newest_per_key(rows: pa.Table) -> pa.Table:
    """The row of the highest ``checkpoint_id`` of each ``key`` (a checkpoint writes a key at
    most once), in no particular order."""
    if rows.num_rows == 0:
        return rows
    codes = pc.dictionary_encode(rows["key"]).combine_chunks().indices.to_numpy()
    return _newest_where(rows, np.ones(rows.num_rows, bool), codes)
