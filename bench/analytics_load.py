"""Load test of the analytics server on loopback: 200 SSE clients over 20 distinct
subscriptions, a bounded number of batches. Reports computations per batch (must equal the
distinct subscriptions), subscribe latency (POST /subscriptions, p50/p99), delivery latency from
the batch's changelog commit to client receipt (p50/p99; issue 54's target p50 <= 50 ms,
p99 <= 150 ms), the server's memory, and when each batch passed each step on its way (see
:class:`Steps`). ``--apart`` runs the pipeline and the clients in processes of their own (the
server's process holds the server alone, as in production); ``--s3`` puts the warehouse on the
local S3 server. Never part of CI; see bench/README.md.

    .venv/bin/python bench/analytics_load.py [--clients 200 --distinct 20 --batches 10] [--apart] [--s3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import uvicorn
from _common import headline, peak_rss_mb, print_table, write_results

# this checkout's packages, not the ones the venv's editable install points at (another worktree)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ops as sp  # noqa: E402
from analytics import QueryManager, QueryServer  # noqa: E402
from analytics import server as analytics_server  # noqa: E402
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic
from analytics.live import LiveTable  # noqa: E402
from ops.devservers.process import free_port  # noqa: E402
from ops.devservers.s3_server import LocalS3  # noqa: E402
from state import delta_io  # noqa: E402

TOKEN = "load-token"
BUCKET = "analytics-load"


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
    """When each changelog commit became visible, by the batch it holds (the pipeline makes
    one commit per batch, batch ids from 1, versions from 0): on a local disk its JSON's mtime;
    on S3 the commit's own timestamp (``commitInfo``, taken by the writer just before its
    ``PUT``, so an S3 latency is counted from a little earlier, never later)."""
    log = os.path.join(changelog, "_delta_log")
    if delta_io.on_object_store(changelog):
        times = delta_io.commit_times(changelog, 0, 1 << 30)
        return {version + 1: ms / 1000 for version, ms in times.items()}
    if not os.path.isdir(log):
        return {}
    versions = sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
    return {version + 1: os.stat(os.path.join(log, f"{version:020d}.json")).st_mtime
            for version in versions}


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time process ``pid`` has used so far (from ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Steps:
    """When each batch passed each step on its way to the clients (``time.time()``, the clock
    of the commit files' mtimes): the poll that found it starting (``poll``), its commit read
    (``read``), its deltas computed (``deltas``), queued for the clients (``queued``), handed to
    the first, the median and the last client's stream (``… written``), and the pipeline's
    ``run_once`` that made it returning (``run_once``). Recorded by wrapping the server's own
    calls on this instance; nothing is changed in what they do."""

    NAMES = ("poll", "read", "deltas", "queued", "first written", "median written", "last written",
             "run_once")

    def __init__(self, manager: QueryManager, server: QueryServer, live: LiveTable):
        self.at: dict[str, dict[int, float]] = {name: {} for name in self.NAMES}
        self.cpu_ms: list[float] = []  # the publishing thread's CPU time per publish with pushes
        publish, broadcast, follow = manager.publish_new, server.handles.broadcast, live.follow
        polling: list[float] = []

        def timed_follow():
            found = follow()
            for batch, _ in found.batches:
                self.at["poll"][batch], self.at["read"][batch] = polling[-1], time.time()
            return found

        def timed_publish():
            polling.append(time.time())
            cpu = time.thread_time()
            out = publish()
            if out:
                self.cpu_ms.append(1000 * (time.thread_time() - cpu))
            self._mark("deltas", out)
            return out

        def timed_broadcast(out):
            broadcast(out)
            self._mark("queued", out)

        live.follow, manager.publish_new, server.handles.broadcast = \
            timed_follow, timed_publish, timed_broadcast
        written: dict[int, list[float]] = {}
        event = analytics_server._event

        def timed_event(push):
            written.setdefault(push.batch_id, []).append(time.time())
            return event(push)
        analytics_server._event = timed_event
        self._written = written

    def _mark(self, step: str, out: dict) -> None:
        now = time.time()
        for pushes in out.values():
            for batch, _ in pushes:
                self.at[step].setdefault(batch, now)

    def ran(self, batch: int) -> None:
        self.at["run_once"][batch] = time.time()

    def medians(self, commits: dict[int, float], received: dict[int, list[float]]) -> dict[str, float]:
        """Each step's median, ms after the batch's changelog commit; clients' first, median
        and last receipt per batch likewise."""
        self.at["first written"] = {b: min(ts) for b, ts in self._written.items()}
        self.at["median written"] = {b: statistics.median(ts) for b, ts in self._written.items()}
        self.at["last written"] = {b: max(ts) for b, ts in self._written.items()}
        out = {step: _median_ms(self.at[step], commits) for step in self.NAMES}
        for name, pick in (("first client", min), ("median client", statistics.median),
                           ("last client", max)):
            out[name] = _median_ms({b: pick(ts) for b, ts in received.items() if ts}, commits)
        out["publish CPU"] = statistics.median(self.cpu_ms) if self.cpu_ms else float("nan")
        return out


def _median_ms(at: dict[int, float], commits: dict[int, float]) -> float:
    gaps = [1000 * (t - commits[b]) for b, t in at.items() if b in commits and b > 1]
    return statistics.median(gaps) if gaps else float("nan")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _listen(port: int, client: str, received: dict, expected: int, deadline: float) -> None:
    """One SSE client: record when each batch's delta arrives (bounded by count and time). It
    notes the event's ``id:`` (its batch) and takes the time at its ``data:`` line, parsing no
    JSON: the clients stand for browsers elsewhere, so the less of the bench's CPU they take
    from the server, the better."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /stream/{client}?token={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    seen, batch = 0, -1
    while seen < expected and time.monotonic() < deadline:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        if line.startswith(b"id: "):
            batch = int(line[4:])
        elif line.startswith(b"data: ") and batch >= 0:
            received.setdefault(batch, []).append(time.time())
            seen += 1
    writer.close()


class Feed:
    """The pipeline's batches: run in this process (``apart=False``: it competes with the server
    for the GIL, as in the bench's first form) or in a process of its own with its own Spark
    session (``apart=True``: as production runs them, a Dagster run beside a server process)."""

    def __init__(self, spark: Any, warehouse: str, syms: list[str], apart: bool):
        self.warehouse, self.syms, self.apart = warehouse, syms, apart
        self.ran: dict[int, float] = {}
        if apart:
            context = multiprocessing.get_context("spawn")
            self._orders, self._done = context.Queue(), context.Queue()
            self._child = context.Process(target=_feed_process, args=(warehouse, self._orders, self._done))
            self._child.start()
        else:
            self._spark, self._pipeline = spark, cpu_pipeline()

    def batch(self, cpu: float) -> None:
        """One batch of a reading per server, all ``cpu``; returns once ``run_once`` did (apart:
        once the batch is asked for, the run's end is noted in :attr:`ran` later)."""
        rows = [{"sym": s, "cpu": cpu} for s in self.syms]
        if self.apart:
            self._orders.put(rows)
        else:
            _run_batch(self._spark, self._pipeline, rows, self.warehouse)
            self.ran[len(self.ran) + 1] = time.time()  # batches count from 1, one per run

    def finish(self) -> None:
        """Wait for every batch asked for (apart: stop the pipeline's process)."""
        if self.apart:
            self._orders.put(None)
            self.ran.update(self._done.get(timeout=600))
            self._child.join(timeout=60)


def _run_batch(spark: Any, pipeline: sp.Pipeline, rows: list[dict], warehouse: str) -> None:
    pipeline.publish(spark, rows, warehouse)
    pipeline.run_once(spark, warehouse)


def _feed_process(warehouse: str, orders: Any, done: Any) -> None:
    """The pipeline's process (``Feed(apart=True)``): runs each batch ordered, in order, then
    reports when each run ended."""
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    pipeline, ran = cpu_pipeline(), {}
    while (rows := orders.get(timeout=600)) is not None:
        _run_batch(spark, pipeline, rows, warehouse)
        ran[len(ran) + 1] = time.time()  # batches count from 1, one per run
    done.put(ran)


def _listen_all(port: int, clients: list[str], expected: int, seconds: float) -> dict[int, list[float]]:
    """Every client's stream, until each has ``expected`` pushes or ``seconds`` passed."""
    received: dict[int, list[float]] = {}
    deadline = time.monotonic() + seconds

    async def listen_all() -> None:
        await asyncio.gather(*(_listen(port, c, received, expected, deadline) for c in clients))
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(listen_all())
    return received


def _loop_factory() -> Any:
    """uvloop's loop when it is installed (uvicorn's own choice for the server), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _listen_process(port: int, clients: list[str], expected: int, seconds: float, out: Any) -> None:
    out.put(_listen_all(port, clients, expected, seconds))


class Listeners:
    """The SSE clients, on a thread of this process or (``apart``) in a process of their own,
    as browsers elsewhere would be: then their reading takes no GIL from the server."""

    def __init__(self, port: int, clients: list[str], expected: int, seconds: float, apart: bool):
        self.received: dict[int, list[float]] = {}
        self._seconds = seconds
        args = (port, clients, expected, seconds)
        if apart:
            context = multiprocessing.get_context("spawn")
            self._out = context.Queue()
            self._worker: Any = context.Process(target=_listen_process, args=(*args, self._out))
        else:
            self._out = None
            self._worker = threading.Thread(target=lambda: self.received.update(_listen_all(*args)),
                                            daemon=True)
        self._worker.start()

    def join(self) -> dict[int, list[float]]:
        if self._out is not None:
            self.received = self._out.get(timeout=self._seconds + 60)
        self._worker.join(timeout=self._seconds + 60)
        return self.received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--distinct", type=int, default=20)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--apart", action="store_true",
                        help="run the pipeline and the clients in processes of their own, as in "
                             "production (default: all in this one, the bench's first form)")
    parser.add_argument("--s3", action="store_true",
                        help="the warehouse on the local S3 server (moto, started here) instead of a "
                             "local folder")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        warehouse = tempfile.mkdtemp(prefix="lakestream-load-")
        s3 = None
        if args.s3:  # before Spark starts: its s3a and delta-rs take the server from the environment
            s3 = stack.enter_context(LocalS3.start(os.path.join(warehouse, "s3")))
            s3.create_bucket(BUCKET)
            os.environ.update(s3.env())
            warehouse = f"s3a://{BUCKET}/run-{int(time.time())}"
        run(args, warehouse, s3)


def run(args: argparse.Namespace, warehouse: str, s3: LocalS3 | None) -> None:
    """The load: set up, subscribe, publish, listen, then report."""
    syms = [f"s{n}" for n in range(args.distinct)]
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    feed = Feed(spark, warehouse, syms, args.apart)
    feed.batch(0.0)  # batch 1: the table the clients subscribe to
    pipeline = cpu_pipeline()
    register_cpu_analytic()
    changelog = pipeline.sink(TABLE).changelog(pipeline.layout(warehouse))
    if args.apart:
        _wait_for_batch(changelog, 1)
    manager = QueryManager(spark, {TARGET: (pipeline, TABLE)}, warehouse)
    server = QueryServer(manager, {TOKEN: "load"}, max_handles_per_user=args.clients)
    steps = Steps(manager, server, manager._live[TARGET])  # noqa: SLF001 - the bench looks inside
    with _serving(server) as port:
        took: list[float] = []
        clients = [_subscribe(f"http://127.0.0.1:{port}", syms[n % args.distinct], took)
                   for n in range(args.clients)]
        listeners = Listeners(port, clients, args.batches, 60 + 20 * args.batches, args.apart)
        time.sleep(5 if args.apart else 2)  # every stream connected (a process starts slower)
        s3_cpu = _cpu_seconds(s3.pid) if s3 else 0.0
        for n in range(args.batches):
            feed.batch(float(n + 1))
        feed.finish()
        received = listeners.join()
        s3_cpu = _cpu_seconds(s3.pid) - s3_cpu if s3 else float("nan")
        steps.at["run_once"] = feed.ran
    manager.close()
    commits = _commit_times(changelog)
    published = [b for b in sorted(commits) if b > 1]  # batch 1 ran before anyone subscribed
    latencies = [t - commits[b] for b in published for t in received.get(b, [])]
    results = {"clients": args.clients, "distinct": args.distinct, "batches": args.batches,
               "apart": args.apart, "s3": args.s3,
               "computations_per_batch": [manager.computations[(TARGET, b)] for b in published],
               "deliveries": sum(len(received.get(b, [])) for b in published),
               "subscribe_p50_s": _quantile(took, 0.5), "subscribe_p99_s": _quantile(took, 0.99),
               "latency_p50_s": _quantile(latencies, 0.5), "latency_p99_s": _quantile(latencies, 0.99),
               "peak_rss_mb": peak_rss_mb(), "steps_ms": steps.medians(commits, received),
               "s3_server_cpu_ms_per_batch": 1000 * s3_cpu / max(1, len(published))}
    _report(results)


@contextlib.contextmanager
def _serving(server: QueryServer) -> Iterator[int]:
    """``server`` on a free loopback port (yielded) until the block ends; then its streams end
    and it stops (its poller before the interpreter's thread pool)."""
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=port, log_level="warning"))
    serving = threading.Thread(target=runner.run, daemon=True)
    serving.start()
    while not runner.started:
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.end_streams()
        runner.should_exit = True
        serving.join(timeout=30)


