"""What a table's log says without Spark: its version, recent commits' metadata, schema and
properties (now or as of a version), a commit's actions (and the store its files are read
from), and whether commits were blind appends.

The reads that answer ``None`` for a missing table answer ``None`` too for a table this package
does not serve (:func:`state.delta_io.serves`): their callers then ask Spark, or go without."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.fs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from ..errors import StorageError
from .cache import served_table, snapshots, table, table_at_least
from .stores import calling, location, serves, table_files

log = logging.getLogger(__name__)

#: The table property that turns the change data feed on.
FEED_PROPERTY = "delta.enableChangeDataFeed"
# The columns Delta's change feed adds to a table's own.
_FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def latest_version(path: str) -> int | None:
    """The latest version of the table at ``path``; -1 when there is none, ``None`` when this
    package does not serve ``path`` (Spark's to tell)."""
    if not serves(path):
        return None
    found = table(path)
    return -1 if found is None else int(found.version())


def recent_metadata(path: str, commits: int = 10) -> list[str] | None:
    """``userMetadata`` of the last ``commits`` commits, newest first; ``None`` when this
    package does not serve ``path`` (Spark's to tell)."""
    if not serves(path):
        return None
    found = table(path)
    if found is None:
        return []
    history = calling(path, "reading the history", lambda: found.history(commits))
    return [str(entry["userMetadata"]) for entry in history if entry.get("userMetadata")]


def schema_json(path: str, at_least: int | None = None) -> dict[str, Any] | None:
    """The table's schema in Delta's JSON form; ``None`` when there is no table, or it is not on
    a path this package serves. ``at_least``: as of that version or a later one (what this
    process holds, when it is: no request), where the latest is not needed (the columns of
    the commits up to that version)."""
    if at_least is not None and serves(path):
        found = table_at_least(path, at_least)
    else:
        found = served_table(path)
    return None if found is None else dict(json.loads(found.schema().to_json()))


def exists(path: str) -> bool | None:
    """Whether there is a table at ``path``; ``None`` when this package does not serve ``path``
    (Spark's to tell). A table this process holds exists without asking an object store
    (:func:`~state.delta_io.cache.table_at_least`)."""
    return None if not serves(path) else table_at_least(path) is not None


def held_version(path: str) -> int | None:
    """The version of the table at ``path`` as this process holds it (after its own commit:
    that commit's, or a later one delta-rs took in), without asking an object store; -1 when
    there is no table, ``None`` when this package does not serve ``path``."""
    if not serves(path):
        return None
    found = table_at_least(path)
    return -1 if found is None else int(found.version())


def metadata_at(path: str, version: int) -> dict[str, Any] | None:
    """The table's ``configuration`` and ``schemaString`` as of ``version``, as the log's
    ``metaData`` action holds them; ``None`` when there is no table, it is not on a path this
    package serves, or its log no longer holds that version (cleaned up after a checkpoint)."""
    if not serves(path):
        return None
    try:
        found = calling(path, f"reading version {version} of",
                        lambda: DeltaTable(location(path), version=version))
    except (TableNotFoundError, StorageError) as missing:
        log.debug("metadata of %s at version %d unknown: %s", path, version, missing)
        return None
    return {"configuration": dict(found.metadata().configuration or {}),
            "schemaString": found.schema().to_json()}


def commit_times(path: str, first: int, last: int) -> dict[int, int]:
    """The time (epoch ms) each of commits ``first..last`` of the table at ``path`` was made,
    from its ``commitInfo`` (a publish's time, for a callback source's inbox); a commit the
    log no longer holds (cleaned up by log retention) is left out."""
    found = table(path)
    if found is None or last < first:
        return {}
    newest = int(found.version())
    entries = calling(path, "reading the history of",
                      lambda: found.history(max(newest - first + 1, 1)))
    return {int(entry["version"]): int(entry["timestamp"]) for entry in entries
            if "version" in entry and "timestamp" in entry and first <= int(entry["version"]) <= last}


def commit_actions(path: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version`` of the table at ``path``, from its JSON file; ``None``
    when that file is gone (cleaned up by log retention) or the table is on a store this
    package does not serve. The one read of the log by hand: delta-rs gives a commit's
    operation (its history) but not its actions, which tell the files an append added and in
    which order (read by the Delta source, :mod:`ops.sources.delta_inserts`). On an object
    store: one request."""
    return _actions(path, version, table_files(path)) if serves(path) else None


def _actions(path: str, version: int, files: pyarrow.fs.FileSystem) -> list[dict[str, Any]] | None:
    """The actions of commit ``version`` from its JSON file in ``files`` (the table's);
    ``None`` when there is no such file."""
    text = calling(path, f"reading commit {version} of",
                   lambda: _text(files, f"_delta_log/{version:020d}.json"))
    return None if text is None else [json.loads(line) for line in text.splitlines() if line.strip()]


class AddedFile(NamedTuple):
    """A data file a commit added with new rows: its path in the table's folder (unescaped: the
    log spells it as a URI), its ``modificationTime`` and its size in bytes (``None`` when the
    log leaves it out)."""

    path: str
    modification_time: int
    size: int | None


#: Actions that record something about a commit but change neither the table's rows nor what
#: the table is: what the commit did (``commitInfo``) and the writers' transaction ids (``txn``).
_ABOUT_THE_COMMIT = frozenset({"commitInfo", "txn"})


@dataclass(frozen=True)
class Appended:
    """Commit ``version`` as its JSON alone tells it (:func:`appended_in`): the one rule by which
    lakestream decides whether a commit only appended rows (the Delta source reads it so, and so
    does the analytics follower).

    ``files``: the data files it added with new rows, in its order, when it changed or removed
    no row (no ``remove`` that changes data, no change data); ``None`` when it did. Files it
    rewrote without changing their rows (a compaction: ``dataChange=false``) are ``rewritten``
    (added) and ``removed`` (paths). ``changes_table``: it also changed the table's schema,
    properties or protocol (any action but files, ``commitInfo`` and ``txn``).
    ``in_files_alone``: each file it added holds its rows alone (no partition values, deletion
    vectors or absolute URIs, which the log holds and the file does not).
    """

    version: int
    files: tuple[AddedFile, ...] | None
    rewritten: tuple[AddedFile, ...] = ()
    removed: tuple[str, ...] = ()
    changes_table: bool = False
    in_files_alone: bool = True

    @property
    def only_appended(self) -> bool:
        """Rows were only added, each file's its own, to a table that is otherwise as it was:
        the rows of ``files`` are what it inserted, and the table's files now are those before,
        less ``removed``, plus ``files`` and ``rewritten`` (what a follower holding the table's
        files and schema needs, without a snapshot)."""
        return self.files is not None and self.in_files_alone and not self.changes_table


def appended_in(version: int, actions: list[dict[str, Any]]) -> Appended:
    """What commit ``version`` (its ``actions``, one dict per line of its JSON) did, by the rule
    :class:`Appended` states.

    >>> added = {"add": {"path": "a%20b.parquet", "size": 9, "modificationTime": 1, "dataChange": True}}
    >>> appended_in(3, [{"commitInfo": {"operation": "WRITE"}}, added]).files
    (AddedFile(path='a b.parquet', modification_time=1, size=9),)
    >>> compaction = appended_in(4, [{"remove": {"path": "x.parquet", "dataChange": False}},
    ...                              {"add": {"path": "y.parquet", "size": 9, "dataChange": False}}])
    >>> compaction.files, compaction.removed, compaction.only_appended
    ((), ('x.parquet',), True)
    >>> appended_in(5, [{"remove": {"path": "y.parquet", "dataChange": True}}]).files is None
    True
    """
    files: list[AddedFile] = []
    rewritten: list[AddedFile] = []
    removed: list[str] = []
    changes_table = False
    in_files_alone = True
    for action in actions:
        add, remove = action.get("add"), action.get("remove")
        if "cdc" in action or (remove is not None and remove.get("dataChange", True)):
            return Appended(version, None)  # rows changed or deleted: only a snapshot tells which
        if remove is not None:
            removed.append(unquote(remove["path"]))
        elif add is not None:
            in_files_alone &= not (add.get("partitionValues") or add.get("deletionVector")
                                   or urlparse(add["path"]).scheme)
            (files if add.get("dataChange", True) else rewritten).append(_added_file(add))
        elif not action.keys() <= _ABOUT_THE_COMMIT:
            changes_table = True  # metaData, protocol, domain metadata …
    return Appended(version, tuple(files), tuple(rewritten), tuple(removed), changes_table,
                    in_files_alone)


def _added_file(add: dict[str, Any]) -> AddedFile:
    size = add.get("size")
    return AddedFile(unquote(add["path"]), int(add.get("modificationTime") or 0),
                     None if size is None else int(size))


def appended(path: str, version: int, files: pyarrow.fs.FileSystem | None = None) -> Appended | None:
    """Commit ``version`` of the table at ``path`` read from its JSON file (``files``: the
    table's, from :func:`table_files`, kept by a caller that asks often); ``None`` while that
    commit has not been made (or its file is gone). What a poll for the next commit costs: on a
    local disk one ``open`` that fails, on an object store one request (a ``HEAD`` that finds
    nothing), however many commits and files the table has; no lock is taken, so a writer
    committing to the table holds no reader up."""
    actions = _actions(path, version, files or table_files(path))
    return None if actions is None else appended_in(version, actions)


def _text(files: pyarrow.fs.FileSystem, name: str) -> str | None:
    try:
        with files.open_input_stream(name) as handle:
            return bytes(handle.read()).decode()
    except FileNotFoundError:
        return None


def feed_enabled(configuration: Mapping[str, Any]) -> bool:
    """Whether a table ``configuration`` (its properties) turns the change data feed on.

    >>> feed_enabled({FEED_PROPERTY: "TRUE"}), feed_enabled({})
    (True, False)
    """
    return str(configuration.get(FEED_PROPERTY, "false")).lower() == "true"


def feed_on(path: str) -> bool | None:
    """Whether the table's change data feed is on as of its latest commit; ``None`` when there
    is no table, or it is not on a path this package serves."""
    settings = configuration(path)
    return None if settings is None else feed_enabled(settings)


def configuration(path: str) -> dict[str, str] | None:
    """The table's properties as of its latest commit; ``None`` when there is no table, or it
    is not on a path this package serves."""
    found = served_table(path)
    return None if found is None else dict(found.metadata().configuration or {})


def reads_inserts(path: str, first: int, last: int) -> bool:
    """Whether commits ``first..last`` are all blind appends (:func:`_blind_appends`) and the
    feed is on now: their rows can be read without asking Spark whether its feed holds them
    (from their files, or through the feed)."""
    found = table(path)
    return found is not None and _reads_inserts(path, found, first, last)


def _reads_inserts(path: str, found: DeltaTable, first: int, last: int) -> bool:
    return feed_enabled(found.metadata().configuration or {}) and \
        _blind_appends(path, found, first, last)


def _blind_appends(path: str, found: DeltaTable, first: int, last: int) -> bool:
    """Whether commits ``first..last`` of ``found`` all only appended rows, as their
    ``commitInfo`` says (Spark's and delta-rs's appends record ``mode: Append``; Spark's also
    ``isBlindAppend``): the rows they inserted are then the files they added, whether or not
    the feed was on when they were made. One small read per commit not read before (a commit
    never changes)."""
    newest = int(found.version())
    if last < first or newest < last:
        return False
    known = snapshots.appends(path)
    if any(version not in known for version in range(first, last + 1)):
        entries = calling(path, "reading the history of", lambda: found.history(newest - first + 1))
        known.update({int(entry["version"]): _is_blind_append(entry) for entry in entries
                      if "version" in entry})
        snapshots.note_appends(path, known)
    return all(known.get(version) for version in range(first, last + 1))


def _is_blind_append(info: Mapping[str, Any]) -> bool:
    parameters = info.get("operationParameters") or {}
    return info.get("isBlindAppend") is True or (
        info.get("operation") in ("WRITE", "STREAMING UPDATE")
        and "Append" in (parameters.get("mode"), parameters.get("outputMode")))
