"""A state table kept in memory from its changelog: what snapshots filter and deltas come from.

A :class:`LiveTable` reads the changelog once when created (through delta-rs, or Spark once when
the table holds something :mod:`analytics.delta_files` does not read), then follows it commit
by commit: :meth:`LiveTable.follow` asks the log for the next commit and reads only the rows
it added. So a subscriber's snapshot is a filter over memory, and a batch reaches subscribers a
poll interval after its changelog commit, without a Spark job on the way, on a local disk or
an object store.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from ops import BATCH_COLUMN, CHANGE_COLUMN, OLD_COLUMN, ROW_COLUMN, WATERMARK_COLUMN

from .delta_files import Commit, DeltaFiles, Unreadable

log = logging.getLogger(__name__)
#: Changelog columns a subscriber never sees: a row's position, the values it replaced and a
#: FINAL window's watermark.
HIDDEN = (OLD_COLUMN, ROW_COLUMN, WATERMARK_COLUMN)
#: Batches of changes a table holds unmerged at most: merging is left until a snapshot needs the
#: table (off the way from a commit to the clients), and bounded so that a table nobody
#: subscribes to for long holds no more than this many batches' rows besides itself.
MERGE_AFTER = 64


@dataclass
class Followed:
    """What :meth:`LiveTable.follow` found: each new batch's change rows (in batch order), or
    that the changelog was rewritten (a reset discarded batches) and the table was re-read."""

    batches: list[tuple[int, pd.DataFrame]] = field(default_factory=list)
    rewound: bool = False


class LiveTable:
    """The latest row per key of the state table whose changelog is at ``path``.

    ``spark`` is used only when delta-rs cannot read the changelog (see the module docstring),
    and then only to load the table, not per batch. ``after``: load the table as of
    that batch, and let the first :meth:`follow` return the later ones (a manager catching up
    from its stored position); ``None``: as it is now.
    """

    def __init__(self, path: str, keys: tuple[str, ...], spark: SparkSession | None = None,
                 after: int | None = None):
        self.path, self.keys = path, keys
        self._spark = spark
        self._files = DeltaFiles(path)
        self._with_spark = False  # delta-rs could not read it: Spark reloads it per poll
        self.version = -1  # the last changelog commit applied
        self.batch = 0      # the last batch applied (0: none)
        self._base = pd.DataFrame()
        self._pending: list[pd.DataFrame] = []  # batches' change rows not merged into _base yet
        self._frame: pd.DataFrame | None = None
        self._held: list[tuple[int, pd.DataFrame]] = []  # read, not applied yet (see ``after``)
        self.load(after)

    # -- reading ----------------------------------------------------------------------------
    def load(self, after: int | None = None) -> None:
        """(Re)read the whole changelog: the latest change per key, deletes dropped (up to
        batch ``after``, holding the later batches for :meth:`follow`)."""
        version, rows = self._read_all()
        self.version, self._held = version, []
        if after is not None and not rows.empty:
            later = rows[BATCH_COLUMN] > after
            self._held = _by_batch(rows[later])
            rows = rows[~later]
        self._base, self._pending, self._frame = self._no_rows(rows), [], None
        self.batch = 0
        if not rows.empty:  # the whole changelog merged as one batch of changes would be
            ordered = rows.sort_values([BATCH_COLUMN, ROW_COLUMN], kind="stable")
            self.batch = int(ordered[BATCH_COLUMN].max())
            self._pending = [ordered.drop(columns=[c for c in HIDDEN if c in ordered.columns])]
            self._merge_pending()

    def _no_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The table before its first row, with the columns its rows have (the changelog's when
        it has any, else the keys), so an analytic that selects by a column works on it."""
        columns = [c for c in rows.columns if c not in HIDDEN and c != CHANGE_COLUMN]
        return pd.DataFrame(columns=columns or [*self.keys, BATCH_COLUMN])

    def _read_all(self) -> tuple[int, pd.DataFrame]:
        if not self._with_spark:
            try:
                return self._files.snapshot()
            except Unreadable as exc:
                log.info("reading %s through Spark: %s", self.path, exc)
                self._with_spark = True
        return self._read_with_spark()

    def _read_with_spark(self) -> tuple[int, pd.DataFrame]:
        from delta.tables import DeltaTable  # only this fallback needs the JVM

        if self._spark is None:
            raise Unreadable(f"{self.path} cannot be read from its files and no Spark session "
                             "was given")
        if not DeltaTable.isDeltaTable(self._spark, self.path):
            return -1, pd.DataFrame()
        newest = DeltaTable.forPath(self._spark, self.path).history(1).first()
        assert newest is not None  # a Delta table has at least its creating commit
        version = int(newest["version"])
        rows = (self._spark.read.format("delta").option("versionAsOf", version).load(self.path)
                .toPandas())
        return version, rows

    def follow(self) -> Followed:
        """Apply the commits made since the last call; their batches' change rows, in order.
        A commit that removed rows (a reset discarding batches) makes the table re-read."""
        found = Followed()
        for batch, changes in self._held:
            self.apply(batch, changes)
            found.batches.append((batch, changes))
        self._held = []
        while True:
            commit = self._next_commit()
            if commit is None:
                return found
            if commit.removes_rows:
                log.info("%s: commit %d rewrote the changelog; re-reading it", self.path,
                         commit.version)
                self.load()
                return Followed(rewound=True)
            self.version = commit.version
            for batch, changes in _by_batch(commit.inserted):
                self.apply(batch, changes)
                found.batches.append((batch, changes))

    def _next_commit(self) -> Commit | None:
        if self._with_spark:  # delta-rs cannot read it: Spark finds the new rows (rare)
            return self._next_with_spark()
        try:
            return self._files.commits()
        except Unreadable as exc:
            log.info("%s: %s; re-reading it", self.path, exc)
            self.load()
            return None

    def _next_with_spark(self) -> Commit | None:
        before = self.version
        self.load()
        return None if self.version == before else Commit(self.version, pd.DataFrame(), True)

    # -- the table --------------------------------------------------------------------------
    def apply(self, batch: int, changes: pd.DataFrame) -> None:
        """Apply one batch's change rows (in order): the last change per key wins. They are
        kept as they come and merged into the table when :meth:`frame` is next asked for (or
        once :data:`MERGE_AFTER` batches wait), so a batch costs its subscribers nothing here."""
        self._pending.append(changes)
        self.batch = max(self.batch, batch)
        self._frame = None
        if len(self._pending) >= MERGE_AFTER:
            self._merge_pending()

    def frame(self) -> pd.DataFrame:
        """The table now: one row per key, with the ``_batch_id`` that last changed it. Built
        once per change (snapshots between two batches share it); do not modify it."""
        if self._frame is None:
            self._merge_pending()
            self._frame = self._base.reset_index(drop=True)
        return self._frame

    def _merge_pending(self) -> None:
        """The table with the changes waiting merged in: each key's last change replaces its
        row (a delete removes it)."""
        if not self._pending:
            return
        changes = pd.concat(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        last = self._indexed(changes.drop_duplicates(list(self.keys), keep="last"))
        kept = self._base[~self._base.index.isin(last.index)] if len(self._base) else self._base
        upserted = last[last[CHANGE_COLUMN] != "delete"].drop(columns=[CHANGE_COLUMN])
        self._base = pd.concat([kept, upserted]) if len(kept) else upserted

    def _indexed(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` indexed by key (the key columns stay columns too)."""
        index: Any = (pd.Index(rows[self.keys[0]]) if len(self.keys) == 1
                      else pd.MultiIndex.from_frame(rows[list(self.keys)]))
        return rows.set_axis(index, axis=0)


def _by_batch(rows: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """Change rows split by batch, in batch then row order, without the hidden columns."""
    if rows.empty:
        return []
    hidden = [c for c in HIDDEN if c in rows.columns]
    batches = rows[BATCH_COLUMN]
    if batches.nunique() == 1:  # a commit holds one batch: no sort by batch, no grouping
        in_order = rows.iloc[rows[ROW_COLUMN].argsort(kind="stable")]
        return [(int(batches.iat[0]), in_order.drop(columns=hidden).reset_index(drop=True))]
    ordered = rows.sort_values([BATCH_COLUMN, ROW_COLUMN], kind="stable")
    return [(int(batch), group.drop(columns=hidden).reset_index(drop=True))
            for batch, group in ordered.groupby(BATCH_COLUMN, sort=True)]