def _report(results: dict) -> None:
    where = "pipeline and clients in processes of their own" if results["apart"] else "all in one process"
    store = "S3 (local moto server)" if results["s3"] else "local disk"
    print_table(f"analytics load: {results['clients']} SSE clients, {results['distinct']} distinct "
                f"subscriptions, {results['batches']} batches, {where}, warehouse on {store}",
                ["computations/batch", "deliveries", "expected", "subscribe p50 ms", "subscribe p99 ms",
                 "commit->client p50 ms", "commit->client p99 ms", "peak RSS MiB"],
                [[statistics.mean(results["computations_per_batch"]), results["deliveries"],
                  results["clients"] * results["batches"],
                  1000 * results["subscribe_p50_s"], 1000 * results["subscribe_p99_s"],
                  1000 * results["latency_p50_s"], 1000 * results["latency_p99_s"], results["peak_rss_mb"]]])
    print_table("median ms after the changelog commit, per step", list(results["steps_ms"]),
                [list(results["steps_ms"].values())])
    if results["s3"]:
        print(f"S3 server (moto) CPU per batch: {results['s3_server_cpu_ms_per_batch']:.0f} ms")
    print(f"results: {write_results('analytics_load', results)}")
    form = " ".join(["apart" if results["apart"] else "together", *(["s3"] if results["s3"] else [])])
    headline(f"analytics_load {results['clients']}/{results['distinct']}/{results['batches']} {form}",
             f"p50 {1000 * results['latency_p50_s']:.0f} ms, p99 {1000 * results['latency_p99_s']:.0f} ms, "
             f"{results['peak_rss_mb']:.0f} MiB")


def _wait_for_batch(changelog: str, batch: int, seconds: float = 300) -> None:
    """Until the changelog holds ``batch`` (its commit file is there), bounded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if batch in _commit_times(changelog):
            return
        time.sleep(0.1)
    raise TimeoutError(f"batch {batch} never reached {changelog}")


if __name__ == "__main__":
    main()
