"""PyFlink peer of the benchmark: the keyed running sum and the 1-minute tumbling window on
Flink's local mini-cluster, reading and writing the files of ``bench/peer_io.py``.

Run it with the Flink venv's interpreter (``bench/install_peers``)::

    .venv-peers/flink/bin/python bench/flink_peer.py --workload running_sum_sql \\
        --input IN --output OUT --work WORK [--parallelism 2] [--checkpoint-ms 1000] \\
        [--state-backend rocksdb|hashmap] [--execution-mode process|thread] \\
        [--state-cache-size N] [--bundle-size N] [--bundle-time MS] \\
        [--over-order rowtime|proctime] [--key-by python|jvm] [--set KEY=VALUE ...]

Workloads:
- ``running_sum_datastream``: DataStream API, ``key_by(k)`` and a Python
  ``KeyedProcessFunction`` with a ``ValueState`` (Python runs for every event; PyFlink's
  ``key_by`` itself adds a Python step per event before the shuffle, ``--key-by jvm`` avoids
  it).
- ``running_sum_sql``: Flink SQL, JVM only: ``SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS
  BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)`` with ``rt = TO_TIMESTAMP_LTZ(seq, 3)`` and
  ``WATERMARK FOR rt AS rt`` (seq is unique and increasing, so the sum follows seq exactly;
  rows wait in state for the next watermark). ``--over-order proctime`` orders by arrival.
- ``window_sql``: Flink SQL TUMBLE window TVF of 1 minute on ``rt = TO_TIMESTAMP_LTZ(ts, 3)``
  with ``WATERMARK FOR rt AS rt - INTERVAL '10' SECOND``; ``COUNT(*)``, ``SUM(x)`` per k.
- ``window_datastream``: DataStream API, the same watermark, ``key_by(k)``, a 1-minute
  tumbling event-time window with a Python ``AggregateFunction`` (count, sum) and a Python
  ``ProcessWindowFunction`` adding the window start.
At end of input Flink's final watermark flushes every window, also those no later event closed.

Every job: the default local environment (a mini-cluster in the PyFlink gateway's JVM, a new
one per job), streaming mode, exactly-once checkpoints every ``--checkpoint-ms`` to
``file://WORK/checkpoints``, RocksDB state (or hashmap). Input: the batch files are
concatenated, in order, into one Parquet file under WORK before anything is timed, and Flink
reads that file with its Parquet format (flink-sql-parquet + Hadoop client jars, fetched with
Maven into ``.venv-peers/flink-jars/`` the first time). One file is one split, read by one
source subtask in file order, so every key sees its events in input order; Flink's file
source hands several files to its readers in no fixed order. Output: Flink's filesystem sink,
Parquet, in ``--output`` (files are committed by the checkpoints, the last one at end of
input; they get a ``.parquet`` suffix after the job, untimed: the sink has no option for it).

Timing: ``seconds`` runs from submitting the job (planning, mini-cluster start, deployment,
Python workers included) until it finished, its last checkpoint committed the output. Before
it the same job runs twice on a 1-event input in the same process: the first one's wall time
is ``startup_seconds`` (cold: JVM classes, Python workers or the embedded interpreter), the
second one's ``job_overhead_seconds`` (the fixed cost every job, the timed one included,
pays); both reported, not subtracted. Every 1000th event (``seq % 1000 == 0``, by input
position for the windows) carries the wall clock read at the source (a projection right after
the Parquet reader) and, for the running sums, the wall clock read in a projection just before
the sink: the difference is the per-event latency (under full load mostly queueing; the sink's
files become readable at the next checkpoint). ``steady_events_per_s``: for the sums, seq
over the sink clock between the 10th and 90th percentile of those samples; for the windows,
see ``window_timing``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import peer_io  # noqa: E402
from pyflink.version import __version__ as FLINK_VERSION  # noqa: E402

REPO = BENCH.parent
JAR_DIR = REPO / ".venv-peers" / "flink-jars"
HADOOP_VERSION = "3.3.6"
JARS = {  # file name -> Maven coordinates; Flink's Parquet format needs Hadoop's Configuration
    f"flink-sql-parquet-{FLINK_VERSION}.jar": f"org.apache.flink:flink-sql-parquet:{FLINK_VERSION}",
    f"hadoop-client-api-{HADOOP_VERSION}.jar": f"org.apache.hadoop:hadoop-client-api:{HADOOP_VERSION}",
    f"hadoop-client-runtime-{HADOOP_VERSION}.jar":
        f"org.apache.hadoop:hadoop-client-runtime:{HADOOP_VERSION}",
}
WORKLOADS = ("running_sum_datastream", "running_sum_sql", "window_sql", "window_datastream")
SAMPLE_EVERY = 1000
# Wall clock in epoch milliseconds. CURRENT_TIMESTAMP is read once per record in streaming mode
# (both uses see the same instant); the session time zone is UTC.
NOW_MS = ("(EXTRACT(EPOCH FROM CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3))) * 1000 "
          "+ EXTRACT(MILLISECOND FROM CURRENT_TIMESTAMP))")


def ensure_jars() -> list[Path]:
    """The jars of the Parquet format, fetched with ``mvn dependency:copy`` if missing."""
    JAR_DIR.mkdir(parents=True, exist_ok=True)
    for name, coordinates in JARS.items():
        if (JAR_DIR / name).exists():
            continue
        print(f"fetching {coordinates} into {JAR_DIR}", file=sys.stderr, flush=True)
        subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coordinates}",
                        f"-DoutputDirectory={JAR_DIR}"], check=True, timeout=600,
                       stdout=sys.stderr)
        if not (JAR_DIR / name).exists():
            raise RuntimeError(f"mvn did not produce {JAR_DIR / name}")
    return [JAR_DIR / name for name in JARS]


# ---------------------------------------------------------------------------------------------
# input


def prepare_input(folder: str, target: Path, windows: bool) -> dict:
    """All batch files, in order, as one Parquet file ``target``; for the windows ``seq`` is
    made the global input position (the lead's generator numbers it per batch). Untimed."""
    files = peer_io.input_files(folder)
    if not files:
        raise SystemExit(f"no batch-*.parquet in {folder}")
    columns = ["k", "x", "seq", "ts"] if windows else ["k", "x", "seq"]
    schema = pa.schema([(c, pa.int64()) for c in columns])
    target.parent.mkdir(parents=True, exist_ok=True)
    events, last_seq, renumbered, first = 0, None, False, None
    with pq.ParquetWriter(target, schema) as writer:
        for path in files:
            table = pq.read_table(path, columns=columns).cast(schema)
            seq = table.column("seq").to_numpy()
            if windows:
                position = np.arange(events, events + len(seq), dtype=np.int64)
                renumbered = renumbered or not np.array_equal(seq, position)
                table = table.set_column(columns.index("seq"), "seq", pa.array(position))
            else:
                increasing = np.all(np.diff(seq) > 0) and (last_seq is None or len(seq) == 0
                                                           or seq[0] > last_seq)
                if not increasing:
                    raise SystemExit(f"{path}: seq is not strictly increasing in input order")
                if len(seq):
                    last_seq = seq[-1]
            if first is None and table.num_rows:
                first = table.slice(0, 1)
            writer.write_table(table)
            events += table.num_rows
    return {"events": events, "files": len(files), "seq_renumbered": renumbered, "first": first,
            "schema": schema}


# ---------------------------------------------------------------------------------------------
# the jobs


def flink_config(args, checkpoints: Path, jars: list[Path]):
    from pyflink.common import Configuration
    conf = Configuration()
    settings = {
        # without these the Python workers are started with whatever "python" is on PATH,
        # which fails ("No module named 'pyflink'"), and the job restarts: it looked like a hang
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "python.execution-mode": args.execution_mode,
        "python.state.cache-size": str(args.state_cache_size),
        "python.fn-execution.bundle.size": str(args.bundle_size),
        "python.fn-execution.bundle.time": str(args.bundle_time),
        "parallelism.default": str(args.parallelism),
        "execution.runtime-mode": "STREAMING",
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": checkpoints.as_uri(),
        "state.backend.type": args.state_backend,
        "table.local-time-zone": "UTC",
        # with checkpointing on, Flink's default restart strategy retries a failing job
        # forever (exponential delay), which looks like a hang; fail after two retries instead
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "2",
        "restart-strategy.fixed-delay.delay": "1 s",
        "pipeline.jars": ";".join(jar.as_uri() for jar in jars),
    }
    for item in args.set:
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf, settings


def source_ddl(path: Path, windows: bool, workload: str) -> str:
    if windows:
        columns = "k BIGINT, x BIGINT, seq BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3), " \
                  "WATERMARK FOR rt AS rt - INTERVAL '10' SECOND"
    elif workload == "running_sum_sql":
        columns = "k BIGINT, x BIGINT, seq BIGINT, rt AS TO_TIMESTAMP_LTZ(seq, 3), " \
                  "WATERMARK FOR rt AS rt, pt AS PROCTIME()"
    else:
        columns = "k BIGINT, x BIGINT, seq BIGINT"
    return (f"CREATE TEMPORARY TABLE src ({columns}) WITH ('connector' = 'filesystem', "
            f"'path' = '{path.as_uri()}', 'format' = 'parquet')")


def sink_ddl(name: str, path: Path, columns: str) -> str:
    return (f"CREATE TEMPORARY TABLE {name} ({columns}) WITH ('connector' = 'filesystem', "
            f"'path' = '{path.as_uri()}', 'format' = 'parquet')")


WINDOW_SINK_COLUMNS = "k BIGINT, window_start BIGINT, n BIGINT, total BIGINT, t_out BIGINT"
SAMPLED = f"CASE WHEN MOD(seq, {SAMPLE_EVERY}) = 0 THEN {NOW_MS} END"


def build_and_run(args, workload: str, source: Path, output: Path, samples: Path,
                  checkpoints: Path, jars: list[Path]) -> float:
    """Builds the job, submits it and waits until it finished; returns that wall time."""
    from pyflink.common import Row, Time, Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf, _ = flink_config(args, checkpoints, jars)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    t_env = StreamTableEnvironment.create(env)
    windows = workload.startswith("window")
    t_env.execute_sql(source_ddl(source, windows, workload))

    if workload == "running_sum_sql":
        t_env.execute_sql(sink_ddl("sink", output, "seq BIGINT, k BIGINT, total BIGINT, "
                                                   "t_in BIGINT, t_out BIGINT"))
        statement = (
            f"INSERT INTO sink SELECT seq, k, total, t_in, "
            f"CASE WHEN t_in IS NOT NULL THEN {NOW_MS} END FROM ("
            f"SELECT seq, k, {SAMPLED} AS t_in, SUM(x) OVER (PARTITION BY k ORDER BY {args.over_order[0]}t "
            f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total FROM src)")
        start = time.perf_counter()
        t_env.execute_sql(statement).wait()
        return time.perf_counter() - start

    if workload == "window_sql":
        t_env.execute_sql(sink_ddl("sink", output, WINDOW_SINK_COLUMNS))
        t_env.execute_sql(sink_ddl("samples", samples, "seq BIGINT, t_in BIGINT"))
        statements = t_env.create_statement_set()
        statements.add_insert_sql(
            f"INSERT INTO sink SELECT k, window_start, n, total, {NOW_MS} FROM ("
            "SELECT k, CAST(EXTRACT(EPOCH FROM window_start) AS BIGINT) * 1000 AS window_start, "
            "COUNT(*) AS n, SUM(x) AS total "
            "FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) "
            "GROUP BY k, window_start, window_end)")
        statements.add_insert_sql(
            f"INSERT INTO samples SELECT seq, {NOW_MS} FROM src WHERE MOD(seq, {SAMPLE_EVERY}) = 0")
        start = time.perf_counter()
        statements.execute().wait()
        return time.perf_counter() - start

    if workload == "running_sum_datastream":
        from pyflink.datastream import KeyedProcessFunction
        from pyflink.datastream.state import ValueStateDescriptor

        class RunningSum(KeyedProcessFunction):
            def open(self, runtime_context):
                self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

            def process_element(self, value, ctx):
                total = (self.total.value() or 0) + value[1]
                self.total.update(total)
                yield Row(value[2], value[0], total, value[3])

        if args.key_by == "python":
            events = t_env.to_data_stream(t_env.sql_query(
                f"SELECT k, x, seq, {SAMPLED} AS t_in FROM src"))
            keyed = events.key_by(lambda row: row[0], key_type=Types.LONG())
        else:
            keyed = jvm_key_by(t_env, f"SELECT k, x, seq, {SAMPLED} AS t_in FROM src")
        sums = (keyed
                .process(RunningSum(), output_type=Types.ROW_NAMED(
                    ["seq", "k", "total", "t_in"],
                    [Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG()]))
                .name("running sum"))
        t_env.create_temporary_view("sums", t_env.from_data_stream(sums))
        t_env.execute_sql(sink_ddl("sink", output, "seq BIGINT, k BIGINT, total BIGINT, "
                                                   "t_in BIGINT, t_out BIGINT"))
        start = time.perf_counter()
        t_env.execute_sql(f"INSERT INTO sink SELECT seq, k, total, t_in, CASE WHEN t_in IS NOT "
                          f"NULL THEN {NOW_MS} END FROM sums").wait()
        return time.perf_counter() - start

    if workload == "window_datastream":
        from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction
        from pyflink.datastream.window import TumblingEventTimeWindows

        class CountSum(AggregateFunction):
            def create_accumulator(self):
                return [0, 0]

            def add(self, value, accumulator):
                accumulator[0] += 1
                accumulator[1] += value[1]
                return accumulator

            def get_result(self, accumulator):
                return accumulator

            def merge(self, a, b):
                return [a[0] + b[0], a[1] + b[1]]

        class WithStart(ProcessWindowFunction):
            def process(self, key, context, elements):
                for n, total in elements:
                    yield Row(key, context.window().start, n, total)

        t_env.execute_sql(sink_ddl("samples", samples, "seq BIGINT, t_in BIGINT"))
        statements = t_env.create_statement_set()
        statements.add_insert_sql(
            f"INSERT INTO samples SELECT seq, {NOW_MS} FROM src WHERE MOD(seq, {SAMPLE_EVERY}) = 0")
        # to_data_stream keeps rt as each record's timestamp and forwards the watermarks
        events = t_env.to_data_stream(t_env.sql_query("SELECT k, x, rt FROM src"))
        results = (events.key_by(lambda row: row[0], key_type=Types.LONG())
                   .window(TumblingEventTimeWindows.of(Time.minutes(1)))
                   .aggregate(CountSum(), window_function=WithStart(),
                              accumulator_type=Types.PICKLED_BYTE_ARRAY(),
                              output_type=Types.ROW_NAMED(
                                  ["k", "window_start", "n", "total"],
                                  [Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG()]))
                   .name("window"))
        t_env.create_temporary_view("results", t_env.from_data_stream(results))
        t_env.execute_sql(sink_ddl("sink", output, WINDOW_SINK_COLUMNS))
        statements.add_insert_sql(
            f"INSERT INTO sink SELECT k, window_start, n, total, {NOW_MS} FROM results")
        start = time.perf_counter()
        statements.execute().wait()
        return time.perf_counter() - start

    raise ValueError(workload)


def jvm_key_by(t_env, query: str):
    """``key_by(k)`` without PyFlink's Python key-extracting operator: ``DataStream.key_by``
    runs a Python function on every event to make ``Row(key, event)``, in one Python worker
    (the source's subtask) before the shuffle. Here SQL builds that row and the JVM keys it,
    as ``DataStream.key_by`` does after its Python step (internal API of PyFlink 2.3)."""
    from pyflink.common import Types
    from pyflink.datastream.data_stream import DataStream, KeyedStream
    from pyflink.java_gateway import get_gateway

    events = t_env.sql_query(query)
    names = events.get_schema().get_field_names()
    event_type = Types.ROW_NAMED(names, [Types.LONG()] * len(names))
    wrapped = t_env.to_data_stream(t_env.sql_query(f"SELECT k, ROW({', '.join(names)}) FROM ({query})"))
    # the Python operators take a RowTypeInfo input (to_data_stream declares an ExternalTypeInfo
    # of the same rows)
    wrapped._j_data_stream.getTransformation().setOutputType(
        Types.ROW([Types.LONG(), event_type]).get_java_type_info())
    keyed = wrapped._j_data_stream.keyBy(get_gateway().jvm.KeyByKeySelector(),
                                         Types.ROW([Types.LONG()]).get_java_type_info())
    return KeyedStream(keyed, event_type, DataStream(wrapped._j_data_stream))


# ---------------------------------------------------------------------------------------------
# results


def read_samples(folder: Path, columns) -> dict[str, np.ndarray]:
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not p.name.startswith((".", "_")))
    if not files:
        return {c: np.array([], dtype=np.int64) for c in columns}
    table = pa.concat_tables([pq.read_table(p, columns=list(columns)) for p in files])
    table = table.filter(pc.is_valid(table.column(columns[1])))
    return {c: table.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in columns}


