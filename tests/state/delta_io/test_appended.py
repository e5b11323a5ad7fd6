"""One rule for what a commit appended (state.delta_io.appended_in, issue 65), checked on commits
Spark and delta-rs really write: an append, a compaction (OPTIMIZE), a MERGE, a schema change,
and a file whose name the log escapes. The Delta source (ops.sources.delta_inserts) and the
analytics follower (analytics.delta_files) read every one of them by it, so they agree."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from analytics.delta_files import DeltaFiles
from ops.sources import delta_inserts
from state import delta_io

COLUMNS = "k LONG, v STRING"


def _commit(path: str, version: int) -> delta_io.Appended:
    commit = delta_io.appended(path, version)
    assert commit is not None, f"no commit {version} at {path}"
    return commit


def _append(spark, path: str, rows: list[tuple[int, str]], schema: str = COLUMNS, **options: str) -> None:
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").options(**options).save(path)


@pytest.fixture
def table(spark, tmp_path) -> str:
    """A table of two appends by Spark, each a file of its own (one partition each)."""
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a")], COLUMNS).coalesce(1).write.format("delta").save(path)
    _append(spark, path, [(2, "b")])
    return path


def test_an_append_is_its_added_files_to_both_readers(spark, table):
    follower = DeltaFiles(table)
    follower.snapshot()
    _append(spark, table, [(3, "c"), (4, "d")])

    commit = _commit(table, 2)
    assert commit.only_appended and commit.removed == () and commit.rewritten == ()
    assert all(os.path.exists(os.path.join(table, added.path)) for added in commit.files)
    assert delta_inserts.added_files(table, 2, 2) == [(2, added.path) for added in commit.files]
    followed = follower.commits()
    assert followed.version == 2 and not followed.removes_rows
    assert sorted(followed.inserted["k"]) == [3, 4]


def test_a_compaction_rewrites_files_and_inserts_no_row_for_both_readers(spark, table, monkeypatch):
    follower = DeltaFiles(table)
    follower.snapshot()
    SparkDeltaTable.forPath(spark, table).optimize().executeCompaction()

    commit = _commit(table, 2)
    assert commit.files == () and commit.only_appended
    assert len(commit.removed) == 2 and len(commit.rewritten) == 1  # two files into one
    assert delta_inserts.added_files(table, 2, 2) == []  # nothing inserted: nothing to read
    whole_reads: list[str] = []
    monkeypatch.setattr(delta_io, "data_files", lambda path: whole_reads.append(path))
    followed = follower.commits()
    # the follower takes the compaction as the source does: no row removed, none inserted, and
    # it knows the table's files after it without reading the table whole
    assert followed.version == 2 and not followed.removes_rows and followed.inserted.empty
    assert whole_reads == []
    monkeypatch.undo()
    _append(spark, table, [(5, "e")])
    assert list(follower.commits().inserted["k"]) == [5]
    version, rows = DeltaFiles(table).snapshot()
    assert version == 3 and sorted(rows["k"]) == [1, 2, 5]


def test_a_merge_that_changes_rows_is_no_append_to_either_reader(spark, table):
    follower = DeltaFiles(table)
    follower.snapshot()
    changes = spark.createDataFrame([(1, "A"), (9, "z")], COLUMNS)
    (SparkDeltaTable.forPath(spark, table).alias("t").merge(changes.alias("c"), "t.k = c.k")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    commit = _commit(table, 2)
    assert commit.files is None and not commit.only_appended
    assert delta_inserts.added_files(table, 2, 2) is None  # only the change feed tells the rows
    followed = follower.commits()
    assert followed.version == 2 and followed.removes_rows  # read again, whole


def test_a_schema_change_is_an_append_the_source_reads_and_the_follower_reads_whole(spark, table):
    follower = DeltaFiles(table)
    follower.snapshot()
    _append(spark, table, [(3, "c", 1.5)], "k LONG, v STRING, w DOUBLE", mergeSchema="true")

    commit = _commit(table, 2)
    assert commit.changes_table and commit.files and not commit.only_appended
    assert delta_inserts.added_files(table, 2, 2) == [(2, commit.files[0].path)]
    rows = delta_inserts.inserted_rows(spark, table, 2, 2)
    assert rows[["k", "w"]].values.tolist() == [[3, 1.5]]
    followed = follower.commits()  # its columns are the table's as of the new schema
    assert followed.version == 2 and list(followed.inserted["w"].dropna()) == [1.5]


@pytest.mark.parametrize("name", ["rows 1.parquet", "sub dir/a%20b.parquet"])
def test_a_file_whose_name_the_log_escapes_is_one_path_to_both_readers(spark, table, name, monkeypatch):
    follower = DeltaFiles(table)
    follower.snapshot()
    os.makedirs(os.path.dirname(os.path.join(table, name)), exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([7], pa.int64()), "v": ["g"]}), os.path.join(table, name))
    size = os.path.getsize(os.path.join(table, name))
    found = DeltaTable(table)  # delta-rs escapes the path it is given, as the protocol asks
    found.create_write_transaction([AddAction(name, size, {}, int(time.time() * 1000), True, None)],
                                   mode="append", schema=found.schema())

    with open(os.path.join(table, "_delta_log", f"{2:020d}.json")) as log:
        assert name not in log.read()  # the log spells it escaped
    commit = _commit(table, 2)
    assert [added.path for added in commit.files] == [name]
    assert delta_inserts.added_files(table, 2, 2) == [(2, name)]
    assert delta_inserts.inserted_rows(spark, table, 2, 2)["k"].tolist() == [7]
    assert list(follower.commits().inserted["k"]) == [7]
    # the follower holds the table's files by the names a whole read gives: when it next
    # reads the table whole (now and then, here at once), no file seems gone (no reset)
    monkeypatch.setenv(delta_io.RECHECK_SETTING, "0")
    _append(spark, table, [(8, "h")])
    followed = follower.commits()
    assert followed.version == 3 and not followed.removes_rows and list(followed.inserted["k"]) == [8]
    assert name in delta_io.data_files(table)[1]
