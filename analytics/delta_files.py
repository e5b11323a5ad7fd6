"""A Delta table read without Spark, through delta-rs (:mod:`state.delta_io`), on a local disk
or an object store alike.

The query manager follows a state table's changelog this way: a poll brings the table up to
date from the version it read (a listing of ``_delta_log`` from that version: one request on
S3, nothing more when no commit was made), and the files added since are read; a file removed
means rows were taken out (a reset), and the table is read again. That needs no change data
feed, which changelog tables do not have. A full read is the table's snapshot; a read of one
subscription's rows opens only the files whose statistics allow it.

What delta-rs cannot read, or a store that fails, raises :class:`Unreadable` with the reason,
and callers fall back to Spark.
"""

from __future__ import annotations

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

    def commits(self) -> Commit | None:
        """What the commits made since the last :meth:`snapshot` or :meth:`commits` did, or
        ``None`` while none was made (what a poll costs: see the module docstring)."""
        version, files = _reading(lambda: delta_io.data_files(self.path))
        if version == self.version:
            return None
        added = sorted((name for name in files if name not in self._files), key=files.__getitem__)
        removes = any(name not in files for name in self._files)
        rows = _reading(lambda: delta_io.read_data_files(self.path, added))
        self.version, self._files = version, files
        return Commit(version, to_frame(rows), removes)

    def snapshot(self) -> tuple[int, pd.DataFrame]:
        """The latest version (-1: no table yet) and the rows that make it up."""
        version, files = _reading(lambda: delta_io.data_files(self.path))
        rows = _reading(lambda: delta_io.read_data_files(self.path, sorted(files, key=files.__getitem__)))
        self.version, self._files = version, files
        return version, to_frame(rows)

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