def steady_rate(seq: np.ndarray, clock_ms: np.ndarray) -> float | None:
    """Events per second between the 10th and the 90th percentile of the samples."""
    if len(seq) < 10:
        return None
    order = np.argsort(seq)
    seq, clock_ms = seq[order], clock_ms[order]
    lo, hi = int(len(seq) * 0.1), int(len(seq) * 0.9)
    elapsed = (clock_ms[hi] - clock_ms[lo]) / 1000
    return float((seq[hi] - seq[lo]) / elapsed) if elapsed > 0 else None


def window_timing(output: Path, ts: np.ndarray, sampled: dict) -> tuple:
    """The windows the watermark closed (not the ones flushed at end of input): each one's
    closing event is the first with ts >= window end - 1 ms + 10 s; its source clock is
    interpolated from the samples. Latency: closing event read -> window row at the sink.
    Steady rate: closing positions over sink clocks, first to last closed window."""
    rows = read_samples(output, ("window_start", "t_out"))
    closing = np.searchsorted(ts, rows["window_start"] + 60_000 - 1 + 10_000, side="left")
    closed = closing < len(ts)
    if not closed.any() or len(sampled["seq"]) < 2:
        return None, {"window_latency_p50_s": None, "window_latency_p99_s": None}
    order = np.argsort(sampled["seq"])
    source_ms = np.interp(closing[closed], sampled["seq"][order], sampled["t_in"][order])
    lat = (rows["t_out"][closed] - source_ms) / 1000
    starts = np.unique(rows["window_start"][closed])
    last_row = [rows["t_out"][closed][rows["window_start"][closed] == w].max() for w in starts]
    position = np.searchsorted(ts, starts + 60_000 - 1 + 10_000, side="left")
    steady = None
    if len(starts) >= 2 and last_row[-1] > last_row[0]:
        steady = float((position[-1] - position[0]) / ((last_row[-1] - last_row[0]) / 1000))
    return steady, {"window_latency_p50_s": float(np.percentile(lat, 50)),
                    "window_latency_p99_s": float(np.percentile(lat, 99)),
                    "windows_closed_by_watermark": int(len(starts)),
                    "window_latencies_s": lat}


