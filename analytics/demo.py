"""The server-monitoring example: CPU by server, a live table of the servers a client picks.

``python -m analytics.demo`` starts the query-manager server on 127.0.0.1:8765 with a feed that
publishes CPU readings for servers s1..s5 every two seconds (for ``--seconds``), and prints the
page's address.
"""

from __future__ import annotations

import argparse
import random
import threading
import time

import pandas as pd

import ops as sp

from .manager import QueryManager
from .registry import Registry, Subscription, default_registry
from .server import QueryServer, serve

TARGET, TABLE = "servers", "cpu_now"


def cpu_pipeline() -> sp.Pipeline:
    """Latest CPU per server (``sym``); a reading with a null ``cpu`` removes the server."""
    return (sp.read.from_callback("cpu", schema={"sym": "string", "cpu": "double"})
            .as_table("sym").write.to_table(TABLE)).named(TARGET)


def _in_syms(subscription: Subscription, rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["sym"].isin(subscription.params["syms"])] if len(rows) else rows


def register_cpu_analytic(registry: Registry = default_registry) -> None:
    """``cpu_by_server(syms)`` in ``registry``: the subscribed servers' rows, snapshot and changes."""
    registry.register("cpu_by_server", params={"syms": "list[string]"},
                      snapshot=_in_syms, delta=_in_syms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--seconds", type=float, default=600, help="how long the feed runs")
    parser.add_argument("--token", default="demo-token", help="token of the demo user")
    args = parser.parse_args()
    spark = sp.spark_session()
    pipeline = cpu_pipeline()
    register_cpu_analytic()
    manager = QueryManager(spark, {TARGET: (pipeline, TABLE)})
    server = QueryServer(manager, {args.token: "demo"})

    def feed() -> None:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:  # bounded: the demo stops feeding after --seconds
            pipeline.publish(spark, [{"sym": f"s{n}", "cpu": round(random.uniform(0, 100), 1)}
                                     for n in range(1, 6)])
            pipeline.run_once(spark)
            time.sleep(2)

    threading.Thread(target=feed, daemon=True).start()
    print(f"open http://127.0.0.1:{args.port}/?token={args.token}&auto=1", flush=True)
    serve(server, port=args.port)


if __name__ == "__main__":
    main()
