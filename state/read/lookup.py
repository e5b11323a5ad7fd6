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
(in distributed mode one per operator and task, each of the task's range of groups), its rows
in group order, in row groups of a bounded size (:data:`state.contract.schema.STATE_FILES`): within a
file, the row groups of other groups are skipped by their statistics, so a fresh table needs no
compaction (``compact``: files of contiguous group ranges) for a read of a few groups to skip
most of it. Rows written before key groups existed have none; they are always read.

A typed state (docs/plans/typed-state.md) keeps its keys and values in columns of their own
(``k__<state>``, ``v__<state>…``) and leaves ``key`` and ``value`` null: :func:`stored_typed_values`
reads it the same way, and also skips the files and rows from before the checkpoint the state
moved to typed storage from.

>>> import pyarrow as pa
>>> rows = pa.table({"key": ["a", "b", "a", "c"], "value": ["1", "2", "5", None],
...                  "deleted": [False, False, False, True], "checkpoint_id": [1, 1, 2, 2]})
>>> newest_per_key(rows).to_pydict()["value"]
['5', None, '2']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import delta_io
from ..contract.codecs import encoded_integers
from ..contract.entries import EntryColumns
from ..contract.keygroups import key_groups, typed_key_groups
from ..lake import tables
from .found import Found, key_positions

#: Up to this many keys, a read skips files by the keys' groups: hashing a key costs about
#: 0.4 µs, and a batch with more keys than a few times the groups touches nearly all of them.
GROUP_PRUNING_KEYS = 20_000

#: Up to this share of the groups, a read filters the files' rows by their groups (skipping the
#: row groups of others, :func:`_of_groups`); a row group of a 1M-row file covers about four
#: of 256 groups, so at an eighth of them more than half of the row groups are skipped.
GROUP_FILTER_SHARE = 1 / 8

_COLUMNS = ["key", "value", "deleted", "checkpoint_id"]

#: How a read hashes keys into their groups: encoded keys' text, or a typed state's keys.
_Hashing = Callable[[pa.Array | pa.ChunkedArray], np.ndarray]


def stored_values(path: str, operator: str, as_of: int, keys: pa.Array | Sequence[str] | None,
                  groups: int, within: tuple[int, int] | None = None) -> Found | None:
    """``key, value`` (encoded) of each of ``keys`` (distinct; every key, when ``None``) that
    holds a value for ``operator`` as of checkpoint ``as_of`` in the ``_state`` table at
    ``path``, whose keys hash into ``groups`` key groups, in the keys' order; ``within=(first,
    end)``: the keys are all of groups ``first <= group < end`` (an executor's bucket), so only
    files holding those are read. ``None`` when delta-rs cannot read the table (it is not on a
    local disk or an object store it reaches, or its files need more than Parquet to read):
    then ask Spark."""
    files = delta_io.file_statistics(path)
    if files is None:
        return None
    wanted = keys if keys is None or isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    hashed = partial(_encoded_groups, groups=groups)
    needed = _groups_to_read(wanted, within, hashed)
    chosen = _files_to_read(files, operator, (0, as_of), needed)
    where = _of_groups(needed, groups)
    # a table from before key groups has no such column: its keys' groups are worked out here
    # (the log is asked only by a read that would use the column)
    has_groups = (where is not None or within is not None) and "key_group" in (tables.columns(path) or ())
    columns = _COLUMNS + (["key_group"] if within is not None and has_groups else [])
    rows = delta_io.read_data_files(path, chosen, columns, partition=("operator", operator),
                                    where=where if has_groups else None)
    if not chosen or rows.num_rows == 0:
        return _none_held(wanted, pa.table({"key": pa.array([], pa.string()),
                                            "value": pa.array([], pa.string())}))
    keep = rows["checkpoint_id"].to_numpy() <= as_of
    if rows["key"].null_count:  # a typed state's rows: its keys are in its own columns
        keep &= _valid(rows["key"])
    if within is not None:  # a file of a range of groups may hold a few groups beyond it
        keep &= _in_groups(rows, within, "key", hashed)
    if wanted is not None:
        return _newest_of_asked(rows, keep, "key", wanted, ["key", "value"])
    numbers = encoded_integers(rows["key"])
    # every key an int's text (a common case): hashed as int64s, several times faster
    latest = (_newest_where(rows, keep, numbers) if numbers is not None
              else newest_per_key(rows.filter(pa.array(keep))))
    return Found.every(latest.filter(pc.invert(latest["deleted"])).select(["key", "value"]))


def stored_typed_values(path: str, operator: str, as_of: int, keys: pa.Array | None, groups: int,
                        key_column: str, value_columns: Sequence[str], since: int = 0,
                        within: tuple[int, int] | None = None) -> Found | None:
    """:func:`stored_values` of a typed state: ``key_column`` and ``value_columns`` (their
    stored types) of each of ``keys`` (distinct, an array of the key column's type; every key,
    when ``None``, in no particular order) that holds a value for ``operator`` as of checkpoint
    ``as_of``. Only rows of checkpoints from ``since`` on count (the state's typed storage began
    there: its rows from before are in ``key``/``value``, and the files of no later row are not
    read), and only rows with a key in ``key_column`` (not another state's, nor a JSON row of
    this one such as a shared entry). ``None`` when delta-rs cannot read the table, as for
    :func:`stored_values`. A table that lacks one of the columns holds no row of the state
    (columns are added before the first checkpoint that writes them): no rows then, a lacking
    column typed ``null``. A null among ``keys``: ``ValueError`` (no typed key is null).

    >>> import tempfile
    >>> from deltalake import write_deltalake
    >>> path, group = tempfile.mkdtemp(), int(typed_key_groups(pa.array([7]), 256)[0])
    >>> write_deltalake(path, pa.table({  # 7 as JSON at checkpoint 1, typed from 2, changed at 3
    ...     "operator": ["sums"] * 3, "key": ["7", None, None], "value": ["1", None, None],
    ...     "deleted": [False] * 3, "checkpoint_id": [1, 2, 3],
    ...     "key_group": pa.array([group] * 3, pa.int32()),
    ...     "k__sums": pa.array([None, 7, 7], pa.int64()), "v__sums": [None, 2.5, 4.0]}),
    ...     partition_by=["operator"])
    >>> [stored_typed_values(path, "sums", as_of, pa.array([7, 8]), 256, "k__sums", ["v__sums"],
    ...                      since=2).rows.to_pylist() for as_of in (1, 2, 3)]
    [[], [{'k__sums': 7, 'v__sums': 2.5}], [{'k__sums': 7, 'v__sums': 4.0}]]
    >>> stored_typed_values(path, "sums", 3, pa.array([8, 7]), 256, "k__sums", ["v__sums"],
    ...                     since=2).holding.tolist()
    [False, True]
    """
    if keys is not None and keys.null_count:
        raise ValueError(f"looking up {operator!r}'s typed state: a key is null, and no typed "
                         "key is (a null key has no stored value)")
    # the columns before the files: reading the log again in between could leave the files'
    # version, and a later one has the same columns and more (none is ever dropped here)
    types = column_types(path)
    files = delta_io.file_statistics(path)
    if files is None:
        return None
    names = [key_column, *value_columns]
    if not set(names) <= set(types):
        return _none_held(keys, _no_rows(names, types))
    needed = _groups_to_read(keys, within, partial(typed_key_groups, groups=groups))
    chosen = _files_to_read(files, operator, (since, as_of), needed)
    columns = [*names, "deleted", "checkpoint_id"]
    columns += ["key_group"] if within is not None and "key_group" in types else []
    rows = delta_io.read_data_files(path, chosen, columns, partition=("operator", operator),
                                    where=_of_groups(needed, groups) if "key_group" in types else None)
    if not chosen or rows.num_rows == 0:
        return _none_held(keys, _no_rows(names, types))
    key = rows[key_column]
    checkpoints = rows["checkpoint_id"].to_numpy()
    keep = (checkpoints >= since) & (checkpoints <= as_of) & _valid(key)
    if within is not None:  # a file of a range of groups may hold a few groups beyond it
        keep &= _in_groups(rows, within, key_column, partial(typed_key_groups, groups=groups))
    if keys is not None:
        return _newest_of_asked(rows, keep, key_column, keys.cast(key.type), names)
    latest = _newest_where(rows, keep, _key_numbers(key))
    return Found.every(latest.filter(pc.invert(latest["deleted"])).select(names))



def stored_entries(path: str, operator: str, as_of: int, keys: pa.Array | None, groups: int,
                   columns: EntryColumns, within: tuple[int, int] | None = None) -> pa.Table | None:
    """``key``, the entry column and the value columns (``columns``) of each live entry of
    ``operator``, a state of many rows per key (a list's elements, a map's entries:
    :class:`~state.run.entries.EntryState`), of the encoded ``keys`` (every key's, when
    ``None``) as of checkpoint ``as_of``: the newest row per key and entry, tombstones
    dropped, in no particular order. Files are chosen as :func:`stored_values` chooses them
    (a key's entries are all of its key's group). ``None`` when delta-rs cannot read the table.

    >>> import tempfile
    >>> from deltalake import write_deltalake
    >>> path, group = tempfile.mkdtemp(), int(key_groups(['"a"'], 256)[0])
    >>> write_deltalake(path, pa.table({  # entry 1 set at 1 and changed at 2; entry 2 removed at 2
    ...     "operator": ["tops"] * 4, "key": ['"a"'] * 4, "k__tops": ["1", "2", "1", "2"],
    ...     "value": ["x", "y", "z", None], "deleted": [False, False, False, True],
    ...     "checkpoint_id": [1, 1, 2, 2], "key_group": pa.array([group] * 4, pa.int32())}),
    ...     partition_by=["operator"])
    >>> [sorted(stored_entries(path, "tops", as_of, pa.array(['"a"']), 256,
    ...                        EntryColumns("k__tops"))["value"].to_pylist()) for as_of in (1, 2)]
    [['x', 'y'], ['z']]
    """
    types = column_types(path)
    files = delta_io.file_statistics(path)
    if files is None:
        return None
    entry_column = columns.entry
    names = ["key", entry_column, *columns.value_columns]
    empty = _no_rows(names, {"key": pa.string(), entry_column: pa.string(), **columns.arrow_types()})
    if entry_column not in types:  # its columns come before its first row: none stored
        return empty
    hashed = partial(_encoded_groups, groups=groups)
    needed = _groups_to_read(keys, within, hashed)
    chosen = _files_to_read(files, operator, (0, as_of), needed)
    grouped = "key_group" in types
    read = [*names, "deleted", "checkpoint_id"] + (["key_group"] if grouped else [])
    rows = delta_io.read_data_files(path, chosen, read, partition=("operator", operator),
                                    where=_of_groups(needed, groups) if grouped else None)
    if not chosen or rows.num_rows == 0:
        return empty
    keep = (rows["checkpoint_id"].to_numpy() <= as_of) & _valid(rows[entry_column])
    if within is not None:  # a file of a range of groups may hold a few groups beyond it
        keep &= _in_groups(rows, within, "key", hashed)
    if keys is not None:
        keep &= np.asarray(pc.is_in(rows["key"], value_set=keys).to_numpy(zero_copy_only=False), bool)
    identity = pc.binary_join_element_wise(rows["key"], rows[entry_column], "\x00")
    codes = pc.fill_null(pc.dictionary_encode(identity).combine_chunks().indices, -1).to_numpy()
    latest = _newest_where(rows, keep, codes)
    return latest.filter(pc.invert(latest["deleted"])).select(names)

def column_types(path: str) -> dict[str, pa.DataType]:
    """The Arrow type of each column of the table of a plain type, by its log (no file read);
    none when there is no table or delta-rs does not serve its path."""
    schema = delta_io.schema_json(path) or {"fields": []}
    return {field["name"]: delta_io.ARROW_TYPES[field["type"]] for field in schema["fields"]
            if isinstance(field["type"], str) and field["type"] in delta_io.ARROW_TYPES}


def _no_rows(names: list[str], types: dict[str, pa.DataType]) -> pa.Table:
    """No rows of columns ``names``, of their types in the table (``null``: not in it)."""
    return pa.table({name: pa.array([], types.get(name, pa.null())) for name in names})


def _valid(column: pa.ChunkedArray) -> np.ndarray:
    """Per row: whether ``column`` holds a value there."""
    return np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)


