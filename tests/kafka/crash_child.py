"""The Kafka crash tests' pipelines, run in a child process (``python -m tests.kafka.crash_child``)
that a test kills at a protocol step (``LAKESTREAM_CRASH_AT``): a running sum per record key
from one topic into another, exactly once, in batches of at most four offsets; or, with
``KAFKA_TARGET`` unset, the Kafka example's SQL state table over a topic, two offsets a batch."""

import os

import ops as sp


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def build(bootstrap: str, source: str, target: str, mode: str = "driver") -> sp.Pipeline:
    return (sp.read.from_kafka(source, bootstrap=bootstrap, schema={"k": "string", "x": "long"},
                               max_records=4)
            .map(running_sum, state=0)
            .write.to_kafka(target, bootstrap=bootstrap, key="k", name="sums")
            ).named("kafka_crashy").with_mode(mode)


def build_table(bootstrap: str, source: str) -> sp.Pipeline:
    orders = sp.read.from_kafka(source, bootstrap=bootstrap, name="orders", max_records=2,
                                schema={"item": "string", "qty": "long", "price": "double"})
    return sp.sql("""CREATE TABLE item_totals AS
        SELECT item, COUNT(*) AS orders, SUM(qty) AS qty FROM orders GROUP BY item EMIT CHANGES""",
                  streams={"orders": orders}).named("kafka_table_crashy")


if __name__ == "__main__":
    bootstrap, source = os.environ["KAFKA_BOOTSTRAP"], os.environ["KAFKA_SOURCE"]
    pipeline = (build(bootstrap, source, os.environ["KAFKA_TARGET"], os.environ.get("KAFKA_MODE", "driver"))
                if "KAFKA_TARGET" in os.environ else build_table(bootstrap, source))
    pipeline.run_once(sp.lazy_spark_session())  # as a Dagster step: a JVM only if needed
