"""The path users take through Dagster, timed end to end: the real daemon, the real sensor, the
example code location (``dagster_project``) in a fresh ``DAGSTER_HOME`` and warehouse.

What it runs, in order, each as a user would:

1. ``dagster job execute -m dagster_project -j run_running_sum`` after a publish of the seed's
   7 records (the pipeline's first run: a new ``_state``), then again with nothing new.
2. ``dagster-daemon run`` (the sensor daemon, the run queue and the code server it starts),
   ``dagster sensor start running_sum_sensor``; then ``--rounds`` rounds of: wait a random part
   of the sensor's interval, publish ``--records`` records, and time
   publish -> the sink's next commit (*readable*), the run's created -> started -> success, and
   each step of the run (from its event log), with what the engine itself reported
   (``N batch(es) … X s``).
3. A UI-equivalent materialisation: the sensor stopped, a publish, then ``dagster job launch``
   (what the UI's *Materialize* does: the run goes to the instance's queue, the daemon
   launches it): publish -> readable and created -> success.

``--checkout DIR`` runs another checkout's code (the bench's own by default), with every
process importing that checkout (``PYTHONPATH``, working directory): the *before* arm of a
side-by-side comparison is a worktree of an older commit. The sensor's interval is
``--poll`` seconds (``LAKESTREAM_POLL_SECONDS``; a checkout older than issue 64 ignores it and
ticks every 30 s, which the output says).

    .venv/bin/python bench/dagster_runs.py                      # 5 rounds, ~3 min
    .venv/bin/python bench/dagster_runs.py --checkout /work/wt-before --label before
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import headline, print_table, write_results  # noqa: E402

PIPELINE = "running_sum"
JOB = f"run_{PIPELINE}"
SENSOR = f"{PIPELINE}_sensor"
#: the longest a round waits for its rows, or a run for its end: the loop always ends
ROUND_TIMEOUT_S = 180


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--poll", type=int, default=5, help="the sensor's interval, seconds")
    parser.add_argument("--records", type=int, default=7)
    parser.add_argument("--label", default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    label = args.label or checkout.name
    with tempfile.TemporaryDirectory(prefix="dagster-runs-") as tmp:
        bench = Bench(checkout, Path(tmp), args.poll)
        results = bench.run(args.rounds, args.records, random.Random(args.seed))
    report(label, args, results)


class Bench:
    """A fresh instance and warehouse for ``checkout``, and the processes that use them."""

    def __init__(self, checkout: Path, tmp: Path, poll: int):
        self.checkout, self.poll = checkout, poll
        home = tmp / "dagster_home"
        home.mkdir()
        shutil.copy(checkout / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
        self.warehouse = tmp / "warehouse"
        self.env = dict(os.environ, DAGSTER_HOME=str(home), LAKESTREAM_WAREHOUSE=str(self.warehouse),
                        LAKESTREAM_POLL_SECONDS=str(poll), PYTHONPATH=str(checkout))
        self.bin = Path(sys.executable).parent
        os.environ.update(DAGSTER_HOME=str(home), LAKESTREAM_WAREHOUSE=str(self.warehouse))
        sys.path.insert(0, str(checkout))  # this process publishes with the checkout's code
        import dagster as dg

        self.instance = dg.DagsterInstance.get()

    # the three parts -------------------------------------------------------------------------
    def run(self, rounds: int, records: int, chance: random.Random) -> dict:
        results: dict = {"execute": self.executes()}
        daemon = self.start_daemon()
        try:
            self.cli("sensor", "start", SENSOR, "-w", "workspace.yaml")
            self.settle()
            results["rounds"] = [self.sensor_round(records, chance, n) for n in range(rounds)]
            self.cli("sensor", "stop", SENSOR, "-w", "workspace.yaml")
            results["launch"] = self.launched(records)
        finally:
            stop(daemon)
        return results

    def executes(self) -> dict:
        """``dagster job execute`` of the pipeline's job: its first run, then nothing new."""
        self.publish(7)
        first = self.timed_cli("job", "execute", "-m", "dagster_project", "-j", JOB)
        again = self.timed_cli("job", "execute", "-m", "dagster_project", "-j", JOB)
        return {"first_s": first, "nothing_new_s": again,
                "nothing_new_steps": self.steps(self.latest_run())}

    def settle(self) -> None:
        """Wait for the sensor's first tick (a new sensor requests a run for the position it
        finds, which has nothing new by now) and the run it requested: the rounds start with
        nothing in flight."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while self.sensor_cursor() is None or self.in_flight():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{SENSOR} did not tick, or its first run did not end")
            time.sleep(0.2)

    def sensor_cursor(self) -> str | None:
        for found in self.instance.all_instigator_state():
            if found.name == SENSOR and found.instigator_data is not None:
                return found.instigator_data.cursor
        return None

    def in_flight(self) -> bool:
        return any(not record.dagster_run.is_finished for record in self.instance.get_run_records())

    def sensor_round(self, records: int, chance: random.Random, n: int) -> dict:
        """Publish at a random moment of the sensor's interval; time it to readable and the
        run it started."""
        time.sleep(chance.uniform(0, self.poll))
        known = {record.dagster_run.run_id for record in self.instance.get_run_records()}
        published, version = self.publish(records)
        readable = self.wait_readable(version) - published
        run_id = self.wait_new_run(known)
        figures = {"round": n + 1, "readable_s": readable, **self.run_times(run_id, published)}
        print(f"  round {n + 1}: readable after {readable:.1f} s; " + ", ".join(
            f"{name} {value:.2f}" for name, value in figures.items()
            if name.endswith("_s") and name != "readable_s"), flush=True)
        return figures

    def launched(self, records: int) -> dict:
        """What the UI's *Materialize* does: a run submitted to the queue, launched by the
        daemon."""
        known = {record.dagster_run.run_id for record in self.instance.get_run_records()}
        published, version = self.publish(records)
        self.cli("job", "launch", "-j", JOB, "-w", "workspace.yaml")
        readable = self.wait_readable(version) - published
        run_id = self.wait_new_run(known)
        return {"readable_s": readable, **self.run_times(run_id, published)}

    # measuring --------------------------------------------------------------------------------
    def publish(self, records: int) -> tuple[float, int]:
        """Publish ``records`` to the pipeline's inbox; when, and the sink's version then."""
        import ops as sp
        from dagster_project.pipelines import running_sum_keyed

        # a publish is a delta-rs append: before issue 64 as after, it needed no session
        spark = sp.lazy_spark_session() if hasattr(sp, "lazy_spark_session") else None
        version = self.sink_version()
        rows = [{"x": 1, "y": n % 3} for n in range(records)]
        started = time.time()
        running_sum_keyed.publish(spark, rows, str(self.warehouse))
        return started, version

    def sink_version(self) -> int:
        log = self.warehouse / PIPELINE / "sums" / "_delta_log"
        versions = [int(name.name[:20]) for name in log.glob("*.json")] if log.exists() else []
        return max(versions, default=-1)

    def wait_readable(self, before: int) -> float:
        """When the sink's next commit appeared (a reader sees the new rows from then on)."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while self.sink_version() <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no new commit of {PIPELINE}/sums in {ROUND_TIMEOUT_S} s")
            time.sleep(0.02)
        return time.time()

    def wait_new_run(self, known: set[str]) -> str:
        """The run not in ``known``, once it ended (successfully)."""
        import dagster as dg

        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while time.monotonic() < deadline:
            new = [r.dagster_run for r in self.instance.get_run_records()
                   if r.dagster_run.run_id not in known]
            if new and new[0].is_finished:
                if new[0].status != dg.DagsterRunStatus.SUCCESS:
                    raise RuntimeError(f"run {new[0].run_id} ended {new[0].status}")
                return new[0].run_id
            time.sleep(0.1)
        raise TimeoutError(f"no run of {JOB} ended in {ROUND_TIMEOUT_S} s")

    def latest_run(self) -> str:
        return self.instance.get_run_records(limit=1)[0].dagster_run.run_id

    def run_times(self, run_id: str, published: float) -> dict:
        record = self.instance.get_run_record_by_id(run_id)
        assert record is not None and record.start_time and record.end_time
        created = record.create_timestamp.timestamp()
        return {"publish_to_created_s": created - published,
                "created_to_started_s": record.start_time - created,
                "started_to_success_s": record.end_time - record.start_time,
                "created_to_success_s": record.end_time - created,
                **self.steps(run_id)}

    def steps(self, run_id: str) -> dict:
        """Where a run's time went: in the queue (enqueued -> the daemon launches it), starting
        its worker (launched -> the worker's first event: process start, imports, the code
        location), each
        step (the pipeline's, its checks together), what the engine said its run took, and the
        worker's end (last step -> success)."""
        started: dict[str, float] = {}
        seconds: dict[str, float] = {}
        at: dict[str, float] = {}
        engine = None
        for entry in self.instance.all_logs(run_id):
            event = entry.dagster_event
            kind = event.event_type.name if event is not None else None
            if kind is not None:
                at.setdefault(kind, entry.timestamp)
            if kind == "STEP_START":
                started[event.step_key] = entry.timestamp
            elif kind == "STEP_SUCCESS":
                seconds[event.step_key] = entry.timestamp - started[event.step_key]
            elif event is None and "batch(es), checkpoint" in entry.user_message:
                engine = float(entry.user_message.rsplit(", ", 1)[-1].rstrip("s"))
        checks = sum(value for key, value in seconds.items() if key != PIPELINE)
        nan = float("nan")
        last_step = max((started[key] + seconds[key] for key in seconds), default=nan)
        return {"queued_s": at.get("RUN_STARTING", nan) - at.get("RUN_ENQUEUED", nan),
                "worker_start_s": at.get("RUN_START", nan) - at.get("RUN_STARTING", nan),
                "pipeline_step_s": seconds.get(PIPELINE, nan), "checks_s": checks,
                "engine_s": nan if engine is None else engine,
                "worker_end_s": at.get("RUN_SUCCESS", nan) - last_step}

    # processes ---------------------------------------------------------------------------------
    def cli(self, *words: str) -> None:
        done = subprocess.run([str(self.bin / "dagster"), *words], cwd=self.checkout, env=self.env,
                              capture_output=True, text=True, timeout=ROUND_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"dagster {' '.join(words)} failed:\n{done.stderr[-3000:]}")

    def timed_cli(self, *words: str) -> float:
        started = time.perf_counter()
        self.cli(*words)
        return time.perf_counter() - started

    def start_daemon(self) -> subprocess.Popen:
        """``dagster-daemon run`` in a process group of its own (it starts the code server and
        each run's worker), once it has said it runs."""
        log = open(self.warehouse.parent / "daemon.log", "w")
        daemon = subprocess.Popen([str(self.bin / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                  cwd=self.checkout, env=self.env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self.instance.get_daemon_heartbeats():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start; see {log.name}")
            time.sleep(0.2)
        return daemon


def stop(process: subprocess.Popen) -> None:
    """Stop ``process`` and its group (SIGTERM, then SIGKILL after 30 s)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def report(label: str, args: argparse.Namespace, results: dict) -> None:
    execute, rounds, launch = results["execute"], results["rounds"], results["launch"]
    names = [name for name in rounds[0] if name.endswith("_s")]
    print_table(f"{label}: sensor-started runs, {args.records} records each, sensor every "
                f"{args.poll} s ({len(rounds)} rounds; p50 / max)",
                ["figure", "p50", "max"],
                [[name, statistics.median(r[name] for r in rounds), max(r[name] for r in rounds)]
                 for name in names])
    print_table(f"{label}: the CLI and a UI-equivalent launch (seconds)", ["what", "seconds"], [
        ["dagster job execute, first run (7 records)", execute["first_s"]],
        ["dagster job execute, nothing new", execute["nothing_new_s"]],
        ["  its pipeline step", execute["nothing_new_steps"]["pipeline_step_s"]],
        ["  its three checks", execute["nothing_new_steps"]["checks_s"]],
        ["dagster job launch: publish -> readable", launch["readable_s"]],
        ["dagster job launch: created -> success", launch["created_to_success_s"]]])
    p50 = {name: statistics.median(r[name] for r in rounds) for name in names}
    write_results(f"dagster_runs_{label}", {"args": {**vars(args), "checkout": str(args.checkout)},
                                            **results})
    headline(f"dagster_runs {label} poll {args.poll}s",
             f"readable p50 {p50['readable_s']:.1f} s, created->success {p50['created_to_success_s']:.1f} s, "
             f"started->success {p50['started_to_success_s']:.1f} s, step {p50['pipeline_step_s']:.2f} s, "
             f"execute nothing new {execute['nothing_new_s']:.1f} s")


if __name__ == "__main__":
    main()
