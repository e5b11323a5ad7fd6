"""A Dagster run launcher whose run workers start warm, for an instance on one machine.

Dagster's default launcher has the code location's server spawn a fresh interpreter per run,
which imports Dagster, its storage, the code location and everything it uses before the first
step: 3-5 s on a 2-core machine, for a sensor's run whose batch takes 0.2 s
(bench/dagster_runs.py). :class:`WarmRunLauncher` keeps, per code location, one process that
has imported all of that once (:mod:`assets.warm_worker`) and forks a run worker from it for
each run: the same execution as ``dagster api execute_run``, started in milliseconds.

It falls back to the default launcher for a run it cannot start so (no code origin, a worker
that cannot load the code location), and replaces a worker whose source files changed, so a
run never executes code older than its files. Set it in ``dagster.yaml`` (the project's own
instance does)::

    run_launcher:
      module: assets.warm_launcher
      class: WarmRunLauncher

Run workers are processes of this machine: a deployment that runs them elsewhere (Docker,
Kubernetes, ECS) keeps its own launcher.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

from dagster import DefaultRunLauncher
from dagster._core.events import EngineEventData
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._core.origin import RepositoryPythonOrigin
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

log = logging.getLogger(__name__)

#: The run tag holding a warm-started run's worker pid (what ``terminate`` signals).
WORKER_PID_TAG = "lakestream/worker_pid"
#: The longest a warm worker may take to load its code location, and to answer a request.
_LOAD_TIMEOUT_S = 300
_FORK_TIMEOUT_S = 30


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run in a worker forked from a process that loaded its code location
    (see the module docstring); Dagster's :class:`~dagster.DefaultRunLauncher` otherwise."""

    def __init__(self, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self._fallback = DefaultRunLauncher()
        self._warm: dict[str, _WarmProcess] = {}
        self._lock = threading.Lock()  # the daemon may launch from several threads
        super().__init__()

    # ConfigurableClass ---------------------------------------------------------------------
    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> WarmRunLauncher:
        return cls(inst_data=inst_data)

    def register_instance(self, instance: Any) -> None:
        super().register_instance(instance)
        self._fallback.register_instance(instance)

    # RunLauncher ----------------------------------------------------------------------------
    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        pid = self._fork(run.job_code_origin.repository_origin, run.run_id) \
            if run.job_code_origin is not None else None
        if pid is None:
            self._fallback.launch_run(context)
            return
        self._instance.add_run_tags(run.run_id, {WORKER_PID_TAG: str(pid)})
        self._instance.report_engine_event(
            f"Started a warm run worker (pid: {pid}), forked from the process that loaded the "
            "code location.", run, EngineEventData.in_process(pid), cls=self.__class__)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        if WORKER_PID_TAG not in run.tags:
            return self._fallback.terminate(run_id)
        self._instance.report_run_canceling(run)
        try:  # the worker turns SIGTERM into Dagster's interrupt: the run ends canceled
            os.kill(int(run.tags[WORKER_PID_TAG]), signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def dispose(self) -> None:
        with self._lock:
            warm, self._warm = list(self._warm.values()), {}
        for process in warm:
            process.close()
        self._fallback.dispose()

    # warm processes -------------------------------------------------------------------------
    def _fork(self, origin: RepositoryPythonOrigin, run_id: str) -> int | None:
        """A run worker forked for ``run_id``, from a warm process of ``origin`` (started or
        replaced as needed); ``None`` when none can start it."""
        key = serialize_value(origin)
        with self._lock:
            for _attempt in range(2):  # a stale process is replaced once
                process = self._warm.get(key)
                if process is None:
                    process = _WarmProcess.start(origin, serialize_value(self._instance.get_ref()))
                    if process is None:
                        return None
                    self._warm[key] = process
                pid = process.fork(run_id)
                if pid is not None:
                    return pid
                log.info("the warm run worker of %s is stale (a source file changed) or gone: "
                         "starting another", origin.code_pointer.describe())
                self._warm.pop(key).close()
        return None


class _WarmProcess:
    """One ``python -m assets.warm_worker`` and its pipes."""

    def __init__(self, process: subprocess.Popen):
        self.process = process

    @classmethod
    def start(cls, origin: RepositoryPythonOrigin, instance_ref: str) -> _WarmProcess | None:
        """A warm process for ``origin``, once it has loaded it (``None``: it could not)."""
        directory = getattr(origin.code_pointer, "working_directory", None)
        process = subprocess.Popen([origin.executable_path, "-m", "assets.warm_worker"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   cwd=directory or None, start_new_session=True)
        warm = cls(process)
        reply = warm.ask({"origin": serialize_value(origin), "instance": instance_ref},
                         _LOAD_TIMEOUT_S)
        if reply.get("ready"):
            log.info("warm run worker %d loaded %s", process.pid, origin.code_pointer.describe())
            return warm
        log.warning("no warm run worker for %s (%s): runs start the default way",
                    origin.code_pointer.describe(), reply.get("error", "no answer"))
        warm.close()
        return None

    def fork(self, run_id: str) -> int | None:
        """The pid of a worker forked for ``run_id``; ``None`` when this process is stale or
        gone (the caller replaces it)."""
        reply = self.ask({"run_id": run_id}, _FORK_TIMEOUT_S)
        return int(reply["pid"]) if "pid" in reply else None

    def ask(self, request: dict, timeout: float) -> dict:
        """Send ``request``; its answer, or ``{}`` when none came within ``timeout``."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            return {}
        ready, _, _ = select.select([stdout], [], [], timeout)
        line = stdout.readline() if ready else ""
        return json.loads(line) if line else {}

    def close(self) -> None:
        """End the process (its forked run workers go on)."""
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
