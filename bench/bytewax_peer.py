"""Bytewax peer of the benchmark suite: the keyed running sum and the 1-minute tumbling window,
read from and written to the folders of ``peer_io`` (run by the Bytewax venv's python, from
``bench/install_peers``; neither Spark nor lakestream is imported)::

    .venv-peers/bytewax/bin/python bench/bytewax_peer.py --workload running_sum \\
        --input IN --output OUT --work WORK [--workers 1] [--processes 1] [--epoch-ms 1000] \\
        [--no-recovery] [--resume] [--sink parquet|dynamic|null] [--verify]

- Source: a ``FixedPartitionedSource`` with one partition per worker; partition ``i`` reads every
  input file in order and emits the rows with ``k % parts == i``, already keyed
  (``(str(k), value)``), in batches (``--batch-size``). A key comes from one partition, and
  channels between two workers are FIFO, so each key's events reach its state in input order.
  Resume state: (file index, row offset within that partition's rows of the file).
- ``running_sum``: ``op.stateful_map`` keeps each key's total and emits ``(seq, k, total)``.
- ``window``: ``fold_window`` with ``EventClock`` (10 s wait) and ``TumblingWindower`` (1 min,
  aligned to the epoch) folding ``(count, sum)``. Its clock's ``now_getter`` is a constant, so the
  watermark is purely event time (``max ts seen - 10 s``) and never moves with wall time (by
  default Bytewax adds the system time elapsed since the max timestamp was seen, which would make
  a resumed run, or a slow one, mark on-time events late); ``to_system_utc`` returns None (no
  wall-clock wake-ups: windows close on later events, or at the end of input, which flushes all).
  Bytewax's clock is *per key*: a key's window closes when that key sees an event past its end
  plus 10 s, not when any key does.
- Recovery (on unless ``--no-recovery``): SQLite partitions (one per worker) under
  ``WORK/recovery``, initialised fresh each run unless ``--resume``; state is snapshotted at the
  end of every epoch (``--epoch-ms``, 1000 by default: a checkpoint per second).
- Sink (``--sink parquet``, the default): a ``FixedPartitionedSink`` with one partition per
  worker that buffers rows and writes them as a Parquet file at the end of every epoch (its
  ``snapshot``, which Bytewax calls after the epoch's writes) or every ``--rows-per-file`` rows,
  and snapshots how many files it wrote. On ``--resume`` each partition deletes the files the
  killed run wrote after its last snapshot, and the resumed run writes their rows again: the
  output is exactly once. ``--sink dynamic`` is a ``DynamicSink`` (no resume state) writing a file
  per ``--rows-per-file`` rows: a killed run loses what it had buffered. ``--sink null`` writes
  nothing (the cost of the sink).
- Latency: the running sum samples every 1000th ``seq`` (wall time its source batch was returned
  to Bytewax vs the wall time the sink received its result); the window measures, for every
  window closed before the end of input, the wall time the sink received it minus the wall time
  the source first emitted an event at or past the window's end + 10 s (when a global watermark
  would have closed it).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bytewax  # noqa: E402,F401
import bytewax.operators as op  # noqa: E402
import peer_io  # noqa: E402
from bytewax.dataflow import Dataflow  # noqa: E402
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition  # noqa: E402
from bytewax.outputs import (  # noqa: E402
    DynamicSink,
    FixedPartitionedSink,
    StatefulSinkPartition,
    StatelessSinkPartition,
)
from bytewax.recovery import RecoveryConfig, init_db_dir  # noqa: E402
from bytewax.run import cli_main  # noqa: E402

MINUTE_MS = 60_000
GRACE_MS = 10_000
LATENCY_EVERY = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Per-process latency samples, appended to by every worker thread of this process (list.append
# holds the GIL) and written to WORK/samples/ at the end.
_SOURCE_SAMPLES: list = []  # running sum: (seq array, t); window: (max ts of the batch, t)
_SINK_SAMPLES: list = []  # running sum: (seq array, t); window: (window_end array, t)
_FIRST_READ: list = []  # wall time of the first next_batch call of each partition


def bytewax_version() -> str:
    from importlib.metadata import version

    return version("bytewax")


# --------------------------------------------------------------------------------------- source


class _FilePartition(StatefulSourcePartition):
    def __init__(self, files, part, parts, workload, batch_size, keyed, resume):
        self.files, self.part, self.parts, self.keyed = files, part, parts, keyed
        self.workload, self.batch_size = workload, batch_size
        self.file_index, self.offset = resume if resume is not None else (0, 0)
        self.columns = None  # the current file's rows of this partition, as numpy arrays
        self.started = False

    def _load(self):
        table = pq.read_table(self.files[self.file_index])
        k = table.column("k").to_numpy().astype(np.int64, copy=False)
        mine = np.flatnonzero(k % self.parts == self.part) if self.parts > 1 else slice(None)
        names = ("k", "x", "seq", "ts") if self.workload == "window" else ("k", "x", "seq")
        self.columns = {n: table.column(n).to_numpy().astype(np.int64, copy=False)[mine]
                        for n in names}
        self.rows = len(self.columns["k"])

    def next_batch(self):
        if not self.started:
            self.started = True
            _FIRST_READ.append(time.time())
        while True:
            if self.file_index >= len(self.files):
                raise StopIteration()
            if self.columns is None:
                self._load()
            if self.offset < self.rows:
                break
            self.file_index, self.offset, self.columns = self.file_index + 1, 0, None
        lo, hi = self.offset, min(self.offset + self.batch_size, self.rows)
        c = self.columns
        k = c["k"][lo:hi]
        if self.workload == "window":
            ts = c["ts"][lo:hi]
            # EventClock wants aware datetimes: made here, one batch at a time.
            stamps = [s.replace(tzinfo=UTC) for s in ts.astype("datetime64[ms]").tolist()]
            values = zip(stamps, c["x"][lo:hi].tolist())
            sample = int(ts[-1])
        else:
            seq = c["seq"][lo:hi]
            values = zip(seq.tolist(), k.tolist(), c["x"][lo:hi].tolist())
            sample = seq[seq % LATENCY_EVERY == 0]
        batch = list(zip(k.astype(str).tolist(), values)) if self.keyed else list(values)
        self.offset = hi
        _SOURCE_SAMPLES.append((sample, time.time()))
        return batch

    def snapshot(self):
        return (self.file_index, self.offset)


class FileSource(FixedPartitionedSource):
    def __init__(self, files, parts, workload, batch_size, keyed=True):
        self.files, self.parts = [str(f) for f in files], parts
        self.workload, self.batch_size, self.keyed = workload, batch_size, keyed

    def list_parts(self):
        return [f"part-{i}" for i in range(self.parts)]

    def build_part(self, step_id, for_part, resume_state):
        part = int(for_part.rsplit("-", 1)[1])
        return _FilePartition(self.files, part, self.parts, self.workload, self.batch_size,
                              self.keyed, resume_state)


# ----------------------------------------------------------------------------------------- sink


class _ParquetWriter:
    """Buffers a worker's output rows and writes them as Parquet files."""

    def __init__(self, folder, workload, rows_per_file, prefix, keyed, files=0, write=True):
        self.folder, self.workload, self.rows_per_file = folder, workload, rows_per_file
        self.prefix, self.keyed, self.files, self.write = prefix, keyed, files, write
        self.buffer, self.buffered = [], 0

    def write_batch(self, items):
        """``items``: row tuples (a FixedPartitionedSink's partition gets values only) or, in
        a DynamicSink, ``(key, row)`` pairs."""
        now = time.time()
        width = len(peer_io.WINDOW_COLUMNS if self.workload == "window" else peer_io.RUNNING_SUM_COLUMNS)
        if self.keyed:
            items = [v for _, v in items]
        rows = np.array(items, dtype=np.int64).reshape(-1, width)
        if self.workload == "window":  # sampled: the window's end
            _SINK_SAMPLES.append((rows[:, 1] + MINUTE_MS, now))
        else:  # sampled: every LATENCY_EVERY-th seq
            seq = rows[:, 0]
            _SINK_SAMPLES.append((seq[seq % LATENCY_EVERY == 0], now))
        if not self.write:
            return
        self.buffer.append(rows)
        self.buffered += len(rows)
        if self.buffered >= self.rows_per_file:
            self.flush()

    def flush(self):
        if not self.buffer:
            return
        rows = np.concatenate(self.buffer)
        columns = peer_io.WINDOW_COLUMNS if self.workload == "window" else peer_io.RUNNING_SUM_COLUMNS
        table = pa.table({name: rows[:, i] for i, name in enumerate(columns)})
        path = f"{self.folder}/{self.prefix}-{self.files:06d}.parquet"
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)  # a killed run leaves no half-written .parquet
        self.files += 1
        self.buffer, self.buffered = [], 0


