"""A Spark standalone cluster on loopback: one master and N workers, started with pyspark's own
``spark-class`` and stopped by pid. Used by the cluster test; handy by hand too::

    with standalone_cluster(tmp_dir, workers=2) as cluster:
        print(cluster.master_url)      # spark://127.0.0.1:<port>
        cluster.add_workers(1)         # grow it: three workers, once the third is ALIVE
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from ops.devservers.kafka_broker import free_port
from tests.spark_settings import SHORT_LIVED_JVM

SPARK_HOME = Path(pyspark.__file__).resolve().parent
_DEPLOY = "org.apache.spark.deploy"


@dataclass
class Cluster:
    master_url: str
    web_port: int
    workdir: Path
    _stack: ExitStack = field(repr=False)
    cores: int = 1
    memory: str = "1g"
    timeout_s: float = 120
    workers: int = 0
    worker_wrapper: tuple[str, ...] = ()  # a command each worker's JVM is started under

    def state(self) -> dict:
        """The master's JSON status page: workers, running and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=10) as page:
            return json.load(page)

    def add_workers(self, count: int) -> None:
        """Start ``count`` more workers; return once all of them are ALIVE. A running application
        keeps the executors it has; the next one gets executors on every worker."""
        for n in range(self.workers, self.workers + count):
            self._stack.enter_context(_daemon(
                self.workdir / f"worker{n}.log", f"{_DEPLOY}.worker.Worker", self.master_url,
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.workdir / f"work{n}"),
                wrapper=self.worker_wrapper))
        self.workers += count
        _wait(lambda: _alive_workers(self) == self.workers, self.timeout_s,
              f"{self.workers} workers did not register", self.workdir)


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                       timeout_s: float = 120, worker_wrapper: tuple[str, ...] = ()):
    """Start a master and ``workers`` workers on 127.0.0.1; yield once every worker is ALIVE.
    Everything started, including workers added later, is stopped on exit. ``worker_wrapper``:
    a command prefix each worker is started under (another mount namespace, say)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    with ExitStack() as stack:
        cluster = Cluster(f"spark://127.0.0.1:{port}", web_port, workdir, stack, cores, memory,
                          timeout_s, worker_wrapper=worker_wrapper)
        stack.enter_context(_daemon(workdir / "master.log", f"{_DEPLOY}.master.Master",
                                    "--host", "127.0.0.1", "--port", str(port),
                                    "--webui-port", str(web_port)))
        _wait(lambda: _answers(cluster), timeout_s, "the Spark master did not answer", workdir)
        cluster.add_workers(workers)
        yield cluster


@contextmanager
def _daemon(log: Path, main_class: str, *args: str, wrapper: tuple[str, ...] = ()):
    """One JVM (``spark-class`` execs it, and so does ``wrapper`` if given, so the pid we hold
    is the JVM's), stopped on exit."""
    # The master, the worker and the executors it starts (they inherit its environment) are
    # short-lived JVMs (the JVM notes the setting on each one's log, nowhere else).
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_NO_DAEMONIZE="1", JAVA_TOOL_OPTIONS=SHORT_LIVED_JVM)
    with open(log, "w") as out:
        process = subprocess.Popen([*wrapper, str(SPARK_HOME / "bin" / "spark-class"), main_class,
                                    *args],
                                   env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        yield process
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _answers(cluster: Cluster) -> bool:
    try:
        cluster.state()
        return True
    except OSError:
        return False


def _alive_workers(cluster: Cluster) -> int:
    return sum(w["state"] == "ALIVE" for w in cluster.state()["workers"])


def _wait(ready, timeout_s: float, what: str, workdir: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in workdir.glob("*.log"))
            raise TimeoutError(f"{what} within {timeout_s:.0f} s\n{logs}")
        time.sleep(0.5)
