"""Shared helpers for the benchmarks: peak memory, draining runs, result files, table printing."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def peak_rss_mb() -> float:
    """Peak resident memory of this (driver) process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tree_rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process and all its descendants (the local JVM is the driver's
    child), MiB, from ``/proc``; 0 for a process that is gone."""
    pid = pid or os.getpid()
    try:
        with open(f"/proc/{pid}/status") as status:
            rss = next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
        children = [int(c) for task in os.listdir(f"/proc/{pid}/task")
                    for c in open(f"/proc/{pid}/task/{task}/children").read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return rss / 1024 + sum(tree_rss_mb(child) for child in children)


@contextmanager
def peak_memory(into: dict, spark=None, pid: int | None = None, every_s: float = 0.25):
    """Sample the process tree's RSS during the block; store its peak in ``into["peak_rss_mb"]``
    and, given a classic session, the driver JVM's heap peak in ``into["peak_jvm_heap_mb"]``
    (the peak counters are reset first, so it is this block's own peak)."""
    pools = _heap_pools(spark) if spark is not None else []
    for pool in pools:
        pool.resetPeakUsage()
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_mb(pid))
            done.wait(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        done.set()
        sampler.join()
        into["peak_rss_mb"] = peak[0]
        if pools:
            into["peak_jvm_heap_mb"] = sum(p.getPeakUsage().getUsed() for p in pools) / 2**20


def _heap_pools(spark) -> list:
    jvm = spark.sparkContext._jvm
    pools = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    return [pool for pool in pools if str(pool.getType().toString()).lower().startswith("heap")]


def drain_query(spark, stream, workdir: str, sink: str = "delta", options: dict | None = None) -> dict:
    """Run a Structured Streaming query into a Delta sink (``<workdir>/out``; or another
    ``sink`` format with its ``options``, e.g. ``"kafka"`` and a topic) until its input is
    drained (``availableNow``): wall seconds, input rows and per-trigger latencies, peak memory."""
    result: dict = {}
    with peak_memory(result, spark):
        started = time.perf_counter()
        writer = (stream.writeStream.format(sink).outputMode("append").options(**(options or {}))
                  .option("checkpointLocation", f"{workdir}/checkpoint").trigger(availableNow=True))
        query = writer.start(f"{workdir}/out") if sink == "delta" else writer.start()
        query.awaitTermination()
        result["seconds"] = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    result["events"] = sum(p["numInputRows"] for p in progress)
    result["batch_latencies"] = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return result


@contextmanager
def phase_times(into: dict[str, list[float]], phases: dict[str, tuple[type, str]]):
    """Append the seconds of every call of the methods ``phases`` names (phase -> (class,
    method)) to ``into[phase]`` for the block's duration: the methods are wrapped, then put
    back. Calls in other threads (a run's writer threads) are timed too."""
    originals = [(owner, name, owner.__dict__[name]) for owner, name in phases.values()]
    for phase, (owner, name, original) in zip(phases, originals):
        setattr(owner, name, _timed(original, into[phase]))
    try:
        yield into
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _timed(function, seconds: list[float]):
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)
    return timed


def per_batch(times: dict[str, list[float]], batches: int, phases: dict) -> dict[str, float]:
    """Each phase's total seconds divided by ``batches`` (phases that never ran left out)."""
    return {phase: sum(times[phase]) / batches for phase in phases if times.get(phase)}


def write_results(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": platform.platform(), "cpus": _cpus(), "at": time.time(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    return path


def headline(bench: str, figures: str) -> str:
    """The line to add to bench/README.md's "Headline runs" table for this run, printed and
    returned: when (UTC), the commit of the checkout the bench ran from (``+`` when it had
    changes), the machine's load before the run's end, the bench with its arguments, and its
    figures. So a regression shows against the lines before it the next time anyone runs it.

    >>> headline("demo 1/2", "p50 1 ms")  # doctest: +ELLIPSIS
    headline (bench/README.md): | 20... | demo 1/2 | load ... | p50 1 ms |
    '| 20... | demo 1/2 | load ... | p50 1 ms |'
    """
    line = (f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {_commit()} | {bench} "
            f"| load {os.getloadavg()[0]:.1f} | {figures} |")
    print(f"headline (bench/README.md): {line}")
    return line


def _commit() -> str:
    """The short commit of the checkout this bench is in, ``+`` when its files differ from it."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                 capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (commit or "?") + ("+" if changed else "")


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(value.rjust(width) for value, width in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * width for width in widths))


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _cpus() -> int:
    return os.cpu_count() or 0