class _EpochPart(_ParquetWriter, StatefulSinkPartition):
    """Writes its buffer at the end of every epoch (``snapshot``, called after the epoch's
    writes) and snapshots the number of files written. Resumed with that number, it deletes the
    files a killed run wrote after it, whose rows the resumed run emits again: exactly once."""

    def __init__(self, folder, workload, rows_per_file, part, resume_state):
        files = resume_state or 0
        super().__init__(folder, workload, rows_per_file, f"part-{part}", False, files)
        for f in Path(folder).glob(f"part-{part}-*.parquet"):
            if int(f.stem.rsplit("-", 1)[1]) >= files:
                f.unlink()

    def snapshot(self):
        self.flush()
        return self.files

    def close(self):
        self.flush()


class EpochParquetSink(FixedPartitionedSink):
    def __init__(self, folder, workload, rows_per_file, parts):
        self.folder, self.workload, self.rows_per_file, self.parts = folder, workload, rows_per_file, parts

    def list_parts(self):
        return [f"w{i}" for i in range(self.parts)]

    def part_fn(self, item_key):
        return int(item_key)  # keys are str(k) (adler32 of the key is the default)

    def build_part(self, step_id, for_part, resume_state):
        return _EpochPart(self.folder, self.workload, self.rows_per_file, for_part, resume_state)


