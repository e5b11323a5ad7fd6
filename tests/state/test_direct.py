"""Appends committed by this process without Spark (state.lake.direct, through delta-rs), read back
and written by Spark."""

import json
import os
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest

from state import delta_io
from state.lake import direct, tables
from state.lake.direct import Outcome

ROWS = pd.DataFrame({"k": [1, 2, 3], "name": ["a", None, "c"], "x": [0.5, 1.5, 2.5],
                     "op": ["left", "right", "left"]})


def _table(spark, path, partition_by=(), **properties):
    tables.append(tables.to_frame(spark, ROWS), path, partition_by=partition_by,
                  properties=properties or None, txn=("app", 0))


def _sorted(frame):
    return frame.sort_values(["k", "op"]).reset_index(drop=True)


def test_appends_spark_reads_back_with_txn_and_metadata(spark, tmp_path):
    path = str(tmp_path / "t")
    _table(spark, path, partition_by=("op",))
    for n in range(1, 4):
        assert direct.append(ROWS.assign(k=ROWS.k + 10 * n), path, txn=("app", n),
                             user_metadata=json.dumps({"n": n})) is Outcome.COMMITTED
    assert direct.append(ROWS, path, txn=("app", 2)) is Outcome.SKIPPED  # seen: nothing written
    read = tables.read(spark, path).toPandas()
    assert len(read) == 12
    expected = pd.concat([ROWS.assign(k=ROWS.k + 10 * n) for n in range(4)])
    assert _sorted(read[list(ROWS.columns)]).equals(_sorted(expected))
    assert tables.recent_metadata(spark, path)[0] == json.dumps({"n": 3})
    # Spark's own idempotent append sees the transaction versions written here
    tables.append(tables.to_frame(spark, ROWS), path, txn=("app", 3))
    assert tables.read(spark, path).count() == 12
    # data skipping on the statistics written here keeps the right rows
    assert sorted(r.k for r in tables.read(spark, path).where("k > 21").collect()) == [22, 23, 31,
                                                                                      32, 33]


def test_tables_it_must_leave_to_spark(spark, tmp_path):
    missing = str(tmp_path / "missing")
    assert direct.append(ROWS, missing) is None
    path = str(tmp_path / "t")
    _table(spark, path)
    assert direct.append(ROWS.drop(columns=["x"]), path) is None  # not the table's columns
    assert direct.append(ROWS.assign(op=["a/b", "c", "d"]), path.replace("t", "t")) is not None
    constrained = str(tmp_path / "constrained")
    _table(spark, constrained)
    spark.sql(f"ALTER TABLE delta.`{constrained}` ADD CONSTRAINT positive CHECK (k > 0)")
    assert direct.append(ROWS, constrained) is None
    with pytest.raises(Exception, match="(?i)check constraint"):  # Spark enforces it
        tables.append_rows(spark, ROWS.assign(k=-1), constrained)
    assert direct.append(ROWS, "hdfs://namenode/t") is None  # not a store delta-rs serves


def test_partition_values_that_need_escaping_are_read_back_by_spark(spark, tmp_path):
    partitioned = str(tmp_path / "partitioned")
    _table(spark, partitioned, partition_by=("op",))
    odd = ROWS.assign(op=["a/b", "c d%", None])
    assert direct.append(odd, partitioned, txn=("app", 1)) is Outcome.COMMITTED
    read = tables.read(spark, partitioned).toPandas()
    assert sorted(read["op"].fillna("<null>")) == sorted(["left", "right", "left", "a/b", "c d%",
                                                          "<null>"])


def test_a_log_checkpoint_every_tenth_version_and_state_read_from_it(spark, tmp_path):
    path = str(tmp_path / "t")
    _table(spark, path)  # made by Spark: no delta.checkpointInterval, so Spark's default of 10
    for n in range(1, 13):
        assert direct.append(ROWS, path, txn=("app", n)) is Outcome.COMMITTED
    log = tmp_path / "t" / "_delta_log"
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 10
    for name in os.listdir(log):  # a new reader: what the log says comes from the checkpoint on
        if name.endswith(".json") and int(name[:20]) < 10:
            os.unlink(log / name)
    delta_io.snapshots.forget(path)
    assert direct.append(ROWS, path, txn=("app", 5)) is Outcome.SKIPPED
    assert direct.append(ROWS, path, txn=("app", 13)) is Outcome.COMMITTED
    assert tables.read(spark, path).count() == 3 * 14
    assert delta_io.latest_version(path) == 13


