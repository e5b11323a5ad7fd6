"""Stream–stream joins end to end (Spark, Delta state, both modes): each side's own stream
time and a kept side's late records across a crash, and ksqlDB's ROWTIME: a stream registered
without ``timestamp=`` joins WITHIN on its records' own time, which its source gives (a
publish's time for a callback, a file's modification time for files; a Kafka record's
timestamp is not run here: it needs a broker)."""

import json
import os

import pandas as pd
import pytest

import ops as sp
from ops.testing import run_records

CLICKS = {"uid": "string", "page": "string"}
VIEWS = {"uid": "string", "ad": "string"}
# a click's views from the same moment to an hour after it
STATEMENT = ("CREATE STREAM clicked AS SELECT c.uid, c.page, v.ad FROM clicks c JOIN views v "
             "WITHIN (0 SECONDS, 1 HOUR) ON c.uid = v.uid")


def _pairs(frame):
    ordered = frame.sort_values(["_batch_id", "_row"])
    return list(zip(ordered["uid"], ordered["page"], ordered["ad"]))


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_callback_streams_join_on_their_publish_times(spark, mode):
    """Each publish is later than the one before: the view published before the click is
    before it (no pair), the one published after it pairs."""
    catalog = sp.Catalog()
    catalog.register("clicks", sp.read.from_callback("clicks", schema=CLICKS, max_versions=1))
    catalog.register("views", sp.read.from_callback("views", schema=VIEWS, max_versions=1))
    pipeline = sp.sql(STATEMENT, catalog=catalog).with_mode(mode)
    result = run_records(pipeline, {"views": [{"uid": "u1", "ad": "before"}]},
                         {"clicks": [{"uid": "u1", "page": "a"}]},
                         {"views": [{"uid": "u1", "ad": "after"}]}, spark=spark)
    assert _pairs(result.outputs["clicked"]) == [("u1", "a", "after")]


def _land(directory, name, records, modified):
    """A JSON file of ``records`` whose modification time is ``modified`` seconds after T0."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write("\n".join(json.dumps(record) for record in records))
    stamp = pd.Timestamp("2026-01-01", tz="UTC").timestamp() + modified
    os.utime(path, (stamp, stamp))


def test_file_streams_join_on_their_files_modification_times(spark, tmp_path):
    """The views' first file is 10 s older than the clicks' (no pair), the second 10 s newer."""
    clicks, views = str(tmp_path / "clicks"), str(tmp_path / "views")
    _land(clicks, "c1.json", [{"uid": "u1", "page": "a"}], modified=100)
    _land(views, "v1.json", [{"uid": "u1", "ad": "older"}], modified=90)
    _land(views, "v2.json", [{"uid": "u1", "ad": "newer"}], modified=110)
    catalog = sp.Catalog()
    catalog.register("clicks", sp.read.from_files(clicks, "json", schema=CLICKS, name="clicks"))
    catalog.register("views", sp.read.from_files(views, "json", schema=VIEWS, name="views"))
    pipeline = sp.sql(STATEMENT, catalog=catalog)
    warehouse = str(tmp_path / "warehouse")
    pipeline.run_once(spark, warehouse)
    assert _pairs(pipeline.read_sink(spark, "clicked", warehouse)) == [("u1", "a", "newer")]


def _t(second):
    return (pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=second)).isoformat()


@pytest.mark.parametrize("mode, step", [("driver", "before_checkpoint_commit"),
                                        ("distributed", "after_sink_write")])
def test_each_sides_time_and_late_records_survive_a_crash(spark, mode, step):
    """The views run ahead to 100, yet the click at 0 waits for the clicks' time and pairs with
    a view at 3; the clicks' time then passes 10 (u3's click, alone) and a click at 5 is late for
    it, so it is emitted at once with no view. Each side's time comes back from the checkpoint."""
    catalog = sp.Catalog()
    for name, schema in (("clicks", CLICKS), ("views", VIEWS)):
        catalog.register(name, sp.read.from_callback(
            name, schema={**schema, "ts": "timestamp"}, max_versions=1), timestamp="ts")
    pipeline = sp.sql("CREATE STREAM clicked AS SELECT c.uid, c.page, v.ad FROM clicks c LEFT "
                      "JOIN views v WITHIN 10 SECONDS GRACE PERIOD 0 SECONDS ON c.uid = v.uid",
                      catalog=catalog).with_mode(mode)
    result = run_records(
        pipeline,
        {"clicks": [{"uid": "u1", "page": "a", "ts": _t(0)}],
         "views": [{"uid": "u9", "ad": "q", "ts": _t(100)}]},
        {"views": [{"uid": "u1", "ad": "x", "ts": _t(3)}]},
        {"clicks": [{"uid": "u2", "page": "b", "ts": _t(50)}, {"uid": "u3", "page": "c", "ts": _t(10)}]},
        {"clicks": [{"uid": "u4", "page": "d", "ts": _t(5)}]},
        spark=spark, crash_at_step=step, crash=2)
    assert [(u, p, None if pd.isna(a) else a) for u, p, a in _pairs(result.outputs["clicked"])] == [
        ("u1", "a", "x"), ("u3", "c", None), ("u4", "d", None)]