class _BufferedPart(_ParquetWriter, StatelessSinkPartition):
    def close(self):
        self.flush()


class BufferedParquetSink(DynamicSink):
    """A file per ``rows_per_file`` rows per worker and at the end: no resume state, so a
    killed run loses the rows it had buffered (``--sink dynamic``), or writes nothing
    (``--sink null``, to measure the cost of writing)."""

    def __init__(self, folder, workload, rows_per_file, write=True):
        self.folder, self.workload, self.rows_per_file, self.write = folder, workload, rows_per_file, write

    def build(self, step_id, worker_index, worker_count):
        prefix = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-w{worker_index}"
        return _BufferedPart(self.folder, self.workload, self.rows_per_file, prefix, True,
                             write=self.write)


# ------------------------------------------------------------------------------------- dataflow


def _add(total, value):
    seq, k, x = value
    total = x if total is None else total + x
    return total, (seq, k, total)


def _key_of(value):
    return str(value[1])


def _fold(acc, value):
    return (acc[0] + 1, acc[1] + value[1])


def _merge(a, b):
    return (a[0] + b[0], a[1] + b[1])


def _window_row(item):
    key, (window_id, (n, total)) = item
    return key, (int(key), window_id * MINUTE_MS, n, total)


def _constant_now():
    return EPOCH


def _no_wakeup(_timestamp):
    return None


