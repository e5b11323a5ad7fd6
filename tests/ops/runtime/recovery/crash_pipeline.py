"""The multi-batch pipeline crash tests run in a child process (``python -m ...``).

It exercises everything recovery must restore: keyed managed state, a tracked variable, a global
append-only table truncated to its marker, a Delta sink, and checkpoints every two batches (so
uncheckpointed state is held in memory between them). The ``plain`` variant has no hooks and
checkpoints every batch, so a batch's sinks are written while the checkpoint before it commits
(the executor holds that back for pipelines with hooks); ``CRASH_TEST_PIPELINE=plain`` runs it.
The ``distributed`` variant runs its keyed map on Spark executors; the ``vectorized`` ones run
the sum on whole Series, its state held as columns, on the driver and on executors; the
``typed`` ones are the vectorized sum with its state stored in typed columns, on the driver
and on executors; ``processor`` is the sum as a Spark ``StatefulProcessor`` (with an initial
state, and ``processor_event_time`` a sum per key until its event-time timer fires).
"""

import os
import signal
import time
from pathlib import Path

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

import ops as sp
from state import CheckpointLog
from state.lake import tables

SCHEMA = {"k": "long", "x": "long"}
audit = sp.global_table("audit", index="idx")
rows_seen = sp.track("rows_seen", {"total": 0, "by_key": {}})


class _Barrier(sp.Hooks):
    """Test-only: holds each run at on_start until N runs got there, to force true overlap."""

    marker_key = "barrier"

    def on_start(self, ctx):
        folder = os.environ.get("CRASH_TEST_BARRIER")
        if not folder:
            return
        Path(folder, str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(list(Path(folder).iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)


def running_sum(op, md, data):
    out = _summed(op, md, data)
    audit.append(out[["k", "total"]])
    return out


def running_sum_plain(op, md, data):
    return _summed(op, md, data)


def _summed(op, md, data):
    _hold_if_asked(md.batch_id)
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    rows_seen.value["total"] += len(data)
    rows_seen.value["by_key"][md.key] = rows_seen.value["by_key"].get(md.key, 0) + len(data)
    return data.assign(total=total)


def _hold_if_asked(batch_id):
    """Test-only: with ``CRASH_TEST_HOLD_AT=<batch>:<folder>``, batch ``<batch>`` says so
    (``<folder>/reached``) and waits (at most two minutes) for ``<folder>/go``, so a test can
    change the world (stop the object store) in the middle of that batch."""
    asked = os.environ.get("CRASH_TEST_HOLD_AT")
    if not asked or int(asked.split(":", 1)[0]) != batch_id:
        return
    folder = Path(asked.split(":", 1)[1])
    (folder / "reached").touch()
    deadline = time.monotonic() + 120
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def build(name: str = "crashy"):
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .map(running_sum, state=0, state_type="json")  # text: typed has builds of its own
             .write.to_delta("out"))
            .named(name).checkpoint_every(batches=2).track(rows_seen).with_hooks(audit, _Barrier()))


def build_plain(name: str = "crashy_plain"):
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .map(running_sum_plain, state=0, name="running_sum", state_type="json")
             .write.to_delta("out"))
            .named(name).track(rows_seen))


def running_sum_distributed(op, md, data):
    """On an executor: no tracked variable; kills its own Python worker once when asked, so
    Spark must retry the task (or, without retries, the run fails and the next one replays)."""
    flag = os.environ.get("CRASH_TEST_KILL_WORKER")
    if flag and md.batch_id == 2 and not Path(flag).exists():
        Path(flag).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def build_distributed(name: str = "crashy_distributed"):
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .map(running_sum_distributed, state=0, name="running_sum", state_type="json")
             .write.to_delta("out"))
            .named(name).with_mode("distributed"))


def running_sum_vectorized(op, md, data):
    """The running sum on whole Series: its state is held as columns (state/run/columns.py)."""
    running = data.groupby("k", sort=False)["x"].cumsum() + data["k"].map(sp.get(op, md))
    sp.set(op, md, running.groupby(data["k"]).last())
    return data.assign(total=running)


def build_vectorized(name: str = "crashy_vectorized", mode: str = "driver", **typed):
    """The running sum vectorized, on the driver or on executors. It checkpoints every two
    batches, which in driver mode leaves state set in columns waiting in memory, encoded,
    for the next checkpoint (distributed mode checkpoints every batch whatever the policy).
    ``typed``: ``state_type=`` of its map (typed storage; by default text)."""
    typed = {"state_type": "json", **typed}
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .map(running_sum_vectorized, state=0, vectorized=True, name="running_sum", **typed)
             .write.to_delta("out"))
            .named(name).checkpoint_every(batches=2).with_mode(mode))


