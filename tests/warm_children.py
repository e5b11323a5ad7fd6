"""Child processes that start warm: a test's ``python -m <module>`` child whose imports are done
by the time the test asks for it.

The crash tests run a pipeline in a child and kill it at a protocol step. About seventy
children a suite each spent ~2 s importing the engine (pandas, pyarrow, delta-rs, PySpark)
before their first batch. Here the next child starts while the current test works (its own
child running, then its recovery in the suite's session), so that start overlaps time the test
spends anyway. A child's Spark session is lazy (``ops.lazy_spark_session``): a driver-mode run
on a local disk starts no JVM, and one that needs Spark starts it after its request, in the
asked-for environment::

    children = WarmChildren(folder)
    done = children.run("tests.ops.runtime.recovery.crash_pipeline",
                        dict(child_env, LAKESTREAM_CRASH_AT="after_plan:1"))
    assert done.returncode == -signal.SIGKILL

A spare child is started with the environment it will be asked to run in, less the variables
a child reads only once it runs (:func:`read_at_run_time`), and is handed only a request whose
environment is the same but for those. So the module runs as it would in a cold ``python -m``
child: as ``__main__``, in the asked-for environment, which a Spark session it starts (and its
Python workers) sees too. A spare
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

#: Variables a child reads only once it runs: where its warehouse is, where it
#: crashes, what the test's own modules are told (the rest of a child's environment shapes its
#: Spark session, so a spare started with other values of it is not used).
RUN_TIME_VARIABLES = frozenset({"LAKESTREAM_WAREHOUSE", "LAKESTREAM_CRASH_AT"})
RUN_TIME_PREFIXES = ("CRASH_TEST_", "TIMER_TEST_", "KAFKA_")


def read_at_run_time(variable: str) -> bool:
    """Whether a child reads ``variable`` only once it runs (after its imports).

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

    def run(self, module: str, env: dict[str, str], timeout: float = 600, *,
            spark: bool = False) -> subprocess.CompletedProcess:
        """Run ``module`` as ``__main__`` in a child with environment ``env``; like
        ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)``. ``spark``:
        the module's run needs Spark (distributed mode), so its spare starts the JVM too."""
        return self.start(module, env, spark=spark).wait(timeout)

    def start(self, module: str, env: dict[str, str], *, spark: bool = False) -> StartedChild:
        """Hand ``module`` to a waiting child (a cold one if none waits for this environment),
        then start the next spare; return at once."""
        key = _session_environment({**env, **({_SPARK: "1"} if spark else {})})
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


#: Set in a spare for a module whose run needs Spark: the spare starts the JVM before it is asked.
_SPARK = "WARM_CHILD_STARTS_SPARK"


def _serve() -> None:
    """In the child: import what the modules import (and start Spark, for a run that needs
    it), wait for the request, run the module."""
    import ops  # the slow part (pandas, pyarrow, delta-rs, PySpark), before it is needed

    spark = ops.spark_session() if os.environ.pop(_SPARK, None) else None
    request = sys.stdin.readline()
    if not request:  # the suite ended (or no longer needs this spare)
        return
    asked = json.loads(request)
    os.environ.update(asked["env"])
    if spark is not None:
        # Spark's Python workers inherit the JVM's environment, which predates the request:
        # they get these variables as every Python function's environment instead (as with
        # spark.executorEnv.*), so code on executors sees what a cold child's would
        spark.sparkContext.environment.update(asked["env"])
    runpy.run_module(asked["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _serve()
