"""Shared helpers for the benchmarks: timing, peak memory, result files, table printing."""

from __future__ import annotations

import json
import platform
import resource
import time
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@contextmanager
def stopwatch(into: dict, name: str):
    """Store the wall seconds of the block in ``into[name]``."""
    started = time.perf_counter()
    yield
    into[name] = time.perf_counter() - started


def peak_rss_mb() -> float:
    """Peak resident memory of this (driver) process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def jvm_peak_mb(spark) -> float:
    """Peak heap use of the driver JVM (where local Spark executors also run), MiB."""
    jvm = spark.sparkContext._jvm
    pools = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    heap = [pool for pool in pools if str(pool.getType().toString()).lower().startswith("heap")]
    return sum(pool.getPeakUsage().getUsed() for pool in heap) / 2**20


def write_results(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": platform.platform(), "cpus": _cpus(), "at": time.time(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    return path


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(value.rjust(width) for value, width in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * width for width in widths))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _cpus() -> int:
    import os
    return os.cpu_count() or 0
