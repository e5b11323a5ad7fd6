"""Load test of the analytics server on loopback: 200 SSE clients over 20 distinct
subscriptions, a bounded number of batches. Reports computations per batch (must equal the
distinct subscriptions), subscribe latency (POST /subscriptions, p50/p99), delivery latency from
the batch's changelog commit (when its ``_delta_log`` JSON appeared: its mtime) to client
receipt (p50/p99; target p50 <= 100 ms, p99 <= 300 ms) and server memory. Never part of CI.

    .venv/bin/python bench/analytics_load.py [--clients 200 --distinct 20 --batches 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

import uvicorn
from _common import peak_rss_mb, print_table, write_results

# this checkout's packages, not the ones the venv's editable install points at (another worktree)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ops as sp  # noqa: E402
from analytics import QueryManager, QueryServer  # noqa: E402
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic

TOKEN = "load-token"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _subscribe(url: str, sym: str, took: list[float]) -> str:
    """Subscribe one client; appends how long the request took to ``took``."""
    body = json.dumps({"analytic": "cpu_by_server", "target": TARGET, "params": {"syms": [sym]}})
    request = urllib.request.Request(f"{url}/subscriptions", data=body.encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        client = json.load(response)["client"]
    took.append(time.perf_counter() - started)
    return client


def _commit_times(changelog: str) -> dict[int, float]:
    """When each changelog commit became visible (its JSON's mtime), by the batch it holds:
    the pipeline makes one commit per batch, batch ids from 1, versions from 0."""
    log = os.path.join(changelog, "_delta_log")
    versions = sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
    return {version + 1: os.stat(os.path.join(log, f"{version:020d}.json")).st_mtime
            for version in versions}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _listen(port: int, client: str, received: dict, expected: int, deadline: float) -> None:
    """One SSE client: record when each batch's delta arrives (bounded by count and time)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /stream/{client}?token={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    seen = 0
    while seen < expected and time.monotonic() < deadline:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        if line.startswith(b"data: "):
            batch = json.loads(line[6:])["batch_id"]
            received.setdefault(batch, []).append(time.time())
            seen += 1
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--distinct", type=int, default=20)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    warehouse = tempfile.mkdtemp(prefix="lakestream-load-")
    pipeline = cpu_pipeline()
    register_cpu_analytic()
    manager = QueryManager(spark, {TARGET: (pipeline, TABLE)}, warehouse)
    server = QueryServer(manager, {TOKEN: "load"}, max_handles_per_user=args.clients)
    port = _port()
    runner = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=runner.run, daemon=True).start()
    while not runner.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    syms = [f"s{n}" for n in range(args.distinct)]
    pipeline.publish(spark, [{"sym": s, "cpu": 0.0} for s in syms], warehouse)
    pipeline.run_once(spark, warehouse)
    took: list[float] = []
    clients = [_subscribe(url, syms[n % args.distinct], took) for n in range(args.clients)]
    received: dict[int, list[float]] = {}
    deadline = time.monotonic() + 60 + 20 * args.batches

    async def listen_all() -> None:
        await asyncio.gather(*(_listen(port, c, received, args.batches, deadline) for c in clients))

    listeners = threading.Thread(target=asyncio.run, args=(listen_all(),), daemon=True)
    listeners.start()
    time.sleep(2)  # every stream connected
    for n in range(args.batches):
        pipeline.publish(spark, [{"sym": s, "cpu": float(n + 1)} for s in syms], warehouse)
        pipeline.run_once(spark, warehouse)
    listeners.join(timeout=max(1, deadline - time.monotonic()))
    server.end_streams()
    runner.should_exit = True
    manager.close()

    commits = _commit_times(pipeline.sink(TABLE).changelog(pipeline.layout(warehouse)))
    published = [b for b in sorted(commits) if b > 1]  # batch 1 ran before anyone subscribed
    latencies = [t - commits[b] for b in published for t in received.get(b, [])]
    per_batch = [manager.computations[(TARGET, b)] for b in published]
    deliveries = sum(len(received.get(b, [])) for b in published)
    results = {"clients": args.clients, "distinct": args.distinct, "batches": args.batches,
               "computations_per_batch": per_batch, "deliveries": deliveries,
               "subscribe_p50_s": _quantile(took, 0.5), "subscribe_p99_s": _quantile(took, 0.99),
               "latency_p50_s": _quantile(latencies, 0.5), "latency_p99_s": _quantile(latencies, 0.99),
               "peak_rss_mb": peak_rss_mb()}
    print_table(f"analytics load: {args.clients} SSE clients, {args.distinct} distinct subscriptions, "
                f"{args.batches} batches",
                ["computations/batch", "deliveries", "expected", "subscribe p50 ms", "subscribe p99 ms",
                 "commit->client p50 ms", "commit->client p99 ms", "peak RSS MiB"],
                [[statistics.mean(per_batch), deliveries, args.clients * args.batches,
                  1000 * results["subscribe_p50_s"], 1000 * results["subscribe_p99_s"],
                  1000 * results["latency_p50_s"], 1000 * results["latency_p99_s"], peak_rss_mb()]])
    print(f"results: {write_results('analytics_load', results)}")


if __name__ == "__main__":
    main()
