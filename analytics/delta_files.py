"""A Delta table read without Spark, through delta-rs (:mod:`state.delta_io`), on a local disk
or an object store alike.

The query manager follows a state table's changelog this way. A poll asks for the next commit's
JSON (on a local disk one ``open``, on an object store one request, whatever the size of the
table) and, when it is there and only appended rows (by :class:`state.delta_io.Appended`,
the rule the Delta source reads by too: a changelog's appends, a compaction that rewrote
files without changing rows), reads the files it added with rows alone: so a poll does not
grow with the table's commits and files, and it takes no lock, so the pipeline committing to
the table holds it up nowhere. Any other commit (a reset removing
rows, a schema change, a checkpoint-only log) and, every :func:`state.delta_io.recheck_seconds`
seconds (a table made again at its path, a log cleaned up past the version read), the table is
brought up to date through delta-rs and its files compared with those read: a file removed
means rows were taken out (a reset), and the table is read again. That needs no change data
feed, which changelog tables do not have. A full read is the table's snapshot; a read of one
subscription's rows opens only the files whose statistics allow it.

What delta-rs cannot read, or a store that fails, raises :class:`Unreadable` with the reason,
and callers fall back to Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from state import StateError, delta_io


class Unreadable(Exception):
    """The table holds something delta-rs does not read, or its store failed (the message says
    which); read the table through Spark instead."""


@dataclass(frozen=True)
class Commit:
    """What the commits up to ``version`` did to the table's rows since the last read: the rows
    they inserted (in the order their files were added), and whether they removed rows (a
    delete, an overwrite, a merge: anything but appends)."""

    version: int
    inserted: pd.DataFrame
    removes_rows: bool


class DeltaFiles:
    """The Delta table at ``path``, read through delta-rs.

    >>> DeltaFiles("s3://bucket/table").path
    's3://bucket/table'
    """

    def __init__(self, path: str):
        self.path = path
        self.version = -1
        self._files: dict[str, int] = {}  # the data files as of ``version``: when each was added
        self._schema: pa.Schema | None = None  # the rows' columns, as the last full read gave them
        self._store: Any = None  # the table's files, read directly (made on first use)
        self._stamp: delta_io.Stamp | None = None  # local: the commit file of ``version`` read
        self._synced_at = -float("inf")  # when the table was last brought up to date whole

    def commits(self) -> Commit | None:
        """What the commits made since the last :meth:`snapshot` or :meth:`commits` did, or
        ``None`` while none was made (what a poll costs: see the module docstring). Appends
        come one commit per call."""
        if self.version >= 0 and time.monotonic() - self._synced_at < delta_io.recheck_seconds() \
                and self._same_table():
            entry = _reading(lambda: delta_io.appended(self.path, self.version + 1, self._files_store()))
            if entry is None:
                return None
            if entry.only_appended:
                return self._appended(entry)
        return self._synced()

    def _appended(self, entry: delta_io.Appended) -> Commit:
        """An append's commit (or a compaction's, which adds no row), from its JSON and the
        files it added with rows."""
        assert entry.files is not None  # only_appended
        names = [added.path for added in entry.files]
        sizes = {added.path: added.size for added in entry.files if added.size is not None}
        rows = _reading(lambda: delta_io.read_added(self.path, names, self._schema, self._files_store(),
                                                    sizes))
        for name in entry.removed:
            self._files.pop(name, None)
        self._files.update((added.path, added.modification_time)
                           for added in (*entry.files, *entry.rewritten))
        self.version = entry.version
        self._stamp = self._stamp_of(entry.version)
        return Commit(entry.version, to_frame(rows), False)

    def _synced(self) -> Commit | None:
        """The commits since ``version`` found by bringing the table up to date whole."""
        version, files = _reading(lambda: delta_io.data_files(self.path))
        self._synced_at = time.monotonic()
        if version == self.version:
            self._stamp = self._stamp_of(version)
            return None
        added = sorted((name for name in files if name not in self._files), key=files.__getitem__)
        removes = any(name not in files for name in self._files)
        rows = _reading(lambda: delta_io.read_data_files(self.path, added))
        self._read(version, files, rows)
        return Commit(version, to_frame(rows), removes)

    def snapshot(self) -> tuple[int, pd.DataFrame]:
        """The latest version (-1: no table yet) and the rows that make it up."""
        version, files = _reading(lambda: delta_io.data_files(self.path))
        self._synced_at = time.monotonic()
        rows = _reading(lambda: delta_io.read_data_files(self.path, sorted(files, key=files.__getitem__)))
        self._read(version, files, rows)
        return version, to_frame(rows)

    def _read(self, version: int, files: dict[str, int], rows: pa.Table) -> None:
        self.version, self._files = version, files
        self._stamp = self._stamp_of(version)
        if rows.num_columns:
            self._schema = rows.schema

    def _files_store(self) -> Any:
        if self._store is None:
            self._store = delta_io.table_files(self.path)
        return self._store

    def _same_table(self) -> bool:
        """Whether the commit file of ``version`` is still the one read (a local table: one
        ``stat``); a table on an object store is looked at whole now and then instead."""
        return self._stamp is None or self._stamp == self._stamp_of(self.version)

    def _stamp_of(self, version: int) -> delta_io.Stamp | None:
        return None if version < 0 else delta_io.commit_stamp(self.path, version)

    def rows_where(self, column: str, value: Any) -> pd.DataFrame:
        """The rows with ``column == value`` as of the latest version, from the files whose
        statistics allow such rows."""
        _, rows = _reading(lambda: delta_io.snapshot(self.path, equal=(column, value)))
        return to_frame(rows)


def _reading(call: Any) -> Any:
    try:
        return call()
    except (StateError, OSError, pa.ArrowException) as exc:
        raise Unreadable(str(exc)) from exc


def to_frame(rows: pa.Table) -> pd.DataFrame:
    """``rows`` as one pandas frame. Timestamps come back naive, in UTC, as Spark's ``toPandas``
    gives them with the session time zone lakestream sets (UTC)."""
    if rows.num_columns == 0:
        return pd.DataFrame()
    frame = rows.to_pandas()
    for name in frame.columns:
        column = frame[name]
        if isinstance(column.dtype, pd.DatetimeTZDtype):
            frame[name] = column.dt.tz_convert("UTC").dt.tz_localize(None)
    return frame