def build_flow(args, files, parts) -> Dataflow:
    from operator import itemgetter

    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window

    flow = Dataflow(f"bytewax_peer_{args.workload}")
    key_on = args.key_on and args.workload == "running_sum"
    stream = op.input("input", flow, FileSource(files, parts, args.workload, args.batch_size,
                                                keyed=not key_on))
    if key_on:  # (seq, k, x) records keyed by a Python call per event
        stream = op.key_on("key", stream, _key_of)
    if args.sink == "parquet":
        sink = EpochParquetSink(args.output, args.workload, args.rows_per_file, parts)
    else:
        sink = BufferedParquetSink(args.output, args.workload, args.rows_per_file,
                                   write=args.sink == "dynamic")
    if args.workload == "running_sum":
        op.output("output", op.stateful_map("sum", stream, _add), sink)
    else:
        if args.clock == "bytewax":  # Bytewax's default: the watermark also follows wall time
            clock = EventClock(itemgetter(0), wait_for_system_duration=timedelta(milliseconds=GRACE_MS))
        else:
            clock = EventClock(itemgetter(0), wait_for_system_duration=timedelta(milliseconds=GRACE_MS),
                               now_getter=_constant_now, to_system_utc=_no_wakeup)
        windower = TumblingWindower(length=timedelta(minutes=1), align_to=EPOCH)
        # ordered=False folds each event as it comes instead of holding it until the watermark
        # passes it; count and sum do not depend on the order, lateness is judged the same way.
        windows = fold_window("window", stream, clock, windower, lambda: (0, 0), _fold, _merge,
                              ordered=False)
        op.output("output", op.map("row", windows.down, _window_row), sink)
    return flow


# ------------------------------------------------------------------------------------- running


def run_process(args, files, process_id, addresses) -> None:
    """Runs this process's workers until the dataflow ends, then writes its samples."""
    parts = args.workers * args.processes
    flow = build_flow(args, files, parts)
    recovery = None
    if not args.no_recovery:
        recovery = RecoveryConfig(str(Path(args.work) / "recovery"), timedelta(0))
    start, cpu_start = time.time(), _cpu_seconds()
    cli_main(flow, workers_per_process=args.workers,
             process_id=process_id if addresses else None, addresses=addresses or None,
             epoch_interval=timedelta(milliseconds=args.epoch_ms), recovery_config=recovery)
    end, cpu = time.time(), _cpu_seconds() - cpu_start
    samples = Path(args.work) / "samples"
    samples.mkdir(parents=True, exist_ok=True)
    first_read = min(_FIRST_READ) if _FIRST_READ else end
    np.savez(samples / f"proc-{process_id}.npz", start=start, end=end, first_read=first_read, cpu=cpu,
             **_pack("source", _SOURCE_SAMPLES, args.workload),
             **_pack("sink", _SINK_SAMPLES, "running_sum"))


def _cpu_seconds():
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _pack(name, samples, workload):
    if workload == "window":  # one (max ts, t) per batch
        values = np.array([s for s, _ in samples], dtype=np.int64)
        times = np.array([t for _, t in samples], dtype=np.float64)
    else:
        values = np.concatenate([np.asarray(s, dtype=np.int64) for s, _ in samples]
                                or [np.zeros(0, np.int64)])
        times = np.concatenate([np.full(len(s), t) for s, t in samples] or [np.zeros(0)])
    return {f"{name}_values": values, f"{name}_times": times}


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed driver takes its cluster along


def run_cluster(args) -> None:
    addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(args.processes))
    argv = [a for a in sys.argv[1:]]
    children = [subprocess.Popen([sys.executable, __file__, *argv, "--_process-id", str(i),
                                  "--_addresses", addresses], preexec_fn=_die_with_parent)
                for i in range(args.processes)]
    deadline = time.time() + args.timeout_s
    failed = []
    for child in children:
        try:
            rc = child.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for c in children:
                c.kill()
            raise SystemExit(f"the cluster ran longer than --timeout-s {args.timeout_s}") from None
        if rc != 0:
            failed.append(rc)
    if failed:
        for c in children:
            c.kill()
        raise SystemExit(f"a cluster process failed: exit codes {failed}")


# ------------------------------------------------------------------------------------- results