def _key_numbers(keys: pa.ChunkedArray) -> np.ndarray:
    """One number per row standing for its typed key, for :func:`_newest_where`: an integer
    or timestamp key itself, any other its dictionary code (a null key's number is of no
    key: the rows it is on are never kept)."""
    if pa.types.is_integer(keys.type) or pa.types.is_timestamp(keys.type):
        # unsafe: an uint64 above int64's range wraps, still one number per key
        return pc.fill_null(keys.cast(pa.int64(), safe=False), 0).to_numpy()
    codes = pc.dictionary_encode(keys).combine_chunks().indices
    return pc.fill_null(codes, -1).to_numpy()


def _newest_of_asked(rows: pa.Table, keep: np.ndarray, key_column: str, asked: pa.Array,
                     names: list[str]) -> Found:
    """Columns ``names`` of the newest of the rows ``keep`` marks for each of the ``asked``
    keys (distinct, of the key column's type), as :class:`~state.read.found.Found`: in the asked
    keys' order, placed as they are picked, each row's key matched once (one hash index of the
    asked keys, probed by every row), the newest found by a scatter of the rows' checkpoint ids
    per asked key, no sort and no second hash."""
    positions = np.where(keep, key_positions(rows[key_column], asked), -1)
    newest = _newest_row_of_each(positions, rows["checkpoint_id"].to_numpy(), len(asked))
    holding = newest >= 0
    deleted = np.asarray(rows["deleted"].to_numpy(zero_copy_only=False), bool)
    holding[holding] = ~deleted[newest[holding]]
    return Found(holding, rows.select(names).take(pa.array(newest[holding], pa.int64())))


