"""What this process knows of a table (its snapshot), cached and brought up to date from the
commits since, so a commit or a poll reads only what is new.

A table deleted and made again at the same path is noticed and read afresh. On a local disk, at
every use: its commit file is not the one read (inode and size). On an object store that would
cost a request per use, so there the commit file the table was opened at is looked at again (one
``HEAD``) at most every :data:`RECHECK_SETTING` seconds (10 by default) per table: a table made
again is noticed within that time, and until then may be read as the one before it with the
new one's later commits.

What the process's own commits tell is kept too (:class:`Known`): per table, the latest ``txn``
version of each app id asked about, as of the version the snapshot is at, carried forward by
each commit this process makes on that snapshot. An idempotent append then checks its ``txn``
without delta-rs reading every commit since the last log checkpoint again (one ``GET`` each
on an object store, up to ten).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow.fs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from ..errors import StorageError
from .stores import calling, local_path, location, serves, table_files

_CACHED_TABLES = 256
_CACHED_COMMITS = 1000  # per table: what each commit did, as far back as a plan reads

#: What tells a local table from one made again at its path: its commit file's inode, size and
#: modification time (a file made again may get the inode a deleted one had, and its size).
Stamp = tuple[int, int, int]
#: Seconds between two looks at whether a table on an object store was made again (see above).
RECHECK_SETTING = "LAKESTREAM_TABLE_RECHECK_SECONDS"


@dataclass(frozen=True)
class Known:
    """What is known of the table at ``version`` of the snapshot ``table`` (that object, at
    that version; anything else and it says nothing): ``txns``, per app id asked about or
    committed with, its latest ``txn`` version (``None``: none), and ``own``, whether this
    process made the commit of ``version`` on that snapshot (then no other commit is known
    after it)."""

    table: DeltaTable
    version: int
    txns: Mapping[str, int | None]
    own: bool = False


@dataclass(frozen=True)
class Mark:
    """What tells a table on an object store from one made again at its path: the size and
    modification time of the commit file of ``version`` (the version it was opened at), as seen
    at ``seen_at`` (monotonic seconds)."""

    version: int
    file: tuple[int, int] | None
    seen_at: float


class Snapshots:
    """The tables this process opened, least recently opened first, each with the stamp of the
    commit file it was read at and, per commit, whether it was a blind append; a lock per
    table, so one thread at a time reads or commits it (a run's threads share this).

    Bounded: past ``tables`` tables the least recently opened is forgotten with what was known
    of it, and of each table only the newest ``commits`` commits are remembered."""

    def __init__(self, tables: int = _CACHED_TABLES, commits: int = _CACHED_COMMITS) -> None:
        self._capacity, self._commits = tables, commits
        self._tables: OrderedDict[str, DeltaTable] = OrderedDict()
        self._stamps: dict[str, Stamp | None] = {}  # the commit file each table was read at
        self._appends: dict[str, dict[int, bool]] = {}  # per table, per version: a blind append?
        self._marks: dict[str, Mark] = {}  # per table on an object store: its commit file as opened
        self._known: dict[str, Known] = {}  # per table: what its snapshot's own commits told
        self._lock = threading.Lock()  # guards the five above
        self._table_locks: dict[str, threading.Lock] = {}

    def lock_for(self, path: str) -> threading.Lock:
        """The lock a reader or writer of the table at ``path`` holds while it uses its snapshot."""
        with self._lock:
            return self._table_locks.setdefault(path, threading.Lock())

    def get(self, path: str) -> DeltaTable | None:
        """The snapshot cached for ``path``, as last read (``None``: none)."""
        with self._lock:
            return self._tables.get(path)

    def stamp(self, path: str) -> Stamp | None:
        """The stamp the snapshot of ``path`` was read at (``None`` off a local disk, or unknown)."""
        with self._lock:
            return self._stamps.get(path)

    def keep(self, path: str, opened: DeltaTable) -> None:
        """Cache ``opened`` as the snapshot of ``path``, forgetting the least recently opened
        table beyond the bound."""
        with self._lock:
            if self._tables.get(path) is not opened:
                self._known.pop(path, None)  # it was of the snapshot replaced
            self._tables[path] = opened
            self._tables.move_to_end(path)
            while len(self._tables) > self._capacity:
                forgotten, _ = self._tables.popitem(last=False)
                self._stamps.pop(forgotten, None)
                self._appends.pop(forgotten, None)
                self._marks.pop(forgotten, None)
                self._known.pop(forgotten, None)

    def remember(self, path: str, stamp: Stamp | None) -> None:
        """Note that the snapshot of ``path`` is now as of the commit file ``stamp`` tells."""
        with self._lock:
            self._stamps[path] = stamp

    def forget(self, path: str) -> None:
        """Forget all about ``path``: its next use opens it afresh."""
        with self._lock:
            self._tables.pop(path, None)
            self._stamps.pop(path, None)
            self._appends.pop(path, None)  # a table made again at this path reuses its version numbers
            self._marks.pop(path, None)
            self._known.pop(path, None)

    def clear(self) -> None:
        """Forget every snapshot (what commits did stays true: a commit never changes)."""
        with self._lock:
            self._tables.clear()
            self._stamps.clear()
            self._marks.clear()
            self._known.clear()

    def known(self, path: str, current: DeltaTable) -> Known | None:
        """What is known of ``path`` as of ``current`` (the snapshot, at its version now);
        ``None``: nothing (another snapshot, or it moved to another version since)."""
        with self._lock:
            found = self._known.get(path)
        if found is None or found.table is not current or found.version != int(current.version()):
            return None
        return found

    def learn_txn(self, path: str, current: DeltaTable, app_id: str, seen: int | None) -> None:
        """Note that ``current`` (at its version now) holds ``seen`` as the latest ``txn``
        version of ``app_id``, as delta-rs read it from the log."""
        found = self.known(path, current)
        txns = {**(found.txns if found else {}), app_id: seen}
        with self._lock:
            self._known[path] = Known(current, int(current.version()),
                                      txns, found.own if found else False)

    def committed(self, path: str, current: DeltaTable, before: int,
                  txn: tuple[str, int] | None) -> None:
        """Note a commit this process made on ``current``, which was at version ``before``:
        when it is now at the next version, that commit is the one it made, so what was known
        at ``before`` holds with ``txn`` as its app id's latest; else (a commit by another
        writer came first, and delta-rs took it in) nothing is known."""
        with self._lock:
            found = self._known.get(path)
            if int(current.version()) != before + 1:
                self._known.pop(path, None)
                return
            prior = found.txns if found is not None and found.table is current and \
                found.version == before else {}
            txns = {**prior, **({txn[0]: txn[1]} if txn else {})}
            self._known[path] = Known(current, before + 1, txns, own=True)

    def mark(self, path: str) -> Mark | None:
        """What the table at ``path`` (on an object store) was opened at (``None``: unknown)."""
        with self._lock:
            return self._marks.get(path)

    def set_mark(self, path: str, mark: Mark) -> None:
        with self._lock:
            self._marks[path] = mark

    def appends(self, path: str) -> dict[int, bool]:
        """Per version of ``path`` known, whether that commit was a blind append (a copy)."""
        with self._lock:
            return dict(self._appends.get(path, {}))

    def note_appends(self, path: str, known: Mapping[int, bool]) -> None:
        """Remember ``known`` (per version, a blind append?) for ``path``, the newest commits only."""
        with self._lock:
            self._appends[path] = {version: known[version] for version in sorted(known)[-self._commits:]}


#: This process's snapshots.
snapshots = Snapshots()


def table(path: str) -> DeltaTable | None:
    """The table at ``path`` as of its latest commit (``None``: no table there). A table this
    process opened before is brought up to date from the commits since, not read afresh."""
    with snapshots.lock_for(path):
        return synced(path)


def table_at_least(path: str, version: int = 0) -> DeltaTable | None:
    """The table at ``path`` as this process holds it, when that is at ``version`` or later,
    without asking an object store for later commits (none asked); else as :func:`table`
    gives it (``None``: no table there). For what holds of every version from ``version`` on:
    that the table exists (bringing it up to date could not tell otherwise: the log of a
    table deleted lists as empty as one with no new commit), the columns of commits up to
    ``version`` (the batch a plan fixed reads them). Whether the table was made again is
    looked at as every use does; a local table is brought up to date (a directory listing)."""
    with snapshots.lock_for(path):
        cached = snapshots.get(path)
        if (cached is not None and local_path(path) is None and int(cached.version()) >= version
                and not _made_again(path)):
            return cached
        return synced(path)


def served_table(path: str) -> DeltaTable | None:
    """:func:`table`, where this package serves ``path``; ``None`` elsewhere (Spark's), as for a
    missing table."""
    return table(path) if serves(path) else None


def synced(path: str, fresh: bool = False, committing: bool = False) -> DeltaTable | None:
    """The cached table brought up to date, or the table opened (``None``: none there); the
    caller holds the table's lock.

    With ``committing`` (the caller is about to commit on it), a table on an object store whose
    snapshot is at a commit this process made on it (:attr:`Known.own`) is taken as it is, not
    brought up to date (a ``LIST`` of its log and a ``GET`` of ``_last_checkpoint``): the
    commit finds any later commit itself. Its commit file's put is conditional, and delta-rs
    reads the commits it did not know and checks them against its own, as it does for a commit
    made just after the ``LIST`` would have been: another writer's commit with the same ``txn``
    app id, or one that changed the table's metadata, fails it with ``CommitFailedError``, and
    :func:`~state.delta_io.commits.retrying` reads the table afresh and checks again; one that
    only added files is committed after. Whether the table was made again is still looked at
    as every use does."""
    cached = None if fresh else snapshots.get(path)
    if cached is not None and _made_again(path):
        snapshots.forget(path)  # and what its commits did: the new table reuses their numbers
        cached = None
    if cached is not None and stamp_of(path, cached) == snapshots.stamp(path):
        if committing and _made_the_latest(path, cached):
            return cached
        try:
            calling(path, "reading the log", cached.update_incremental)
            remember(path, cached)
            return cached
        except StorageError:
            if local_path(path) is None:
                raise
            # a local table deleted and made again with fewer commits: read it afresh
    try:
        opened = calling(path, "opening the table", lambda: DeltaTable(location(path)))
    except TableNotFoundError:
        snapshots.forget(path)
        return None
    snapshots.keep(path, opened)
    remember(path, opened)
    if local_path(path) is None:
        version = int(opened.version())
        snapshots.set_mark(path, Mark(version, _commit_file(path, version), time.monotonic()))
    return opened


def _made_the_latest(path: str, cached: DeltaTable) -> bool:
    """Whether ``cached`` (a table on an object store) is at a commit this process made on it,
    the latest it knows of."""
    if local_path(path) is not None:
        return False  # a local table is brought up to date at every use: a directory listing
    known = snapshots.known(path, cached)
    return known is not None and known.own


def _made_again(path: str) -> bool:
    """Whether the table on an object store at ``path`` is no longer the one opened: its commit
    file of the version it was opened at changed or is gone (looked at, one ``HEAD``, at most
    every :data:`RECHECK_SETTING` seconds; a commit file gone by log cleanup reads it afresh
    too, once). Always ``False`` for a local table (its stamp tells, at every use)."""
    mark = snapshots.mark(path)
    now = time.monotonic()
    if mark is None or now - mark.seen_at < recheck_seconds():
        return False
    if _commit_file(path, mark.version) != mark.file:
        return True
    snapshots.set_mark(path, Mark(mark.version, mark.file, now))
    return False


def _commit_file(path: str, version: int) -> tuple[int, int] | None:
    """The size and modification time (ns) of commit ``version``'s file (``None``: none)."""
    found = calling(path, f"looking at commit {version} of",
                    lambda: table_files(path).get_file_info(f"_delta_log/{version:020d}.json"))
    if found.type == pyarrow.fs.FileType.NotFound:
        return None
    return int(found.size or 0), int(found.mtime_ns or 0)


def recheck_seconds() -> float:
    """:data:`RECHECK_SETTING`, in seconds (10 unless set; 0: at every use)."""
    text = os.environ.get(RECHECK_SETTING, "10")
    try:
        return max(float(text), 0.0)
    except ValueError:
        raise StorageError(f"{RECHECK_SETTING}={text!r} is not a number of seconds") from None


def remember(path: str, found: DeltaTable) -> None:
    """Note the commit file ``found`` (the snapshot of ``path``) is now as of."""
    snapshots.remember(path, stamp_of(path, found))


def stamp_of(path: str, found: DeltaTable) -> Stamp | None:
    """The stamp of the commit file of ``found``'s version (:func:`commit_stamp`)."""
    return commit_stamp(path, int(found.version()))


def commit_stamp(path: str, version: int) -> Stamp | None:
    """The inode, size and modification time of commit ``version``'s file, for a local table
    (what tells a table made again at the same path from the one read; all -1: no such file);
    ``None`` elsewhere."""
    local = local_path(path)
    if local is None:
        return None
    try:
        status = os.stat(os.path.join(local, "_delta_log", f"{version:020d}.json"))
    except FileNotFoundError:
        return (-1, -1, -1)
    return status.st_ino, status.st_size, status.st_mtime_ns


def adopt_storage_environment(settings: Mapping[str, str]) -> None:
    """Reach object stores with ``settings`` (from :func:`state.delta_io.storage_environment`)
    from now on. Here, not with the environment's other helpers, because tables opened with
    other settings must open again with these: the cache is cleared."""
    if any(os.environ.get(name) != value for name, value in settings.items()):
        os.environ.update(settings)
        snapshots.clear()