def latencies(args):
    procs = [np.load(p) for p in sorted((Path(args.work) / "samples").glob("proc-*.npz"))]
    # From the first read of the input (the cluster formed, the dataflow built) to the last
    # process done (its sink closed, every file written), and from the first cli_main call.
    end = max(float(p["end"]) for p in procs)
    seconds = end - min(float(p["first_read"]) for p in procs)
    with_startup = end - min(float(p["start"]) for p in procs)
    cpu = sum(float(p["cpu"]) for p in procs)
    src_v = np.concatenate([p["source_values"] for p in procs])
    src_t = np.concatenate([p["source_times"] for p in procs])
    snk_v = np.concatenate([p["sink_values"] for p in procs])
    snk_t = np.concatenate([p["sink_times"] for p in procs])
    if args.workload == "window":
        # When the input first reached each window's end + grace (a global watermark closing it).
        order = np.argsort(src_t, kind="stable")
        reached, at = np.maximum.accumulate(src_v[order]), src_t[order]
        idx = np.searchsorted(reached, snk_v + GRACE_MS, side="left")
        ok = idx < len(reached)
        lat = snk_t[ok] - at[idx[ok]]
    else:
        first_src = _first_by_value(src_v, src_t)
        first_snk = _first_by_value(snk_v, snk_t)
        common = np.intersect1d(first_src[0], first_snk[0])
        lat = (first_snk[1][np.searchsorted(first_snk[0], common)]
               - first_src[1][np.searchsorted(first_src[0], common)])
    if len(lat) == 0:
        return seconds, with_startup, cpu, None, None, 0
    return (seconds, with_startup, cpu, float(np.percentile(lat, 50)),
            float(np.percentile(lat, 99)), int(len(lat)))


def _first_by_value(values, times):
    order = np.lexsort((times, values))
    values, times = values[order], times[order]
    keep = np.ones(len(values), bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep], times[keep]


def verify(args) -> dict:
    """Compares the output with a pandas oracle computed from the input."""
    import pandas as pd

    events = pd.concat(list(peer_io.read_input(args.input)), ignore_index=True)
    if args.workload == "running_sum":
        out = peer_io.read_output(args.output, peer_io.RUNNING_SUM_COLUMNS)
        events = events.sort_values("seq", ignore_index=True)
        oracle = pd.DataFrame({"seq": events["seq"], "k": events["k"],
                               "total": events.groupby("k")["x"].cumsum()}).astype("int64")
        duplicates = int(out.duplicated().sum())
        conflicting = int(out.drop_duplicates().duplicated("seq").sum())
        deduped = out.drop_duplicates(ignore_index=True)
        exact = (len(deduped) == len(oracle)
                 and deduped.sort_values("seq", ignore_index=True).equals(oracle))
        return {"ok": bool(exact and conflicting == 0), "rows": len(out), "oracle_rows": len(oracle),
                "duplicate_rows": duplicates, "conflicting_rows": conflicting}
    out = peer_io.read_output(args.output, peer_io.WINDOW_COLUMNS)
    events["window_start"] = events["ts"] // MINUTE_MS * MINUTE_MS
    oracle = (events.groupby(["k", "window_start"]).agg(n=("x", "size"), total=("x", "sum"))
              .reset_index().astype("int64"))
    duplicates = int(out.duplicated().sum())
    deduped = out.drop_duplicates(ignore_index=True)
    conflicting = int(deduped.duplicated(["k", "window_start"]).sum())
    merged = deduped.merge(oracle, on=["k", "window_start"], how="left", suffixes=("", "_oracle"))
    wrong = int(((merged["n"] != merged["n_oracle"]) | (merged["total"] != merged["total_oracle"])).sum())
    last_close = int(events["ts"].max()) - GRACE_MS  # windows ending by then were closable
    closable = oracle[oracle["window_start"] + MINUTE_MS <= last_close]
    missing = len(closable.merge(deduped, on=["k", "window_start"], how="left", indicator=True)
                  .query("_merge == 'left_only'"))
    return {"ok": wrong == 0 and conflicting == 0 and missing == 0, "rows": len(out),
            "oracle_windows": len(oracle), "wrong": wrong, "duplicate_rows": duplicates,
            "conflicting_rows": conflicting, "closable_missing": int(missing)}


