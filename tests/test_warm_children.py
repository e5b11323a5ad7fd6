"""Warm children (tests/warm_children.py): a module runs as ``__main__`` in the environment asked
for (its Spark Python workers too), in a child started before the request, and only a spare
whose session would be the same is used."""

import os

from tests.warm_children import WarmChildren

PROBE = """import os, sys
import ops
if __name__ == "__main__":
    spark = ops.spark_session()
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: os.environ.get("CRASH_TEST_PROBE")).collect()[0]  # by a Spark Python worker
    print(os.environ["CRASH_TEST_PROBE"], seen, os.environ["LAKESTREAM_SPARK_MASTER"], os.getpid())
    sys.exit(3)
"""


def test_a_spare_runs_the_module_as_main_and_only_for_the_same_session(tmp_path, child_env):
    (tmp_path / "probe.py").write_text(PROBE)
    env = dict(child_env, PYTHONPATH=f"{tmp_path}{os.pathsep}{child_env['PYTHONPATH']}")
    (tmp_path / "children").mkdir()
    children = WarmChildren(tmp_path / "children")
    try:
        first = children.run("probe", dict(env, CRASH_TEST_PROBE="one"))
        spares = children.waiting()
        second = children.run("probe", dict(env, CRASH_TEST_PROBE="two"))
        other_master = children.run("probe", dict(env, CRASH_TEST_PROBE="three",
                                                  LAKESTREAM_SPARK_MASTER="local[2]"))
    finally:
        children.close()

    said = [done.stdout.split() for done in (first, second, other_master)]
    assert [done.returncode for done in (first, second, other_master)] == [3, 3, 3]
    assert [words[:3] for words in said] == [["one", "one", "local[1]"],
                                             ["two", "two", "local[1]"],
                                             ["three", "three", "local[2]"]]
    assert len(spares) == 1 and int(said[1][3]) == spares[0]  # the spare started for it
    assert int(said[2][3]) not in spares  # another master: a session of its own
    assert children.waiting() == []
