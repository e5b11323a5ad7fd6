"""The warm run launcher, through the real daemon: each run's worker is forked from one process
that loaded the code location, a changed source file gets a fresh one (the run executes the
new code), a run is terminated by its worker's pid, and a code location that cannot load
warm starts its runs the default way."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.warm_launcher import WORKER_PID_TAG, WarmRunLauncher, _WarmProcess

BIN = Path(sys.executable).parent
CODE = textwrap.dedent("""
    import os
    import time

    import dagster as dg

    VERSION = {version}


    @dg.op
    def mark():
        with open(os.environ["MARKS"], "a") as marks:
            marks.write(f"{{VERSION}} {{os.getpid()}} {{os.getppid()}}\\n")


    @dg.op
    def wait():
        time.sleep(120)


    @dg.job(executor_def=dg.in_process_executor)  # the op runs in the run worker itself
    def marking():
        mark()


    @dg.job(executor_def=dg.in_process_executor)
    def waiting():
        wait()


    defs = dg.Definitions(jobs=[marking, waiting])
""")
INSTANCE = """
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
run_launcher:
  module: assets.warm_launcher
  class: WarmRunLauncher
telemetry:
  enabled: false
"""


@pytest.fixture
def location(tmp_path):
    """A code location and an instance of its own, served by a running daemon."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE)
    (tmp_path / "warm_code.py").write_text(CODE.format(version=1))
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: warm_code.py\n      working_directory: .\n")
    env = dict(os.environ, DAGSTER_HOME=str(home), MARKS=str(tmp_path / "marks"))
    env.pop("PYTEST_CURRENT_TEST", None)
    # The instance first: its storage is created (and its schema stamped) once, before the
    # daemon opens it; both creating it at once failed on alembic's UNIQUE version row.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        with open(tmp_path / "daemon.log", "w") as log:
            daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                      cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        try:
            yield tmp_path, env, instance
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)


def _launch(folder, env, instance, job: str) -> str:
    """``dagster job launch`` (the queue, as the UI does); the new run's id."""
    known = {record.dagster_run.run_id for record in instance.get_run_records()}
    done = subprocess.run([str(BIN / "dagster"), "job", "launch", "-j", job, "-w", "workspace.yaml"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_id] = [record.dagster_run.run_id for record in instance.get_run_records()
                if record.dagster_run.run_id not in known]
    return run_id


def _ended(instance, run_id: str, timeout: float = 120) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not end within {timeout} s")


def _marks(folder) -> list[list[int]]:
    return [[int(word) for word in line.split()] for line in (folder / "marks").read_text().splitlines()]


def test_runs_fork_from_one_warm_process_until_the_code_changes(location):
    folder, env, instance = location
    first = _ended(instance, _launch(folder, env, instance, "marking"))
    second = _ended(instance, _launch(folder, env, instance, "marking"))
    assert first.status == second.status == dg.DagsterRunStatus.SUCCESS
    (one, pid_one, warm_one), (_, pid_two, warm_two) = _marks(folder)
    assert one == 1 and warm_one == warm_two  # both forked from the same loaded process
    assert first.tags[WORKER_PID_TAG] == str(pid_one) and second.tags[WORKER_PID_TAG] == str(pid_two)
    said = [entry.dagster_event.message for entry in instance.all_logs(first.run_id)
            if entry.dagster_event is not None and entry.dagster_event.message]
    assert any("Started a warm run worker" in message for message in said), said

    (folder / "warm_code.py").write_text(CODE.format(version=2))
    third = _ended(instance, _launch(folder, env, instance, "marking"))
    assert third.status == dg.DagsterRunStatus.SUCCESS
    version, _, warm_three = _marks(folder)[-1]
    assert version == 2 and warm_three != warm_one  # a fresh process loaded the new code


def test_a_warm_run_is_terminated_through_its_worker(location):
    folder, env, instance = location
    run_id = _launch(folder, env, instance, "waiting")
    deadline = time.monotonic() + 60
    while instance.get_run_by_id(run_id).status != dg.DagsterRunStatus.STARTED:
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    launcher = instance.run_launcher
    assert isinstance(launcher, WarmRunLauncher)
    assert launcher.terminate(run_id)
    assert _ended(instance, run_id, timeout=60).status == dg.DagsterRunStatus.CANCELED


def test_a_code_location_that_cannot_load_warm_is_refused_with_the_reason(tmp_path, caplog):
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import RepositoryPythonOrigin
    from dagster._serdes import serialize_value

    origin = RepositoryPythonOrigin(sys.executable, ModuleCodePointer("no_such_module", "defs",
                                                                      str(tmp_path)))
    with dg.instance_for_test() as instance:
        assert _WarmProcess.start(origin, serialize_value(instance.get_ref())) is None
    assert "no warm run worker" in caplog.text and "no_such_module" in caplog.text
