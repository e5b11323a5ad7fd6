"""``python -m assets.warm_worker``: a process that has loaded a code location once and forks a
run worker for each run :class:`~assets.warm_launcher.WarmRunLauncher` hands it.

A Dagster run worker spends 3-5 s starting (a fresh interpreter imports Dagster, its
storage and the code location, pandas, PySpark and the engine) before the first step of a run
whose batch takes 0.2 s. This process does that once; a fork then starts a run in
milliseconds with everything imported and nothing run (no instance, no Spark session, no
thread: forking is safe). The child is what ``dagster api execute_run`` is, minus the imports.

It speaks JSON lines on stdin/stdout with the launcher:

1. ``{"origin": <RepositoryPythonOrigin>, "instance": <InstanceRef>}``: load the code location
   and the instance's storage modules; answer ``{"ready": true}`` or ``{"error": "..."}``.
2. then per run ``{"run_id": "..."}``: answer ``{"pid": N}`` (the forked run worker), or
   ``{"stale": true}`` and exit when a source file it loaded changed since (the launcher then
   starts a fresh one: a run never executes code older than its files).

It exits when its stdin closes (the launcher went away); forked run workers live on, each in
a session of its own.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from dagster import DagsterInstance
from dagster._cli.api import _execute_run_command_body
from dagster._core.instance.ref import InstanceRef
from dagster._core.origin import RepositoryPythonOrigin
from dagster._serdes import deserialize_value
from dagster._utils.hosted_user_process import recon_repository_from_origin
from dagster._utils.interrupts import capture_interrupts

#: Where installed packages live: their files are not watched for changes.
_INSTALLED = tuple({os.path.realpath(prefix) for prefix in (sys.prefix, sys.base_prefix)})


def main() -> int:
    """Serve the launcher until its pipe closes; in a forked child, run the run it forked for."""
    # the protocol gets a descriptor of its own; what anything prints (Python or a library
    # writing to descriptor 1) goes where errors go, never into the protocol
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    handshake = json.loads(sys.stdin.readline() or "null")
    if handshake is None:
        return 0
    try:
        instance_ref = deserialize_value(handshake["instance"], InstanceRef)
        _load(deserialize_value(handshake["origin"], RepositoryPythonOrigin), instance_ref)
    except Exception as exc:  # the launcher starts runs the usual way and logs why
        _answer(protocol, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    _answer(protocol, {"ready": True})
    run_id = _serve(protocol, _source_stamps())
    return 0 if run_id is None else _run(run_id, instance_ref)


def _load(origin: RepositoryPythonOrigin, instance_ref: InstanceRef) -> None:
    """Import the code location and what a run worker's instance will import."""
    recon_repository_from_origin(origin).get_definition()
    for data in (instance_ref.local_artifact_storage_data, instance_ref.run_storage_data,
                 instance_ref.event_storage_data, instance_ref.schedule_storage_data,
                 instance_ref.compute_logs_data, instance_ref.run_coordinator_data,
                 instance_ref.run_launcher_data, instance_ref.storage_data):
        if data is not None:
            importlib.import_module(data.module_name)


def _serve(protocol: TextIO, stamps: dict[str, tuple[int, int]]) -> str | None:
    """Fork a run worker per request; return the run id in the child, ``None`` at the end."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # run workers are reaped by the system
    for line in sys.stdin:
        run_id = json.loads(line)["run_id"]
        if _source_stamps(stamps) != stamps:
            _answer(protocol, {"stale": True})
            return None
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            protocol.close()
            _become_run_worker()
            return run_id
        _answer(protocol, {"pid": pid})
    return None


def _become_run_worker() -> None:
    """Leave the launcher's pipes and process group, as a process it spawned would."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run waits for its own children (a JVM)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # its output already goes where the launcher's errors go
    os.close(devnull)


def _run(run_id: str, instance_ref: InstanceRef) -> int:
    """What ``dagster api execute_run`` does with a run (SIGTERM and SIGINT interrupt it)."""
    with capture_interrupts(), DagsterInstance.from_ref(instance_ref) as instance:
        return _execute_run_command_body(run_id, instance, lambda _event: None,
                                         set_exit_code_on_failure=False)


def _source_stamps(known: dict[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
    """Modification time and size of each source file loaded from outside the installed
    packages (the code location and the project's own packages); the files of ``known`` when
    given, so a removed file shows as a change."""
    paths = list(known) if known is not None else list(_loaded_sources())
    stamps = {}
    for path in paths:
        try:
            found = os.stat(path)
        except OSError:
            continue
        stamps[path] = (found.st_mtime_ns, found.st_size)
    return stamps


def _loaded_sources() -> Iterator[str]:
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py"):
            real = os.path.realpath(path)
            if not real.startswith(_INSTALLED) and Path(real).is_file():
                yield real


def _answer(protocol: TextIO, reply: dict[str, Any]) -> None:
    protocol.write(json.dumps(reply) + "\n")
    protocol.flush()


if __name__ == "__main__":
    sys.exit(main())
