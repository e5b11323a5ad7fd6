"""A lazy Spark session starts a JVM only when something needs one: a driver-mode run on a
local disk needs none (a global table's appends and its truncation included), a run that joins
a table through Spark starts it once. Each case runs in a child process of its own, since the
suite's session runs in this one."""

import json
import subprocess
import sys
import textwrap

from tests.spark_settings import ROOT

_CHILD = textwrap.dedent("""
    import json, sys
    import ops as sp

    warehouse, kind = sys.argv[1], sys.argv[2]
    starts = []
    spark = sp.lazy_spark_session(sp.SparkConfig(master="local[1]"),
                                  on_start=lambda: starts.append("start"))
    audit = sp.global_table("audit", index="idx")

    def running_sum(op, md, data):
        audit.append(data[["k", "x"]])
        total = sp.get(op, md) + data["x"].cumsum()
        sp.set(op, md, int(total.iloc[-1]))
        return data.assign(total=total)

    stream = sp.read.from_callback("events", key="k", schema={"k": "string", "x": "long"})
    if kind == "join":  # a table looked up through Spark while the batch runs
        import pandas as pd
        from deltalake import write_deltalake
        names = warehouse + "/names"
        write_deltalake(names, pd.DataFrame({"k": ["a"], "name": ["ay"]}))
        stream = stream.join_table(names, on="k")
    pipeline = (stream.map(running_sum, state=0).write.to_delta("sums")
                ).named("lazy_" + kind).with_hooks(audit)
    for rows in ([{"k": "a", "x": 1}, {"k": "a", "x": 2}], [{"k": "a", "x": 4}]):
        pipeline.publish(spark, rows, warehouse)
        pipeline.run_once(spark, warehouse)
    # what a sink reader and the checks ask, after the runs
    problems = (sp.checkpoint_problems(spark, pipeline, warehouse)
                + sp.global_table_problems(spark, pipeline, warehouse))
    before_read = spark.started
    totals = [int(t) for t in pipeline.read_sink(sp.spark_session(), "sums", warehouse)["total"]]
    print(json.dumps({"starts": starts, "started_before_read": before_read,
                      "totals": totals, "problems": problems,
                      "time_zone": spark.conf.get("spark.sql.session.timeZone")}))
""")


def _run(kind: str, warehouse: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, warehouse, kind], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_driver_mode_run_on_a_local_disk_starts_no_jvm(warehouse):
    seen = _run("plain", warehouse)
    # two publishes, two runs with a global table (appends, truncation on recovery, the fence
    # against a losing run's rows), the checks: no JVM
    assert seen["started_before_read"] is False
    assert seen["totals"] == [1, 3, 7] and seen["problems"] == []
    assert seen["starts"] == []  # the reader started its own session, not the lazy one
    assert seen["time_zone"] == "UTC"


def test_a_run_that_needs_spark_starts_the_lazy_session_once(warehouse):
    seen = _run("join", warehouse)
    assert seen["started_before_read"] is True and seen["starts"] == ["start"]
    assert seen["totals"] == [1, 3, 7] and seen["problems"] == []
