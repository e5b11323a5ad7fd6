"""Delta I/O on S3 without Spark (state.delta_io, delta-rs): concurrent writers, idempotence,
and tables that Spark and delta-rs both write, read, merge and vacuum."""

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from delta.tables import DeltaTable as SparkDeltaTable

from state import appended, delta_io, direct, tables
from state.direct import NewTable, Outcome
from tests.conftest import ROOT

_WRITER = textwrap.dedent("""
    import sys
    import pandas as pd
    from state import direct

    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        rows = pd.DataFrame({"writer": [writer], "i": [i]})
        done = direct.append(rows, path, txn=(writer, i), user_metadata=f"{writer}-{i}",
                             create=direct.NewTable())
        assert done is direct.Outcome.COMMITTED, done
""")


def _racing(script, path, writers, count):
    """``script`` run by one process per writer name at once, each writing ``count`` times."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    running = [subprocess.Popen([sys.executable, "-c", script, path, name, str(count)], env=env,
                                stderr=subprocess.PIPE, text=True) for name in writers]
    for writer in running:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()[-2000:]


def test_two_processes_appending_to_one_s3_table_lose_nothing(s3_warehouse):
    path = f"{s3_warehouse}/shared"
    _racing(_WRITER, path, ("a", "b"), 12)

    rows = delta_io.table(path).to_pandas()
    assert sorted(zip(rows["writer"], rows["i"])) == [(w, i) for w in "ab" for i in range(12)]
    assert delta_io.latest_version(path) == 23  # one commit per append: none overwritten
    assert sorted(delta_io.recent_metadata(path, 24)) == sorted(f"{w}-{i}" for w in "ab" for i in range(12))


def test_an_append_seen_before_is_skipped_and_a_new_one_commits(s3_warehouse):
    path = f"{s3_warehouse}/idempotent"
    rows = pd.DataFrame({"k": [1, 2]})
    assert direct.append(rows, path, txn=("app", 5), create=NewTable()) is Outcome.COMMITTED
    assert direct.append(rows, path, txn=("app", 5)) is Outcome.SKIPPED
    assert direct.append(rows, path, txn=("app", 4)) is Outcome.SKIPPED
    assert direct.append(rows, path, txn=("app", 6)) is Outcome.COMMITTED
    assert len(delta_io.table(path).to_pandas()) == 4


_UPSERTER = textwrap.dedent("""
    import sys
    import pandas as pd
    from state import delta_io, direct

    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    how = delta_io.Upsert(("k",), version="v", change="c")
    for i in range(count):
        rows = pd.DataFrame({"k": [writer, "shared"], "n": [i, i], "v": [i, i],
                             "c": ["update", "update"]})
        assert direct.upsert(rows, path, how, create=direct.NewTable()) is direct.Outcome.COMMITTED