def java_version() -> str:
    from pyflink.java_gateway import get_gateway
    system = get_gateway().jvm.System
    return f"{system.getProperty('java.vendor')} {system.getProperty('java.version')}"


def describe(args) -> str:
    workload = args.workload
    state = {"rocksdb": "RocksDB", "hashmap": "hashmap (heap)"}[args.state_backend]
    order = "rowtime(seq)" if args.over_order == "rowtime" else "proctime (arrival = seq order)"
    key_by = "key_by" if args.key_by == "python" else "JVM keyBy (SQL-built key)"
    what = {
        "running_sum_datastream": f"DataStream {key_by} + Python KeyedProcessFunction + ValueState",
        "running_sum_sql": f"SQL SUM OVER (PARTITION BY k ORDER BY {order} ROWS UNBOUNDED "
                           "PRECEDING), JVM only",
        "window_sql": "SQL TUMBLE window TVF 1 min, watermark ts - 10 s, COUNT/SUM, JVM only",
        "window_datastream": f"DataStream {key_by} + 1-min tumbling event-time window, Python "
                             "AggregateFunction + ProcessWindowFunction",
    }[workload]
    mode = "" if args.execution_mode == "process" or "JVM only" in what else ", thread mode"
    return f"PyFlink {FLINK_VERSION} {what}, {state} state{mode}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True, help="an empty or missing folder")
    parser.add_argument("--work", required=True, help="scratch folder (checkpoints, input copy)")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--state-backend", choices=("rocksdb", "hashmap"), default="rocksdb")
    parser.add_argument("--state-cache-size", type=int, default=1_000_000,
                        help="python.state.cache-size (Flink's default: 1000)")
    parser.add_argument("--bundle-size", type=int, default=100_000,
                        help="python.fn-execution.bundle.size (Flink's default)")
    parser.add_argument("--bundle-time", type=int, default=1000,
                        help="python.fn-execution.bundle.time in ms (Flink's default)")
    parser.add_argument("--execution-mode", choices=("process", "thread"), default="process",
                        help="python.execution-mode (Flink's default: process); thread runs the "
                             "functions in CPython inside the JVM (pemja)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other Flink option, e.g. python.map-state.read-cache-size=...")
    parser.add_argument("--over-order", choices=("rowtime", "proctime"), default="rowtime",
                        help="running_sum_sql: ORDER BY a rowtime from seq (exact seq order; rows "
                             "wait for the watermark) or processing time (arrival order, which is "
                             "seq order here: one split, read in order)")
    parser.add_argument("--key-by", choices=("python", "jvm"), default="python",
                        help="running_sum_datastream: PyFlink's key_by (a Python step per event "
                             "before the shuffle) or the key built in SQL and keyed in the JVM")
    parser.add_argument("--no-startup-run", action="store_true",
                        help="skip the two 1-event jobs that measure start-up and per-job overhead")
    args = parser.parse_args(argv)

    output, work = Path(args.output).resolve(), Path(args.work).resolve()
    if output.exists() and any(output.iterdir()):
        raise SystemExit(f"--output {output} is not empty")
    windows = args.workload.startswith("window")
    if args.key_by == "jvm" and args.workload != "running_sum_datastream":
        parser.error("--key-by jvm is for running_sum_datastream only")
    if args.execution_mode == "thread":
        # Thread mode runs the functions in CPython embedded in the JVM (pemja). That
        # interpreter starts from the base installation's sys.path, without this venv's
        # site-packages, and fails with "No module named 'pemja'"; PYTHONPATH (inherited by the
        # gateway JVM, which PyFlink starts later) puts them back.
        site_packages = [p for p in sys.path if p.endswith("site-packages")]
        os.environ["PYTHONPATH"] = os.pathsep.join(
            site_packages + [p for p in [os.environ.get("PYTHONPATH")] if p])
    jars = ensure_jars()
    for sub in ("input", "startup", "checkpoints", "samples"):
        shutil.rmtree(work / sub, ignore_errors=True)
    prepared = prepare_input(args.input, work / "input" / "events.parquet", windows)

    startup_seconds = job_overhead_seconds = None
    if not args.no_startup_run and prepared["first"] is not None:
        one = work / "startup" / "input" / "events.parquet"
        one.parent.mkdir(parents=True)
        pq.write_table(prepared["first"], one)
        startup_seconds = build_and_run(args, args.workload, one, work / "startup" / "output",
                                        work / "startup" / "samples",
                                        work / "startup" / "checkpoints", jars)
        job_overhead_seconds = build_and_run(args, args.workload, one, work / "startup" / "output2",
                                             work / "startup" / "samples2",
                                             work / "startup" / "checkpoints2", jars)

    load_before = os.getloadavg()[0]
    seconds = build_and_run(args, args.workload, work / "input" / "events.parquet", output,
                            work / "samples", work / "checkpoints", jars)

    # Flink's filesystem sink names its files part-<uuid>-<subtask>-<n>, without a suffix;
    # peer_io.read_output looks for *.parquet
    for part in output.rglob("part-*"):
        if part.is_file() and part.suffix != ".parquet":
            part.rename(part.with_name(part.name + ".parquet"))

    latency = {"latency_p50_s": None, "latency_p99_s": None}
    window_latency = {}
    if windows:
        sampled = read_samples(work / "samples", ("seq", "t_in"))
        ts = pq.read_table(work / "input" / "events.parquet", columns=["ts"]).column("ts")
        steady, window_latency = window_timing(output, ts.to_numpy(), sampled)
        samples = len(window_latency.get("window_latencies_s", []))
        window_latency.pop("window_latencies_s", None)
    else:
        sampled = read_samples(output, ("seq", "t_in", "t_out"))
        lat = (sampled["t_out"] - sampled["t_in"]) / 1000
        if len(lat):
            latency = {"latency_p50_s": float(np.percentile(lat, 50)),
                       "latency_p99_s": float(np.percentile(lat, 99))}
        steady = steady_rate(sampled["seq"], sampled["t_out"])
        samples = len(lat)

    _, settings = flink_config(args, work / "checkpoints", jars)
    events = prepared["events"]
    peer_io.print_result(
        system=describe(args),
        workload=args.workload,
        versions={"flink": FLINK_VERSION, "python": platform.python_version(),
                  "java": java_version()},
        events=events,
        seconds=seconds,
        events_per_s=events / seconds if seconds else None,
        steady_events_per_s=steady,
        startup_seconds=startup_seconds,
        job_overhead_seconds=job_overhead_seconds,
        **latency,
        **window_latency,
        latency_samples=samples,
        load_average_1m={"before": load_before, "after": os.getloadavg()[0],
                         "cpus": os.cpu_count()},
        latency_note=("per-event latency is not defined for windows; window_latency: from the "
                      "source reading the event that closes a window (first ts >= end + 10 s) "
                      "to that window's row reaching the sink, over the windows the watermark "
                      "closed; steady rate: input positions of those closing events over the "
                      "sink clock, first to last closed window"
                      if windows else
                      "source projection -> projection before the sink, every 1000th seq; the "
                      "sink's files become readable at the next checkpoint"),
        config={"parallelism": args.parallelism, "state_backend": args.state_backend,
                "checkpoint_ms": args.checkpoint_ms, "checkpointing_mode": "EXACTLY_ONCE",
                "python_execution_mode": args.execution_mode,
                "key_by": args.key_by if args.workload.endswith("datastream") else None,
                "over_order": args.over_order if args.workload == "running_sum_sql" else None,
                "python_state_cache_size": args.state_cache_size,
                "python_bundle_size": args.bundle_size, "python_bundle_time_ms": args.bundle_time,
                "input_format": f"parquet, {prepared['files']} batch files concatenated in order "
                                "into one file before timing (one split, read in order)",
                "output_format": "parquet (filesystem sink, committed on checkpoint)",
                "seq_renumbered": prepared["seq_renumbered"],
                "extra": {k: v for k, v in settings.items() if any(
                    k == item.partition("=")[0].strip() for item in args.set)}},
    )


if __name__ == "__main__":
    main()