# ------------------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("running_sum", "window"), required=True)
    p.add_argument("--input", required=True, help="folder of batch-*.parquet (peer_io)")
    p.add_argument("--output", required=True, help="folder for the output Parquet files")
    p.add_argument("--work", required=True, help="folder for recovery partitions and samples")
    p.add_argument("--workers", type=int, default=1, help="workers (threads) per process")
    p.add_argument("--processes", type=int, default=1, help="processes (127.0.0.1 cluster)")
    p.add_argument("--epoch-ms", type=int, default=1000,
                   help="epoch length; recovery snapshots are taken at the end of each epoch")
    p.add_argument("--no-recovery", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep WORK/recovery and the output folder: continue a killed run")
    p.add_argument("--batch-size", type=int, default=500, help="events per source batch")
    p.add_argument("--rows-per-file", type=int, default=1_000_000,
                   help="output rows per Parquet file per worker")
    p.add_argument("--sink", choices=("parquet", "dynamic", "null"), default="parquet",
                   help="parquet: files written at each epoch's end, exactly once across a "
                        "resume; dynamic: a DynamicSink writing every --rows-per-file rows "
                        "(loses its buffer when killed); null: writes nothing")
    p.add_argument("--key-on", action="store_true",
                   help="running_sum: the source emits (seq, k, x) and op.key_on keys them "
                        "(default: the source emits (str(k), value) tuples itself)")
    p.add_argument("--clock", choices=("event", "bytewax"), default="event",
                   help="window: event = pure event-time watermark (default); bytewax = "
                        "EventClock's defaults (watermark also advances with wall time)")
    p.add_argument("--verify", action="store_true", help="compare the output with a pandas oracle")
    p.add_argument("--timeout-s", type=float, default=3600)
    p.add_argument("--_process-id", type=int, dest="process_id", help=argparse.SUPPRESS)
    p.add_argument("--_addresses", dest="addresses", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main():
    args = parse_args()
    files = peer_io.input_files(args.input)
    if not files:
        raise SystemExit(f"no batch-*.parquet under {args.input}")
    if args.process_id is not None:  # a child of run_cluster
        run_process(args, files, args.process_id, args.addresses.split(";"))
        return
    work, output = Path(args.work), Path(args.output)
    if not args.resume:
        shutil.rmtree(work / "recovery", ignore_errors=True)
        if output.exists():
            for f in output.glob("part-*.parquet"):
                f.unlink()
    shutil.rmtree(work / "samples", ignore_errors=True)
    output.mkdir(parents=True, exist_ok=True)
    for f in output.glob("*.tmp"):
        f.unlink()
    workers = args.workers * args.processes
    if not args.no_recovery and not (args.resume and (work / "recovery").exists()):
        (work / "recovery").mkdir(parents=True, exist_ok=True)
        init_db_dir(work / "recovery", workers)
    if args.processes > 1:
        run_cluster(args)
    else:
        run_process(args, files, 0, None)
    seconds, with_startup, cpu, p50, p99, sampled = latencies(args)
    events = sum(pq.read_metadata(f).num_rows for f in files)
    rows = sum(pq.read_metadata(f).num_rows for f in output.glob("part-*.parquet"))
    op_name = ("stateful_map" if args.workload == "running_sum"
               else "fold_window (EventClock, TumblingWindower)")
    result = dict(
        system=f"Bytewax {bytewax_version()} {op_name}, "
               + ("no recovery" if args.no_recovery else "SQLite recovery"),
        versions={"bytewax": bytewax_version(), "python": sys.version.split()[0]},
        workload=args.workload, events=events, seconds=seconds,
        seconds_with_startup=with_startup, cpu_seconds=cpu,
        load_average=os.getloadavg()[0],
        events_per_s=events / seconds if seconds else None,
        latency_p50_s=p50, latency_p99_s=p99, latency_samples=sampled, output_rows=rows,
        config={"workers": args.workers, "processes": args.processes, "epoch_ms": args.epoch_ms,
                "recovery": not args.no_recovery, "resumed": args.resume,
                "source_partitions": workers, "batch_size": args.batch_size, "sink": args.sink,
                "key_on": args.key_on, "clock": args.clock if args.workload == "window" else None},
    )
    if args.verify:
        result["verify"] = verify(args)
    peer_io.print_result(**result)


if __name__ == "__main__":
    main()