""")


def test_upserts_keep_the_newest_row_per_key_across_replays_and_racing_writers(s3_warehouse):
    """The state table's merge by delta-rs: a replayed or older row changes nothing, a delete
    removes its key (and inserts none), and two processes merging at once lose no commit."""
    path = f"{s3_warehouse}/latest"
    how = delta_io.Upsert(("k",), version="v", change="c")

    def merged(k, n, v, c):
        rows = pd.DataFrame({"k": k, "n": n, "v": v, "c": c})
        assert direct.upsert(rows, path, how, create=NewTable()) is Outcome.COMMITTED
        table = delta_io.table(path).to_pandas().sort_values("k")
        return list(zip(table["k"], table["n"], table["v"]))

    assert merged(["a", "b"], [1, 2], [1, 1], ["insert"] * 2) == [("a", 1, 1), ("b", 2, 1)]
    assert merged(["a", "b", "c"], [5, None, None], [2, 2, 2], ["update", "delete", "delete"]) == [
        ("a", 5, 2)]
    assert merged(["a", "b"], [1, 2], [1, 1], ["insert"] * 2) == [("a", 5, 2), ("b", 2, 1)]
    assert merged(["a"], [5], [2], ["update"]) == [("a", 5, 2), ("b", 2, 1)]  # a replay

    racing = f"{s3_warehouse}/raced"
    _racing(_UPSERTER, racing, ("x", "y"), 8)
    table = delta_io.table(racing).to_pandas().sort_values("k")
    assert list(zip(table["k"], table["n"])) == [("shared", 7), ("x", 7), ("y", 7)]
    assert delta_io.latest_version(racing) == 16  # the creation, then one commit per merge


def test_an_upsert_into_a_table_with_the_feed_on_is_left_to_spark(s3_warehouse):
    path = f"{s3_warehouse}/fed"
    delta_io.create(path, delta_io.Creation(
        ({"name": "k", "type": "string", "nullable": True, "metadata": {}},
         {"name": "v", "type": "long", "nullable": True, "metadata": {}}),
        properties=(("delta.enableChangeDataFeed", "true"),)))
    rows = pd.DataFrame({"k": ["a"], "v": [1], "c": ["insert"]})
    assert direct.upsert(rows, path, delta_io.Upsert(("k",), version="v", change="c")) is None
    assert delta_io.latest_version(path) == 0


def test_a_table_spark_made_with_the_feed_is_appended_by_delta_rs_then_merged_by_spark(
        spark, s3_warehouse):
    path = f"{s3_warehouse}/from_spark"
    (spark.createDataFrame([(1, "a")], "id LONG, v STRING").write.format("delta")
     .option("delta.enableChangeDataFeed", "true").save(path))
    assert direct.append(pd.DataFrame({"id": [2, 3], "v": ["b", "c"]}), path,
                         txn=("rs", 1)) is Outcome.COMMITTED

    # delta-rs reads what it appended through the feed, as Spark does
    inserted = appended.inserted_rows(spark, path, 1, 1, order_by=("id",))
    assert inserted[["_commit_version", "id", "v"]].values.tolist() == [[1, 2, "b"], [1, 3, "c"]]
    target = SparkDeltaTable.forPath(spark, path)
    (target.alias("t").merge(spark.createDataFrame([(2, "B")], "id LONG, v STRING").alias("s"),
                             "t.id = s.id").whenMatchedUpdateAll().execute())
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    target.vacuum(0)
    got = spark.read.format("delta").load(path).orderBy("id").toPandas()
    assert got.values.tolist() == [[1, "a"], [2, "B"], [3, "c"]]
    assert delta_io.table(path).transaction_version("rs") == 1  # Spark kept delta-rs's txn


def test_a_table_delta_rs_made_is_appended_merged_and_vacuumed_by_spark_then_by_delta_rs_again(
        spark, s3_warehouse):
    path = f"{s3_warehouse}/from_rs"
    feed = (("delta.enableChangeDataFeed", "true"),)
    schema = ({"name": "id", "type": "long", "nullable": True, "metadata": {}},
              {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}})
    rows = pd.DataFrame({"id": [1], "at": pd.to_datetime(["2026-11-26 10:00"], utc=True)})
    assert direct.append(rows, path, create=NewTable(properties=feed, fields=schema)) is Outcome.COMMITTED
    tables.append(spark.createDataFrame([(2,)], "id LONG").selectExpr(
        "id", "TIMESTAMP'2026-11-26 11:00:00' AS at"), path, txn=("spark", 1))
    SparkDeltaTable.forPath(spark, path).delete("id = 1")
    assert direct.append(pd.DataFrame({"id": [3], "at": pd.to_datetime(["2026-11-26 12:00"], utc=True)}),
                         path, txn=("rs", 1)) is Outcome.COMMITTED

    assert sorted(delta_io.table(path).to_pandas()["id"]) == [2, 3]
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [2, 3]
    assert tables.latest_version(path) == 3 and tables.columns(path) == ("id", "at")
    changes = spark.read.format("delta").option("readChangeFeed", "true").option(
        "startingVersion", 0).load(path).where("_change_type = 'delete'").collect()
    assert [row.id for row in changes] == [1]  # Spark's delete wrote its change file


def test_the_server_starts_and_stops_from_the_shell(tmp_path):
    command = [sys.executable, "-m", "ops.devservers.s3_server"]
    folder = ["--dir", str(tmp_path / "s3"), "--port", "0"]
    started = subprocess.run([*command, "start", *folder[:2], "--bucket", "lake"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    try:
        assert started.returncode == 0, started.stderr
        assert "export AWS_ENDPOINT_URL=http://127.0.0.1:" in started.stdout
        status = subprocess.run([*command, "status", *folder[:2]], capture_output=True, text=True,
                                cwd=ROOT)
        assert status.stdout.startswith("running at http://127.0.0.1:")
    finally:
        stopped = subprocess.run([*command, "stop", *folder[:2]], capture_output=True, text=True,
                                 cwd=ROOT)
    assert stopped.stdout.strip() == "S3 server stopped"
    assert subprocess.run([*command, "status", *folder[:2]], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip() == "not running"


@pytest.mark.parametrize("path", ["/tmp/wh/p/_state", "file:/tmp/wh", "hdfs://nn/wh"])
def test_only_object_stores_go_to_delta_rs(path):
    assert not delta_io.on_object_store(path)


def test_spark_commits_to_s3_with_a_conditional_put(spark, s3_warehouse):
    # two creations of one commit file, both opened before either is written: S3 takes the
    # first and refuses the second (412), as Delta's S3 log store here asks it to
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(f"{s3_warehouse}/raced/_delta_log/00000000000000000000.json")
    fs = path.getFileSystem(conf)
    store = jvm.io.lakestream.delta.ConditionalPutLogStore
    first, second = (fs.createFile(path).overwrite(False).must(store.CONDITIONAL, True).build()
                     for _ in range(2))
    first.write(bytearray(b"first\n"))
    first.close()
    second.write(bytearray(b"second\n"))
    with pytest.raises(Exception, match="(?i)412|precondition|RemoteFileChanged"):
        second.close()
    assert spark.conf.get("spark.delta.logStore.s3a.impl") == "io.lakestream.delta.ConditionalPutLogStore"


def test_a_spark_writer_racing_a_delta_rs_writer_on_one_s3_table_loses_nothing(spark, s3_warehouse):
    path = f"{s3_warehouse}/raced_table"
    spark.createDataFrame([("seed", 0)], "writer STRING, i LONG").write.format("delta").save(path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rival = subprocess.Popen([sys.executable, "-c", _WRITER, path, "delta-rs", "15"], env=env,
                             stderr=subprocess.PIPE, text=True)
    for i in range(15):
        (spark.createDataFrame([("spark", i)], "writer STRING, i LONG").write.format("delta")
         .mode("append").save(path))
    assert rival.wait(timeout=300) == 0, rival.stderr.read()[-2000:]

    rows = spark.read.format("delta").load(path).toPandas()
    assert sorted(zip(rows["writer"], rows["i"])) == sorted(
        [("seed", 0)] + [(w, i) for w in ("delta-rs", "spark") for i in range(15)])
    assert delta_io.latest_version(path) == 30  # every commit its own version: none overwritten
