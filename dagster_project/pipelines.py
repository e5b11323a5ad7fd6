"""The example pipelines: the KX documentation's running sum, keyed on ``y`` and unkeyed; and a
ksqlDB state table over a Kafka topic."""

import os

import pandas as pd

import ops as sp

SCHEMA = {"x": "long", "y": "long"}


def _poll_seconds() -> int:
    """How often the examples' sensors look for new input: 30 s unless
    ``$LAKESTREAM_POLL_SECONDS`` says (bench/dagster_runs.py measures what each interval gives;
    the docs' Dagster guide has the figures)."""
    value = os.environ.get("LAKESTREAM_POLL_SECONDS", "30")
    if not value.isdigit() or int(value) < 1:
        raise sp.ConfigError(f"LAKESTREAM_POLL_SECONDS must be a whole number of seconds, at "
                             f"least 1; got {value!r}")
    return int(value)


POLL_SECONDS = _poll_seconds()
# The seed example's input: x,y = 1,0 2,0 3,0 1,1 2,1 3,1 4,0
SEED_ROWS = [{"x": x, "y": y} for x, y in [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1), (4, 0)]]


def running_sum(op: sp.Op, md: sp.Metadata, data: pd.DataFrame) -> pd.DataFrame:
    """Add ``x`` to the previous sum of the key (or of the whole stream when unkeyed)."""
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


running_sum_keyed = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
                     .map(running_sum, state=0)
                     .write.to_console()
                     .write.to_delta("sums")).named("running_sum").with_poll_interval(POLL_SECONDS)

running_sum_unkeyed = (sp.read.from_callback("publish", schema=SCHEMA)
                       .map(running_sum, state=0)
                       .write.to_console()
                       .write.to_delta("sums")).named("running_sum_unkeyed").with_poll_interval(POLL_SECONDS)

EXAMPLES = (running_sum_keyed, running_sum_unkeyed)

# ksqlDB's CREATE TABLE … AS SELECT … FROM <stream over a topic>: orders arrive on the Kafka topic
# 'orders' (JSON values); item_totals keeps, per item, the orders, quantity and revenue, exactly
# once, with its changelog. Run it with `python -m dagster_project.kafka_example`.
BOOTSTRAP = os.environ.get("LAKESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
TOPIC = "orders"
ORDERS = [{"item": item, "qty": qty, "price": price} for item, qty, price in [
    ("tea", 2, 3.5), ("coffee", 1, 4.0), ("tea", 1, 3.5), ("cake", 3, 2.25), ("coffee", 2, 4.0)]]



def item_totals_over(bootstrap: str) -> sp.Pipeline:
    """The state table ``item_totals`` over the topic ``orders`` of the brokers ``bootstrap``."""
    orders = sp.read.from_kafka(TOPIC, bootstrap=bootstrap, name="orders",
                                schema={"item": "string", "qty": "long", "price": "double"})
    return sp.sql("""CREATE TABLE item_totals AS
        SELECT item, COUNT(*) AS orders, SUM(qty) AS qty, SUM(qty * price) AS revenue
        FROM orders GROUP BY item EMIT CHANGES""", streams={"orders": orders}
    ).with_poll_interval(POLL_SECONDS)


item_totals = item_totals_over(BOOTSTRAP)