def _newest_row_of_each(positions: np.ndarray, checkpoints: np.ndarray, count: int) -> np.ndarray:
    """For each of ``count`` keys, the row (of those ``positions`` gives a key, -1: none) of
    its highest checkpoint, -1 for a key with no row (a checkpoint writes a key at most once).

    >>> _newest_row_of_each(np.array([1, -1, 1, 0]), np.array([3, 9, 5, 2]), 3).tolist()
    [3, 2, -1]
    """
    rows = np.flatnonzero(positions >= 0)
    # a row's checkpoint above its number, so the largest is the newest checkpoint's row
    ranked = (checkpoints[rows].astype(np.int64) << 32) | rows
    best = np.full(count, -1, np.int64)
    np.maximum.at(best, positions[rows], ranked)
    return np.where(best >= 0, best & 0xFFFF_FFFF, -1)


def _none_held(keys: pa.Array | None, no_rows: pa.Table) -> Found:
    """No key of ``keys`` holds a value (for ``None``: no rows at all)."""
    return Found(np.zeros(0 if keys is None else len(keys), bool), no_rows)


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


def _groups_to_read(keys: pa.Array | None, within: tuple[int, int] | None,
                    hashed: _Hashing) -> np.ndarray | None:
    """The key groups whose files a read needs: those of ``within``, or for few keys (see
    :data:`GROUP_PRUNING_KEYS`) the keys' own, ``hashed``; ``None``: every group's."""
    if within is not None:
        return np.arange(*within)
    if keys is not None and len(keys) <= GROUP_PRUNING_KEYS:
        return hashed(keys)
    return None


