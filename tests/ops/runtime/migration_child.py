"""The pipelines of the pipeline-change tests, and a child process that migrates one
(``python -m tests.ops.runtime.migration_child``), so a test can SIGKILL it mid-migration.

Version 1 keeps a running sum per ``y`` as an int under the name ``sum``; version 2 keeps it as
a float under ``total``: the docs' rename-plus-transform change
(docs/pages/guides/changing-pipelines.md).
"""

import ops as sp

SCHEMA = {"x": "long", "y": "long"}


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def running_total(op, md, data):
    total = sp.get(op, md) + data["x"].astype(float).cumsum()
    sp.set(op, md, float(total.iloc[-1]))
    return data.assign(total=total)


def version_1(key: str = "y", mode: str = "driver", **stored):
    return (sp.read.from_callback("publish", key=key, schema=SCHEMA)
            .map(running_sum, state=0, name="sum", **stored).write.to_delta("out")
            ).named("changing").with_mode(mode)


def version_2(mode: str = "driver"):
    return (sp.read.from_callback("publish", key="y", schema=SCHEMA)
            .map(running_total, state=0.0, name="total").write.to_delta("out")
            ).named("changing").with_mode(mode)


def migrate_to_version_2(spark, warehouse=None):
    return sp.migrate(spark, version_2(), rename={"sum": "total"}, transform={"total": float},
                      warehouse=warehouse, name="to_total")


if __name__ == "__main__":
    session = sp.lazy_spark_session()  # as a Dagster step: a JVM only if the run needs one
    print(migrate_to_version_2(session))