def build_vectorized_distributed():
    return build_vectorized("crashy_vectorized_distributed", mode="distributed")


def build_typed():
    """The vectorized running sum with its state in typed columns (``state_type=int``)."""
    return build_vectorized("crashy_typed", state_type=int)


def build_typed_distributed():
    """:func:`build_typed` on executors: its tasks read and write typed ``_state`` files."""
    return build_vectorized("crashy_typed_distributed", mode="distributed", state_type=int)


class RunningSum(StatefulProcessor):
    """The running sum as a Spark ``StatefulProcessor``: its total in a ``ValueState``."""

    def init(self, handle):
        self.total = handle.getValueState("total", "total long")

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows), ignore_index=True)
        before = self.total.get()[0] if self.total.exists() else 0
        running = frame["x"].cumsum() + before
        self.total.update((int(running.iloc[-1]),))
        yield frame.assign(total=running)


class RunningSumFrom(RunningSum):
    """:class:`RunningSum` from the totals of an initial state."""

    def handleInitialState(self, key, initialState, timerValues):
        self.total.update((int(initialState["total"].sum()),))


#: what :func:`build_processor_initial` starts from: key 7 at 100, and a key never seen in input
INITIAL_TOTALS = [{"k": 7, "total": 100}, {"k": 99, "total": 5}]


def build_processor(name: str = "crashy_processor", initial: bool = False, mode: str = "driver"):
    """:class:`RunningSum` by ``transform_with_state``, checkpointing every two batches as
    the vectorized sum does (its state waits in memory between them); ``initial``: from
    :data:`INITIAL_TOTALS`, applied in the first batch."""
    processor = RunningSumFrom() if initial else RunningSum()
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .group_by("k").transform_with_state(processor, "k long, x long, total long",
                                                 name="running_sum",
                                                 initial_state=INITIAL_TOTALS if initial else None)
             .write.to_delta("out"))
            .named(name).checkpoint_every(batches=2).with_mode(mode))


def build_processor_initial():
    return build_processor("crashy_processor_initial", initial=True)


def build_processor_initial_distributed():
    """:func:`build_processor_initial` on executors: the initial state's rows join the first
    batch's input, each routed to its key's task."""
    return build_processor("crashy_processor_initial_distributed", initial=True, mode="distributed")


class SumUntilQuiet(StatefulProcessor):
    """Event time (``x`` read as seconds): a key's sum until 5 s of event time pass without a
    row of it (its timer moved at each row), then one row ``(k, x=the timer's second, total)``
    and the sum cleared."""

    def init(self, handle):
        self.handle = handle
        self.total = handle.getValueState("total", "total long")

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows), ignore_index=True)
        self.total.update(((self.total.get()[0] if self.total.exists() else 0)
                           + int(frame["x"].sum()),))
        for due in list(self.handle.listTimers()):
            self.handle.deleteTimer(due)
        self.handle.registerTimer(int(frame["ts"].max().value // 1_000_000) + 5_000)
        yield from ()

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        total = self.total.get()[0]
        self.total.clear()
        yield pd.DataFrame({"k": [key[0]], "x": [expiredTimerInfo.getExpiryTimeInMs() // 1000],
                            "total": [total]})


def _with_seconds(data):
    return data.assign(ts=pd.to_datetime(data["x"], unit="s", utc=True))


def build_processor_event_time(name: str = "crashy_processor_event_time", mode: str = "driver"):
    """:class:`SumUntilQuiet` after a 5 s watermark on ``x`` as seconds: timers fire in later
    batches and in a batch with no input after the last, key 7's rows turn late from the third
    batch; checkpoints every two batches."""
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .map(_with_seconds).with_watermark("ts", "5s")
             .group_by("k").transform_with_state(SumUntilQuiet(), "k long, x long, total long",
                                                 time_mode="EventTime", name="running_sum")
             .write.to_delta("out"))
            .named(name).checkpoint_every(batches=2).with_mode(mode))


def build_processor_event_time_distributed():
    """:func:`build_processor_event_time` on executors: the runtime measures the watermark
    and hands each task its keys' due timers."""
    return build_processor_event_time("crashy_processor_event_time_distributed", "distributed")


class RecentAndSeen(StatefulProcessor):
    """A key's last three ``x`` in a ``ListState`` (each row's ``put`` drops the head and adds
    one: only those two entries are written) and a count per ``x % 3`` in a ``MapState`` (one
    entry updated per row); ``total``: the sum of the last three after the row."""

    def init(self, handle):
        self.recent = handle.getListState("recent", "x long")
        self.seen = handle.getMapState("seen", "rem long", "n long")

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows), ignore_index=True)
        recent, totals = [x for (x,) in self.recent.get()], []
        for x in frame["x"].tolist():
            recent = (recent + [x])[-3:]
            self.recent.put([(value,) for value in recent])
            remainder = (x % 3,)
            self.seen.updateValue(remainder, ((self.seen.getValue(remainder) or (0,))[0] + 1,))
            totals.append(sum(recent))
        yield frame.assign(total=totals)