def _of_groups(groups: np.ndarray | None, of: int) -> pc.Expression | None:
    """The rows a read of key ``groups`` (of ``of`` groups) needs: theirs, and those of no group
    (written before key groups existed). A ``_state`` file's rows are in group order
    (:data:`state.contract.schema.STATE_FILES`), so the row groups of other groups are skipped by
    their statistics, unread. ``None`` (no filter) for every group, or more than
    :data:`GROUP_FILTER_SHARE` of them: then few row groups would be skipped, and the filter
    would still be evaluated on every row read."""
    wanted_groups = None if groups is None else np.unique(groups)
    if wanted_groups is None or len(wanted_groups) > of * GROUP_FILTER_SHARE:
        return None
    wanted = pa.array(wanted_groups, pa.int32())
    return pc.field("key_group").isin(wanted) | pc.field("key_group").is_null()


def _files_to_read(files: pa.Table, operator: str, checkpoints: tuple[int, int],
                   wanted: np.ndarray | None) -> list[str]:
    """The data files of ``operator``'s partition that can hold a row of a key group of
    ``wanted`` (any, for ``None``) written by a checkpoint ``since <= id <= as_of``
    (``checkpoints=(since, as_of)``), by their statistics (a file without them is read)."""
    since, as_of = checkpoints
    names = files.column_names
    keep = pc.equal(files["partition.operator"], operator)
    if "min.checkpoint_id" in names:
        keep = pc.and_(keep, pc.fill_null(pc.less_equal(files["min.checkpoint_id"], as_of), True))
    if since > 0 and "max.checkpoint_id" in names:
        keep = pc.and_(keep, pc.fill_null(pc.greater_equal(files["max.checkpoint_id"], since), True))
    chosen = files.filter(keep)
    if wanted is not None and "min.key_group" in names:
        chosen = chosen.filter(_holds_a_group(chosen, wanted))
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
    if len(groups) == 0:  # no key asked for: a file holds none of them, whatever its range
        return unknown
    # the first wanted group at or above each file's lowest: inside the file's range?
    at = np.searchsorted(groups, np.nan_to_num(lowest, nan=0).astype(np.int64))
    inside = (at < len(groups)) & (groups[np.minimum(at, len(groups) - 1)]
                                   <= np.nan_to_num(highest, nan=0).astype(np.int64))
    return unknown | inside


