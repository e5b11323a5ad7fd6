"""Child processes that start warm: a test's ``python -m <module>`` child whose imports are done
and whose Spark session is up by the time the test asks for it.

The crash tests run a pipeline in a child and kill it at a protocol step. About seventy
children a suite each spent ~5 s of their ~12 s importing and starting a JVM before their first
batch. Here the next child starts while the current test works (its own child running, then its
recovery in the suite's session), so that start overlaps time the test spends anyway::

    children = WarmChildren(folder)
    done = children.run("tests.ops.runtime.recovery.crash_pipeline",
                        dict(child_env, LAKESTREAM_CRASH_AT="after_plan:1"))
    assert done.returncode == -signal.SIGKILL

A spare child is started with the environment it will be asked to run in, less the variables
a child reads only after its session is up (:func:`read_at_run_time`), and is handed only a
request whose environment is the same but for those. So its Spark session is the one a cold
``python -m`` child would have started, and the module runs as it would there: as
``__main__``, in the asked-for environment, which its Spark Python workers see too. A spare
nobody asks for is killed at ``close()``, or exits by itself when the suite's process dies (its
stdin closes).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: Variables a child reads only once its session is up: where its warehouse is, where it
#: crashes, what the test's own modules are told (the rest of a child's environment shapes its
#: Spark session, so a spare started with other values of it is not used).
RUN_TIME_VARIABLES = frozenset({"LAKESTREAM_WAREHOUSE", "LAKESTREAM_CRASH_AT"})
RUN_TIME_PREFIXES = ("CRASH_TEST_", "TIMER_TEST_", "KAFKA_")


def read_at_run_time(variable: str) -> bool:
    """Whether a child reads ``variable`` only after its Spark session is up.

    >>> read_at_run_time("LAKESTREAM_CRASH_AT"), read_at_run_time("LAKESTREAM_SPARK_MASTER")
    (True, False)
    """
    return variable in RUN_TIME_VARIABLES or variable.startswith(RUN_TIME_PREFIXES)


def _session_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What of ``env`` a child's session depends on: the key its spare is kept under."""
    return tuple(sorted((key, value) for key, value in env.items() if not read_at_run_time(key)))


@dataclass
class _Child:
    process: subprocess.Popen
    stdout: Path
    stderr: Path


class WarmChildren:
    """Run ``python -m <module>`` children, each started before it was asked for (see the
    module's docstring). ``kept``: at most this many spares wait at once, one per distinct
    session environment, the most recently used kept."""

    def __init__(self, folder: Path, kept: int = 2):
        self._folder, self._kept = folder, kept
        self._spares: dict[tuple, _Child] = {}
        self._started = 0

    def run(self, module: str, env: dict[str, str], timeout: float = 600
            ) -> subprocess.CompletedProcess:
        """Run ``module`` as ``__main__`` in a child with environment ``env``; like
        ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)``."""
        return self.start(module, env).wait(timeout)

    def start(self, module: str, env: dict[str, str]) -> StartedChild:
        """Hand ``module`` to a waiting child (a cold one if none waits for this environment),
        then start the next spare; return at once."""
        key = _session_environment(env)
        child = self._spares.pop(key, None)
        if child is None or child.process.poll() is not None:
            child = self._spawn(key)
        self._spares[key] = self._spawn(key)  # the next test's child, starting while this runs
        self._keep_the_latest()
        request = {"module": module, "env": {k: v for k, v in env.items() if read_at_run_time(k)}}
        child.process.stdin.write(json.dumps(request) + "\n")
        child.process.stdin.close()
        return StartedChild(child, module)

    def waiting(self) -> list[int]:
        """The pids of the spares waiting for a request."""
        return [child.process.pid for child in self._spares.values()]

    def close(self) -> None:
        """Stop every spare still waiting."""
        for child in self._spares.values():
            child.process.kill()
            child.process.wait()
        self._spares.clear()

    def _spawn(self, key: tuple) -> _Child:
        self._started += 1
        out, err = (self._folder / f"child{self._started}.{kind}" for kind in ("out", "err"))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            # output to files: a pipe nobody reads while the spare waits would fill and stall it
            process = subprocess.Popen([sys.executable, "-m", __name__], env=dict(key),
                                       stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
                                       text=True)
        return _Child(process, out, err)

    def _keep_the_latest(self) -> None:
        while len(self._spares) > self._kept:
            oldest = next(iter(self._spares))
            child = self._spares.pop(oldest)
            child.process.kill()
            child.process.wait()


@dataclass
class StartedChild:
    """A child handed its module: wait for it with :meth:`wait`."""

    child: _Child
    module: str

    def wait(self, timeout: float = 600) -> subprocess.CompletedProcess:
        """Wait for the child to end; its exit code and output, as ``subprocess.run`` gives
        them (killed and ``TimeoutExpired`` raised after ``timeout`` seconds)."""
        process = self.child.process
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        stdout, stderr = (path.read_text() for path in (self.child.stdout, self.child.stderr))
        for path in (self.child.stdout, self.child.stderr):
            path.unlink()
        return subprocess.CompletedProcess([sys.executable, "-m", self.module],
                                           process.returncode, stdout, stderr)


def _serve() -> None:
    """In the child: start Spark as the module would, wait for the request, run the module."""
    import ops

    spark = ops.spark_session()  # the slow part (a JVM, Delta's classes), before it is needed
    request = sys.stdin.readline()
    if not request:  # the suite ended (or no longer needs this spare)
        return
    asked = json.loads(request)
    os.environ.update(asked["env"])
    # Spark's Python workers inherit the JVM's environment, which predates the request: they
    # get these variables as every Python function's environment instead (as with
    # spark.executorEnv.*), so code on executors sees what a cold child's would (a crash point)
    spark.sparkContext.environment.update(asked["env"])
    runpy.run_module(asked["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _serve()
