"""Following a changelog from its log without Spark (analytics.delta_files, issue 54): appends
are read from the next commit's JSON and the files it added, without bringing the table up to
date; anything else (a reset, a schema change, a table made again) reads the table through
delta-rs, as before."""

from __future__ import annotations

import os
import shutil
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from analytics.delta_files import DeltaFiles
from analytics.live import LiveTable
from state import delta_io

SCHEMA = pa.schema([("sym", pa.string()), ("cpu", pa.float64()), ("at", pa.timestamp("us", "UTC")),
                    ("_batch_id", pa.int64()), ("_row", pa.int64()), ("_change", pa.string())])


def _batch(batch: int, syms: list[str], change: str = "update") -> pa.Table:
    return pa.table({"sym": syms, "cpu": [float(batch)] * len(syms),
                     "at": pa.array([batch * 1_000_000] * len(syms), pa.timestamp("us", "UTC")),
                     "_batch_id": [batch] * len(syms), "_row": list(range(len(syms))),
                     "_change": [change] * len(syms)}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "changelog")
    write_deltalake(path, _batch(1, ["a", "b"]), configuration={"delta.checkpointInterval": "10"})
    return path


def _no_full_reads(monkeypatch) -> list[str]:
    """Record every whole-table read (delta_io.data_files) the follower makes."""
    calls: list[str] = []
    original = delta_io.data_files

    def counted(path: str):
        calls.append(path)
        return original(path)
    monkeypatch.setattr(delta_io, "data_files", counted)
    return calls


def test_appends_are_followed_from_the_commit_files_alone(table, monkeypatch):
    files = DeltaFiles(table)
    version, rows = files.snapshot()
    assert version == 0 and sorted(rows["sym"]) == ["a", "b"]
    full_reads = _no_full_reads(monkeypatch)
    assert files.commits() is None  # nothing new: one failed open of the next commit file
    write_deltalake(table, _batch(2, ["a"]), mode="append")
    write_deltalake(table, _batch(3, ["c", "d"]), mode="append")
    first, second = files.commits(), files.commits()
    assert files.commits() is None
    assert full_reads == []
    assert (first.version, second.version) == (1, 2)
    assert not first.removes_rows and not second.removes_rows
    assert first.inserted.to_dict("records") == [
        {"sym": "a", "cpu": 2.0, "at": pd.Timestamp("1970-01-01 00:00:02"), "_batch_id": 2, "_row": 0,
         "_change": "update"}]  # times naive, in UTC, as the snapshot's read gives them
    assert list(second.inserted["sym"]) == ["c", "d"]
    assert list(second.inserted.dtypes) == list(rows.dtypes)


def test_a_reset_removing_rows_is_found_by_reading_the_table(table, monkeypatch):
    files = DeltaFiles(table)
    files.snapshot()
    write_deltalake(table, _batch(2, ["a"]), mode="append")
    DeltaTable(table).delete("_batch_id = 2")  # a reset discarding batch 2
    full_reads = _no_full_reads(monkeypatch)
    appended = files.commits()
    assert appended.version == 1 and not appended.removes_rows
    reset = files.commits()
    assert reset.version == 2 and reset.removes_rows and full_reads == [table]
    assert files.commits() is None


def test_a_table_made_again_at_its_path_is_read_afresh(table):
    live = LiveTable(table, ("sym",))
    write_deltalake(table, _batch(2, ["a"]), mode="append")
    assert [b for b, _ in live.follow().batches] == [2]
    shutil.rmtree(table)  # made again with as many commits: version 1 is another table's
    write_deltalake(table, _batch(1, ["x"]))
    write_deltalake(table, _batch(2, ["y"]), mode="append")
    write_deltalake(table, _batch(3, ["z"]), mode="append")
    followed = live.follow()
    assert followed.rewound
    assert sorted(live.frame()["sym"]) == ["x", "y", "z"]


def test_a_file_whose_name_the_log_escapes_is_read(table):
    files = DeltaFiles(table)
    files.snapshot()
    name = "odd dir/f%1 b.parquet"
    os.makedirs(os.path.join(table, "odd dir"))
    pq.write_table(_batch(2, ["e"]), os.path.join(table, name))
    size = os.path.getsize(os.path.join(table, name))
    DeltaTable(table).create_write_transaction(
        [AddAction(name, size, {}, int(time.time() * 1000), True, None)], mode="append", schema=SCHEMA)
    commit = files.commits()
    assert commit.version == 1 and list(commit.inserted["sym"]) == ["e"]
    version, rows = DeltaFiles(table).snapshot()  # the whole table's read finds it too
    assert version == 1 and sorted(rows["sym"]) == ["a", "b", "e"]


def test_a_schema_change_is_read_through_the_table(table):
    live = LiveTable(table, ("sym",))
    wider = _batch(2, ["a"]).append_column("note", pa.array(["new"]))
    write_deltalake(table, wider, mode="append", schema_mode="merge")
    write_deltalake(table, _batch(3, ["b"]).append_column("note", pa.array(["newer"])), mode="append")
    assert [b for b, _ in live.follow().batches] == [2, 3]
    frame = live.frame().set_index("sym")
    assert frame.loc["a", "note"] == "new" and frame.loc["b", "note"] == "newer"


def test_on_s3_an_appended_file_is_read_in_one_request(s3, s3_warehouse):
    """A poll that finds an append reads its commit's JSON, then each small file it added whole,
    in one ``GET`` (its size is in the log): no ``HEAD`` of it, no separate footer read. Counted from
    the server's access log (the reads hold the GIL while they wait, so no proxy in this process
    could answer them)."""
    path = f"{s3_warehouse}/changelog".replace("s3a://", "s3://")
    write_deltalake(path, _batch(1, ["a", "b"]))
    files = DeltaFiles(path)
    files.snapshot()
    write_deltalake(path, _batch(2, ["b", "c"]), mode="append")
    log = s3.folder / "server.log"
    time.sleep(0.5)  # the server writes its log line after its answer: the appends' are in
    before = len(log.read_text().splitlines())
    commit = files.commits()
    assert commit is not None and sorted(commit.inserted["sym"]) == ["b", "c"]
    time.sleep(0.5)
    table = path.removeprefix("s3://").split("/", 1)[1]
    asked = [line for line in log.read_text().splitlines()[before:] if table in line]
    data = [line for line in asked if ".parquet" in line]
    assert len(data) == 1 and '"GET ' in data[0], asked