def build_processor_entries(name: str = "crashy_processor_entries", mode: str = "driver"):
    """:class:`RecentAndSeen`: its list and map kept as a row per element and entry,
    checkpointing every two batches (on executors: every batch)."""
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
             .group_by("k").transform_with_state(RecentAndSeen(), "k long, x long, total long",
                                                 name="running_sum")
             .write.to_delta("out"))
            .named(name).checkpoint_every(batches=2).with_mode(mode))


def build_processor_entries_distributed():
    """:func:`build_processor_entries` on executors: each task reads its keys' entries from
    ``_state``'s files and writes what it changed as files of its own."""
    return build_processor_entries("crashy_processor_entries_distributed", "distributed")


BUILDERS = {"hooked": build, "plain": build_plain, "distributed": build_distributed,
            "vectorized": build_vectorized, "vectorized_distributed": build_vectorized_distributed,
            "typed": build_typed, "typed_distributed": build_typed_distributed,
            "processor": build_processor, "processor_initial": build_processor_initial,
            "processor_initial_distributed": build_processor_initial_distributed,
            "processor_event_time": build_processor_event_time,
            "processor_event_time_distributed": build_processor_event_time_distributed,
            "processor_entries": build_processor_entries,
            "processor_entries_distributed": build_processor_entries_distributed}


# Six publishes -> six batches of two keys each.
INPUT = [[{"k": b % 3, "x": b * 10 + i} for i in range(3)] + [{"k": 7, "x": b + 1}]
         for b in range(6)]

# The distributed variants take the first two: each of their batches is a few Spark jobs. The
# event-time one takes all six, which its timers need to fire.
DISTRIBUTED_INPUT = INPUT[:2]
WHOLE_INPUT_ON_EXECUTORS = {"crashy_processor_event_time_distributed",
                            "crashy_processor_initial_distributed",
                            "crashy_processor_entries_distributed"}


def publish_all(spark, pipeline, warehouse):
    short = pipeline.mode == "distributed" and pipeline.name not in WHOLE_INPUT_ON_EXECUTORS
    for rows in DISTRIBUTED_INPUT if short else INPUT:
        pipeline.publish(spark, rows, warehouse)


def outcome(spark, pipeline, warehouse):
    """Everything that must match the crash-free run."""
    layout = pipeline.layout(warehouse)
    last = CheckpointLog(spark, layout).latest()
    sink = pipeline.read_sink(spark, "out", warehouse)
    state = sp.read_state(spark, pipeline, "running_sum", warehouse=warehouse)
    result = {
        "sink": sink[["k", "x", "total", "_batch_id", "_row"]].values.tolist(),
        "state": sorted(zip(state["key"], state["value"])),
        "batch": last.batch_id,
    }
    for op in pipeline.stream.operators:  # a list's or map's rows, one per element or entry
        for name, _ in op.declares().entries:
            entries = sp.read_state(spark, pipeline, name, warehouse=warehouse)
            result[name] = sorted(zip(entries["key"], entries["entry"], entries["value"]))
    if "rows_seen" in last.tracked:
        rows_seen.restore(last.tracked["rows_seen"])
        result["tracked"] = rows_seen.value
    if "global:audit" in last.markers:
        audit = (tables.read(spark, layout.table("audit")).orderBy("idx").toPandas()
                 [["idx", "k", "total"]])
        result.update(audit=audit.values.tolist(), audit_marker=last.markers["global:audit"])
    return result


def run_until_drained(spark, pipeline, warehouse=None, batches=None):
    """A continuous run of ``pipeline`` that stops once a checkpoint covers ``batches``
    (bounded: at most a minute); every batch of :data:`INPUT` unless told."""
    batches = len(INPUT) if batches is None else batches
    stop = sp.StopSignal()

    def checkpointed(report):
        if report.batch_id >= batches:
            stop.set(f"batch {batches} checkpointed")

    return pipeline.run_continuously(spark, warehouse, trigger="100ms", stop=stop,
                                     max_seconds=60, checkpointed=checkpointed)


if __name__ == "__main__":
    spark = sp.lazy_spark_session()  # as a Dagster step: a JVM only if the run needs one
    pipeline = BUILDERS[os.environ.get("CRASH_TEST_PIPELINE", "hooked")]()
    if os.environ.get("CRASH_TEST_RUN") == "continuous":
        report = run_until_drained(spark, pipeline)
    else:
        report = pipeline.run_once(spark)
    print(f"DONE checkpoint={report.checkpoint_id} batches={len(report.batches)}", flush=True)
