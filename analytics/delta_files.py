"""A local Delta table read from its ``_delta_log`` and Parquet files with pyarrow, no Spark.

The query manager follows a state table's changelog this way: a new commit shows up as the
next ``<version>.json`` in the log folder (one ``stat`` per poll finds it), and its rows are in
the files that commit added. A full read replays the log from the newest classic Parquet
checkpoint (one file or several parts) and the JSON commits after it.

What this reader does not interpret raises :class:`Unreadable` with the reason, and callers
fall back to Spark: a table not on the local file system, deletion vectors, partition values,
column mapping, V2 checkpoints (no classic checkpoint and JSON commits missing), a file gone.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from state.tables import local_path

# <version>.checkpoint.parquet, or part <i> of <n>: <version>.checkpoint.<i>.<n>.parquet
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


class Unreadable(Exception):
    """The table's log or files hold something this reader does not interpret (the message
    says what); read the table through Spark instead."""


@dataclass(frozen=True)
class DataFile:
    """One data file of a table: its absolute path and the column bounds its log entry records
    (empty when the writer recorded none)."""

    path: str
    low: dict[str, Any] = field(default_factory=dict)
    high: dict[str, Any] = field(default_factory=dict)

    def may_hold(self, column: str, above: Any = None, equal: Any = None) -> bool:
        """Whether rows with ``column > above`` and/or ``column == equal`` can be in the file,
        by its recorded bounds (``True`` when they are not recorded)."""
        low, high = self.low.get(column), self.high.get(column)
        if above is not None and high is not None and not high > above:
            return False
        if equal is not None and low is not None and high is not None:
            return bool(low <= equal <= high)
        return True


@dataclass(frozen=True)
class Commit:
    """What one commit did to the table's rows: the files it added with new rows, and whether
    it removed rows (a delete, an overwrite, a merge: anything but an append)."""

    version: int
    added: tuple[DataFile, ...]
    removes_rows: bool


class DeltaFiles:
    """The local Delta table at ``path``, read from its files.

    >>> DeltaFiles("s3://bucket/table")
    Traceback (most recent call last):
    ...
    analytics.delta_files.Unreadable: s3://bucket/table is not on the local file system
    """

    def __init__(self, path: str):
        local = local_path(path)
        if local is None:
            raise Unreadable(f"{path} is not on the local file system")
        self.path = path
        self.root = local
        self.log = os.path.join(local, "_delta_log")

    def exists(self, version: int = 0) -> bool:
        """Whether commit ``version`` is in the log (version 0: whether the table exists)."""
        return os.path.exists(self._json(version))

    def commit(self, version: int) -> Commit | None:
        """Commit ``version``, or ``None`` while it has not been made. One ``stat`` when it has
        not: this is what a poll for new commits costs."""
        actions = self._actions(version)
        if actions is None:
            return None
        added, removes = [], False
        for action in actions:
            self._check(action, version)
            add, remove = action.get("add"), action.get("remove")
            if add is not None and add.get("dataChange", True):
                added.append(self._file(add))
            removes = removes or (remove is not None and remove.get("dataChange", True))
        return Commit(version, tuple(added), removes)

    def snapshot(self) -> tuple[int, list[DataFile]]:
        """The latest version and the data files that make it up (log replay)."""
        versions, checkpoints = self._listing()
        if not versions and not checkpoints:
            return -1, []
        latest = max([*versions, *checkpoints])
        start = max((c for c in checkpoints if c <= latest), default=-1)
        files = {f.path: f for f in self._checkpoint_files(start)} if start >= 0 else {}
        for version in range(start + 1, latest + 1):
            actions = self._actions(version)
            if actions is None:
                raise Unreadable(f"{self.path}: commit {version} is gone from the log and no "
                                 "classic checkpoint covers it")
            for action in actions:
                self._replay(action, version, files)
        return latest, list(files.values())

    def _replay(self, action: dict[str, Any], version: int, files: dict[str, DataFile]) -> None:
        self._check(action, version)
        if "add" in action:
            added = self._file(action["add"])
            files[added.path] = added
        elif "remove" in action:
            files.pop(self._absolute(action["remove"]["path"]), None)

    def _listing(self) -> tuple[list[int], list[int]]:
        """The JSON commit versions and the complete classic checkpoints in the log folder."""
        try:
            names = os.listdir(self.log)
        except FileNotFoundError:
            return [], []
        versions = [int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit()
                    and len(n) == 25]
        parts: dict[int, set[int]] = {}
        wanted: dict[int, int] = {}
        for name in names:
            match = _CHECKPOINT.match(name)
            if match:
                version = int(match.group(1))
                parts.setdefault(version, set()).add(int(match.group(2) or 1))
                wanted[version] = int(match.group(3) or 1)
        complete = [v for v, got in parts.items() if len(got) == wanted[v]]
        return versions, complete

    def _checkpoint_files(self, version: int) -> Iterator[DataFile]:
        names = sorted(n for n in os.listdir(self.log)
                       if (m := _CHECKPOINT.match(n)) and int(m.group(1)) == version)
        for name in names:
            table = pq.read_table(os.path.join(self.log, name), columns=["add", "metaData"])
            for meta in table.column("metaData").to_pylist():
                if meta is not None:
                    self._check({"metaData": meta}, version)
            for add in table.column("add").to_pylist():
                if add is not None:
                    self._check({"add": add}, version)
                    yield self._file(add)

    def _check(self, action: dict[str, Any], version: int) -> None:
        """Raise :class:`Unreadable` for what a plain Parquet read would get wrong."""
        add = action.get("add")
        if add is not None:
            if add.get("deletionVector"):
                raise Unreadable(f"{self.path}: commit {version} has deletion vectors")
            if add.get("partitionValues"):
                raise Unreadable(f"{self.path}: the table is partitioned (values live in the log)")
        meta = action.get("metaData")
        if meta is not None:
            configuration = dict(meta.get("configuration") or {})
            if configuration.get("delta.columnMapping.mode", "none") != "none":
                raise Unreadable(f"{self.path}: the table maps column names (column mapping)")

    def _file(self, add: dict[str, Any]) -> DataFile:
        stats = json.loads(add.get("stats") or "{}")
        return DataFile(self._absolute(add["path"]), stats.get("minValues") or {},
                        stats.get("maxValues") or {})

    def _absolute(self, path: str) -> str:
        if urlparse(path).scheme:
            raise Unreadable(f"{self.path}: a data file outside the table folder ({path[:80]})")
        return os.path.join(self.root, unquote(path))

    def _json(self, version: int) -> str:
        return os.path.join(self.log, f"{version:020d}.json")

    def _actions(self, version: int) -> list[dict[str, Any]] | None:
        try:
            with open(self._json(version)) as handle:
                return [json.loads(line) for line in handle if line.strip()]
        except FileNotFoundError:
            return None


def read_files(files: Iterable[DataFile]) -> pd.DataFrame:
    """The rows of ``files`` as one pandas frame (file order). Timestamps come back naive, in
    UTC, as Spark's ``toPandas`` gives them with the session time zone lakestream sets (UTC).
    :class:`Unreadable` when a file is gone or unreadable."""
    parts = []
    for data in files:
        try:
            parts.append(pq.read_table(data.path))
        except (OSError, pa.ArrowInvalid) as exc:
            raise Unreadable(f"cannot read {data.path}: {exc}") from exc
    if not parts:
        return pd.DataFrame()
    rows = pa.concat_tables(parts, promote_options="permissive").to_pandas()
    for name in rows.columns:
        column = rows[name]
        if isinstance(column.dtype, pd.DatetimeTZDtype):
            rows[name] = column.dt.tz_convert("UTC").dt.tz_localize(None)
    return rows
