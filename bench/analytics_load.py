"""Load test of the analytics server on loopback: 200 SSE clients over 20 distinct
subscriptions, a bounded number of batches. Reports computations per batch (must equal the
distinct subscriptions), delivery latency from the batch's changelog commit to client receipt (p50/p99) and
server memory. Never part of CI.

    .venv/bin/python bench/analytics_load.py [--clients 200 --distinct 20 --batches 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from datetime import timezone

import uvicorn
from delta.tables import DeltaTable

import ops as sp
from analytics import QueryManager, QueryServer
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic

from _common import peak_rss_mb, print_table, write_results

TOKEN = "load-token"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _subscribe(url: str, sym: str) -> str:
    body = json.dumps({"analytic": "cpu_by_server", "target": TARGET, "params": {"syms": [sym]}})
    request = urllib.request.Request(f"{url}/subscriptions", data=body.encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["client"]


async def _listen(port: int, client: str, received: dict, expected: int, deadline: float) -> None:
    """One SSE client: record when each batch's delta arrives (bounded by count and time)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /stream/{client}?token={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    seen = 0
    while seen < expected and time.monotonic() < deadline:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
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
    server = QueryServer(manager, {TOKEN: "load"}, poll_seconds=0.1)
    port = _port()
    runner = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=runner.run, daemon=True).start()
    while not runner.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    syms = [f"s{n}" for n in range(args.distinct)]
    pipeline.publish(spark, [{"sym": s, "cpu": 0.0} for s in syms], warehouse)
    pipeline.run_once(spark, warehouse)
    clients = [_subscribe(url, syms[n % args.distinct]) for n in range(args.clients)]
    received: dict[int, list[float]] = {}
    committed: dict[int, float] = {}
    deadline = time.monotonic() + 60 + 20 * args.batches

    async def listen_all() -> None:
        await asyncio.gather(*(_listen(port, c, received, args.batches, deadline) for c in clients))

    listeners = threading.Thread(target=asyncio.run, args=(listen_all(),), daemon=True)
    listeners.start()
    time.sleep(2)  # every stream connected
    for n in range(args.batches):
        pipeline.publish(spark, [{"sym": s, "cpu": float(n + 1)} for s in syms], warehouse)
        # the batch's changelog commit is its sink write: the progress callback runs right after
        pipeline.run_once(spark, warehouse,
                          progress=lambda batch: committed.__setitem__(batch.batch_id, time.time()))
    listeners.join(timeout=max(1, deadline - time.monotonic()))
    runner.should_exit = True

    # exact commit times: the changelog gets one Delta commit per batch, in batch order
    changelog = pipeline.sink(TABLE).changelog(pipeline.layout(warehouse))
    history = DeltaTable.forPath(spark, changelog).history().orderBy("version").collect()
    commits = [row["timestamp"].replace(tzinfo=timezone.utc).timestamp() for row in history]
    committed = dict(zip(sorted(committed), commits[-len(committed):]))
    latencies = sorted(t - committed[b] for b, times in received.items() if b in committed for t in times)
    per_batch = [manager.computations[(TARGET, b)] for b in sorted(committed)]
    deliveries = sum(len(received.get(b, [])) for b in committed)
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
    print_table(f"analytics load: {args.clients} SSE clients, {args.distinct} distinct subscriptions, "
                f"{args.batches} batches",
                ["computations/batch", "deliveries", "expected", "latency p50 s", "latency p99 s",
                 "peak RSS MiB"],
                [[statistics.mean(per_batch), deliveries, args.clients * args.batches, p(0.5), p(0.99),
                  peak_rss_mb()]])
    print(f"results: {write_results('analytics_load', {'clients': args.clients, 'distinct': args.distinct, 'batches': args.batches, 'computations_per_batch': per_batch, 'deliveries': deliveries, 'latency_p50_s': p(0.5), 'latency_p99_s': p(0.99), 'peak_rss_mb': peak_rss_mb()})}")


if __name__ == "__main__":
    main()
