"""``python -m dagster_project.kafka_example``: the Kafka example (``pipelines.item_totals``, a
ksqlDB state table over the topic ``orders``) end to end: it starts the embedded broker
(``.kafka/``, unless one answers at that address already), creates the topic, sends a few orders,
runs ``dagster job execute -m dagster_project -j run_item_totals``, prints the table, and stops
the broker it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ops as sp
from ops.devservers.kafka_broker import EmbeddedKafka
from ops.kafka_client import connection, create_topic, send_json

from .pipelines import BOOTSTRAP, ORDERS, TOPIC, item_totals


def _broker_answers(bootstrap: str) -> bool:
    try:
        connection(bootstrap, timeout=3).ends([])
        return True
    except sp.StreamError:
        return False


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    started = None
    if not _broker_answers(BOOTSTRAP):
        host, _, port = BOOTSTRAP.rpartition(":")
        if host not in ("127.0.0.1", "localhost") or "," in BOOTSTRAP:
            sys.exit(f"no Kafka broker answers at {BOOTSTRAP}, and only a local one can be started")
        print(f"==> starting the embedded Kafka broker on {BOOTSTRAP} (data in .kafka/)", flush=True)
        started = EmbeddedKafka.start(root / ".kafka", int(port))
    try:
        create_topic(BOOTSTRAP, TOPIC, partitions=3)
        sent = send_json(BOOTSTRAP, TOPIC, ORDERS, key="item")
        print(f"==> sent {sent} orders to topic {TOPIC!r}", flush=True)
        print("==> dagster job execute -m dagster_project -j run_item_totals", flush=True)
        env = dict(os.environ, LAKESTREAM_KAFKA_BOOTSTRAP=BOOTSTRAP,
                   DAGSTER_HOME=os.environ.get("DAGSTER_HOME", str(root / ".dagster_home")))
        done = subprocess.run([str(Path(sys.executable).with_name("dagster")), "job", "execute", "-m",
                               "dagster_project", "-j", "run_item_totals"], env=env, cwd=root,
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the job failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        for line in (done.stdout + done.stderr).splitlines():
            if " - INFO - " in line and ("batch " in line or "checkpoint" in line):
                print("   ", line.split(" - INFO - ")[-1])
        spark = sp.spark_session()
        table = item_totals.read_sink(spark, "item_totals")
        print("==> item_totals (a state table over the topic):")
        print(table[["item", "orders", "qty", "revenue"]].sort_values("item").to_string(index=False))
    finally:
        if started is not None:
            started.stop()
            print("==> stopped the embedded Kafka broker")


if __name__ == "__main__":
    main()
