"""The snapshot cache (state.delta_io.cache): bounded, forgets a table with what it knew of it,
and tells a table made again at its path from the one it read (local: at every use; on S3:
within the recheck time)."""

import shutil
import threading

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake

from state import delta_io
from state.delta_io.cache import Snapshots, stamp_of


def _table(tmp_path, name, values=(1,)):
    path = str(tmp_path / name)
    write_deltalake(path, pa.table({"x": pa.array(list(values), pa.int64())}))
    return path, DeltaTable(path)


def test_past_its_bound_the_least_recently_opened_table_is_forgotten_with_what_was_known(tmp_path):
    snapshots = Snapshots(tables=2)
    opened = dict(_table(tmp_path, name) for name in "abc")
    for path, found in opened.items():
        snapshots.keep(path, found)
        snapshots.remember(path, stamp_of(path, found))
        snapshots.note_appends(path, {0: True})
    first, second, third = opened
    assert snapshots.get(first) is None and snapshots.stamp(first) is None
    assert snapshots.appends(first) == {}
    assert snapshots.get(third) is opened[third] and snapshots.appends(third) == {0: True}

    snapshots.keep(second, opened[second])  # used again: now the newest
    snapshots.keep(first, opened[first])
    assert snapshots.get(third) is None and snapshots.get(second) is opened[second]


def test_forget_drops_everything_clear_keeps_what_commits_did(tmp_path):
    snapshots = Snapshots()
    path, found = _table(tmp_path, "t")
    snapshots.keep(path, found)
    snapshots.remember(path, stamp_of(path, found))
    snapshots.note_appends(path, {0: True})
    snapshots.clear()  # new storage settings: snapshots go, what a commit did never changes
    assert snapshots.get(path) is None and snapshots.stamp(path) is None
    assert snapshots.appends(path) == {0: True}
    snapshots.forget(path)  # a table made again at the path reuses its version numbers
    assert snapshots.appends(path) == {}


def test_what_own_commits_told_holds_for_that_snapshot_at_that_version_only(tmp_path):
    snapshots = Snapshots()
    path, found = _table(tmp_path, "t")
    snapshots.keep(path, found)
    snapshots.learn_txn(path, found, "sink", None)  # as delta-rs read it at version 0
    write_deltalake(found, pa.table({"x": pa.array([2], pa.int64())}), mode="append")
    assert snapshots.known(path, found) is None  # version 1 now: what version 0 told is moot
    snapshots.committed(path, found, 0, ("sink", 1))  # it was this process's commit
    known = snapshots.known(path, found)
    assert known is not None and known.own and dict(known.txns) == {"sink": 1}
    other = DeltaTable(path)  # the same table, version and all, but another snapshot
    assert snapshots.known(path, other) is None
    write_deltalake(other, pa.table({"x": pa.array([3], pa.int64())}), mode="append")  # 2
    write_deltalake(found, pa.table({"x": pa.array([4], pa.int64())}), mode="append")  # 3
    snapshots.committed(path, found, 1, ("sink", 2))  # another writer's commit came first
    assert found.version() == 3 and snapshots.known(path, found) is None
    snapshots.learn_txn(path, found, "sink", 1)
    snapshots.keep(path, other)  # another snapshot replaces it: what was known goes
    snapshots.keep(path, found)
    assert snapshots.known(path, found) is None


def test_only_the_newest_commits_are_remembered(tmp_path):
    snapshots = Snapshots(commits=3)
    snapshots.note_appends("t", {version: version % 2 == 0 for version in range(10)})
    assert snapshots.appends("t") == {7: False, 8: True, 9: False}
    known = snapshots.appends("t")
    known[1] = True  # a copy: the cache changes only through note_appends
    assert 1 not in snapshots.appends("t")


def test_one_lock_per_table():
    snapshots = Snapshots()
    assert snapshots.lock_for("a") is snapshots.lock_for("a")
    assert snapshots.lock_for("a") is not snapshots.lock_for("b")
    assert isinstance(snapshots.lock_for("a"), type(threading.Lock()))


def test_a_local_table_made_again_at_its_path_is_read_afresh(tmp_path):
    path, _ = _table(tmp_path, "t", values=(1, 2))
    write_deltalake(path, pa.table({"x": pa.array([3], pa.int64())}), mode="append")
    assert delta_io.latest_version(path) == 1
    shutil.rmtree(path)
    _table(tmp_path, "t", values=(7,))  # fewer commits than the cached snapshot's
    assert delta_io.latest_version(path) == 0
    assert delta_io.table(path).to_pyarrow_table()["x"].to_pylist() == [7]
    shutil.rmtree(path)
    assert delta_io.table(path) is None and delta_io.snapshots.get(path) is None


def test_other_storage_settings_open_every_table_again(tmp_path, monkeypatch):
    path, _ = _table(tmp_path, "t")
    cached = delta_io.table(path)
    assert delta_io.snapshots.get(path) is cached
    delta_io.adopt_storage_environment({})  # nothing changes: the cache stays
    assert delta_io.snapshots.get(path) is cached
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    delta_io.adopt_storage_environment({"AWS_REGION": "eu-west-2"})
    assert delta_io.snapshots.get(path) is None
    assert delta_io.table(path) is not cached


@pytest.mark.parametrize("path", ["s3a://lake/wh/t", "hdfs://nn/wh/t"])
def test_only_a_local_table_has_a_stamp(tmp_path, path):
    local, found = _table(tmp_path, "t")
    assert stamp_of(path, found) is None
    assert stamp_of(local, found) is not None and stamp_of(f"file://{local}", found) == stamp_of(local, found)


def _delete_on_s3(path):
    files = delta_io.table_files(path)
    for found in files.get_file_info(pafs.FileSelector("", recursive=True, allow_not_found=True)):
        if found.type == pafs.FileType.File:
            files.delete_file(found.path)


def _remake_on_s3(path, *batches):
    """The table at ``path`` (on S3) deleted, then made again with one commit per batch."""
    _delete_on_s3(path)
    for values in batches:
        write_deltalake(path, pa.table({"x": pa.array(values, pa.int64())}), mode="append")


def test_a_table_made_again_on_s3_is_noticed_within_the_recheck_time(s3_warehouse, monkeypatch):
    path = f"{s3_warehouse}/t"
    _remake_on_s3(path, [1, 2], [3])
    assert sorted(delta_io.table(path).to_pyarrow_table()["x"].to_pylist()) == [1, 2, 3]
    _remake_on_s3(path, [7, 8, 9], [10, 11], [12])  # more commits: its later ones follow on
    monkeypatch.setenv(delta_io.RECHECK_SETTING, "3600")  # not looked at yet: the old snapshot
    stale = delta_io.table(path)                            # with the new table's commit 2
    stale_files = set(stale.file_uris())
    assert stale.version() == 2
    monkeypatch.setenv(delta_io.RECHECK_SETTING, "0")  # looked at: its commit 0 is another file
    fresh = delta_io.table(path)
    assert sorted(fresh.to_pyarrow_table()["x"].to_pylist()) == [7, 8, 9, 10, 11, 12]
    assert len(stale_files - set(fresh.file_uris())) == 2  # the old table's two files
    _remake_on_s3(path, [20])  # fewer commits
    assert delta_io.table(path).to_pyarrow_table()["x"].to_pylist() == [20]
    _delete_on_s3(path)
    assert delta_io.table(path) is None and delta_io.snapshots.get(path) is None