def _encoded_groups(texts: pa.Array | pa.ChunkedArray, groups: int) -> np.ndarray:
    """:func:`state.key_groups` of encoded keys held in Arrow."""
    return key_groups(texts, groups)


def _in_groups(rows: pa.Table, within: tuple[int, int], key_column: str,
               hashed: _Hashing) -> np.ndarray:
    """Per row: whether its key is of a group ``first <= group < end``. Rows written before
    key groups existed have none: their keys (in ``key_column``) are ``hashed`` here; a row
    with neither a group nor a key there is of none."""
    group = (rows["key_group"].to_numpy(zero_copy_only=False) if "key_group" in rows.column_names
             else np.full(rows.num_rows, np.nan))
    if group.dtype.kind == "f":  # some groups are null (NaN here)
        unknown = np.isnan(group) & _valid(rows[key_column])
        group[unknown] = hashed(rows[key_column].filter(pa.array(unknown)))
    return (group >= within[0]) & (group < within[1])


def newest_per_key(rows: pa.Table) -> pa.Table:
    """The row of the highest ``checkpoint_id`` of each ``key`` (a checkpoint writes a key at
    most once), in no particular order."""
    if rows.num_rows == 0:
        return rows
    codes = pc.dictionary_encode(rows["key"]).combine_chunks().indices.to_numpy()
    return _newest_where(rows, np.ones(rows.num_rows, bool), codes)