def test_a_table_created_by_its_first_append(spark, tmp_path):
    """Created as Spark's first append would: columns typed from the rows, partitions and
    properties; Spark reads and appends. Rows with a column of nulls only (void, as Spark
    types it) are left to Spark, which writes no such column into its files."""
    path = str(tmp_path / "t")
    rows = ROWS
    create = direct.NewTable(("op",), (("delta.dataSkippingStatsColumns", "k"),))
    assert direct.append(ROWS.assign(nothing=None), str(tmp_path / "void"), create=create) is None
    assert direct.append(rows, path, txn=("app", 0), create=create) is Outcome.COMMITTED
    spark_made = str(tmp_path / "spark_made")
    tables.append(tables.to_frame(spark, rows), spark_made, partition_by=("op",))
    assert tables.read(spark, path).schema == tables.read(spark, spark_made).schema
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    assert detail["partitionColumns"] == ["op"]
    assert detail["properties"] == {"delta.dataSkippingStatsColumns": "k",
                                    "delta.checkpointInterval": "10"}  # Spark's default, said
    tables.append(tables.to_frame(spark, rows.assign(k=rows.k + 10)), path, txn=("app", 1))
    assert direct.append(rows.assign(k=rows.k + 20), path, txn=("app", 2)) is Outcome.COMMITTED
    assert sorted(tables.read(spark, path).toPandas()["k"]) == [1, 2, 3, 11, 12, 13, 21, 22, 23]
    assert direct.append(ROWS, str(tmp_path / "naive"), create=direct.NewTable(
        fields=({"name": "k", "type": "decimal(10,2)", "nullable": True, "metadata": {}},))) is None


WRITER = """
import sys, pandas as pd
from state.lake import direct
path, app = sys.argv[1], sys.argv[2]
for n in range(25):
    assert direct.append(pd.DataFrame({"k": [n], "name": [app], "x": [1.0], "op": ["w"]}), path,
                         txn=(app, n), create=direct.NewTable(("op",))) is direct.Outcome.COMMITTED
"""


def test_two_processes_creating_and_appending_at_once_lose_nothing(spark, tmp_path):
    path = str(tmp_path / "t")  # no table yet: both race to create it, one commit wins
    env = dict(os.environ, PYTHONPATH=str(os.getcwd()))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, path, app], env=env)
               for app in ("one", "two")]
    assert [w.wait(120) for w in writers] == [0, 0]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    assert sorted(row.version for row in history) == list(range(50))  # none overwritten
    read = tables.read(spark, path).toPandas()
    assert sorted(read.groupby("name")["k"].apply(sorted).tolist()) == [list(range(25))] * 2


CREATOR = """
import sys, time
from state import delta_io
start, paths = float(sys.argv[1]), sys.argv[2:]
time.sleep(max(0.0, start - time.time()))  # both processes start creating at the same moment
for path in paths:
    assert delta_io.create(path, delta_io.Creation(
        ({"name": "k", "type": "long", "nullable": True, "metadata": {}},)))
"""


def test_two_processes_creating_an_empty_table_at_once_make_one_version(spark, tmp_path):
    """The loser of the race finds the winner's table: a retried creation would commit a second
    version (a continuous run read it as a batch of no rows)."""
    paths = [str(tmp_path / f"t{n}") for n in range(8)]
    env = dict(os.environ, PYTHONPATH=str(os.getcwd()))
    start = str(time.time() + 4)
    creators = [subprocess.Popen([sys.executable, "-c", CREATOR, start, *paths], env=env)
                for _ in range(2)]
    assert [c.wait(120) for c in creators] == [0, 0]
    assert [delta_io.latest_version(path) for path in paths] == [0] * len(paths)


def test_a_table_made_again_at_the_same_path_is_read_afresh(spark, tmp_path):
    path = str(tmp_path / "t")
    _table(spark, path)
    assert direct.append(ROWS, path, txn=("app", 5)) is Outcome.COMMITTED
    shutil.rmtree(path)
    _table(spark, path)  # a new table: it has seen only ("app", 0)
    tables.append(tables.to_frame(spark, ROWS), path, txn=("other", 1))  # as many commits
    assert direct.append(ROWS, path, txn=("app", 3)) is Outcome.COMMITTED
    assert tables.read(spark, path).count() == 3 * 3
