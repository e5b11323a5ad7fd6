"""Delta transaction ids worked out in the background, before the appends that need them.

An idempotent append (``txnAppId``/``txnVersion``) asks the table's snapshot which version the id
reached, and Delta 4.4 answers only by reconstructing the snapshot's whole state: three Spark
jobs, 0.4 to 0.6 s, before every such append, since every commit makes a new snapshot. A run
appends to the same tables batch after batch, so while a batch reads and computes, a background
thread reconstructs the snapshots its appends will commit on; each append is then one job.

Delta caches a reconstructed state on its snapshot and releases it when a newer snapshot of the
table replaces it, which the append does. A snapshot warmed but never appended to (the run ended
first) would keep its state for as long as the JVM caches the table, and a JVM serving many
pipelines would run out of heap; so when the run ends, every snapshot warmed is released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pyspark.sql import SparkSession

from . import sessions

log = logging.getLogger(__name__)

_ACTIVE: ContextVar[TransactionWarmer | None] = ContextVar("lakestream_warmer", default=None)


class TransactionWarmer:
    """Warms the tables appended to idempotently during one run; see the module docstring."""

    def __init__(self, spark: SparkSession):
        self._spark = spark  # its JVM is asked for at the first warm-up once it runs (lazy: see
        # state.lake.sessions); a run that never starts Spark has nothing of Spark's to warm
        self._lock = threading.Lock()  # warm-ups finish in their own threads, maybe after close()
        self._appended: dict[str, None] = {}  # ordered: the order the next batch appends in
        self._warmed: list[Any] = []  # JVM snapshots whose state this warmer built
        self._pending: list[Future] = []
        self._closed = False
        # Two at once, so a batch's sink and checkpoint tables are both ready in time.
        self._slots = threading.BoundedSemaphore(2)

    def note(self, path: str) -> None:
        """``path`` was appended to idempotently: the next batch is likely to append again."""
        with self._lock:
            self._appended[path] = None

    def warm(self) -> None:
        """Start working out, in the background, the transaction ids of every table noted since
        the last call. Call it before work that leaves Spark idle (reading, computing)."""
        with self._lock:
            paths, self._appended = list(self._appended), {}
            if self._closed or not sessions.spark_started(self._spark):
                return
            self._pending = [future for future in self._pending if not future.done()]
            self._pending += [self._start(path) for path in paths]

    def _start(self, path: str) -> Future:
        """Warm ``path`` in a daemon thread: a run's last warm-up is never used, and a process
        that ends after its run (a sensor's, a job's) must not wait for it at exit, as it would
        for a thread pool's worker (seen: 7 to 17 s of a cold JVM's snapshot jobs)."""
        future: Future = Future()

        def work() -> None:
            with self._slots:
                if not future.set_running_or_notify_cancel():
                    return  # the run ended first
                try:
                    self._warm_one(path)
                except BaseException as exc:  # reaches wait(), as a pool's future would
                    future.set_exception(exc)
                else:
                    future.set_result(None)

        threading.Thread(target=work, name="lakestream-warm", daemon=True).start()
        return future

    def wait(self) -> None:
        """Block until the warm-ups under way have finished."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.result()

    def _warm_one(self, path: str) -> None:
        jvm = getattr(self._spark, "_jvm", None)
        if jvm is None:  # a Spark Connect session: no JVM of ours to warm
            return
        try:
            none = jvm.scala.Option.apply(None)
            delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
                self._spark._jsparkSession, path)
            snapshot = delta_log.update(False, none, none)
            snapshot.setTransactions()
        except Exception as exc:  # best effort: the append will do the work itself
            log.debug("warming the snapshot of %s failed: %s", path, exc)
            return
        with self._lock:
            if not self._closed:
                self._warmed.append(snapshot)
                return
        _release(snapshot)  # finished after the run ended

    def close(self) -> None:
        """Release every state warmed; warm-ups still running release theirs when they end.
        Nothing waits for them: a run's last warm-up is never used."""
        with self._lock:
            self._closed = True
            warmed, self._warmed = self._warmed, []
            for future in self._pending:
                future.cancel()
        for snapshot in warmed:
            _release(snapshot)


def _release(snapshot: Any) -> None:
    try:
        snapshot.uncache()  # a no-op for a snapshot an append already replaced
    except Exception as exc:  # the session stopped: nothing is cached any more
        log.debug("releasing a warmed snapshot failed: %s", exc)


@contextmanager
def warming(spark: SparkSession) -> Iterator[TransactionWarmer]:
    """A warmer that notes this context's idempotent appends, closed when the context ends."""
    warmer = TransactionWarmer(spark)
    token = _ACTIVE.set(warmer)
    try:
        yield warmer
    finally:
        _ACTIVE.reset(token)
        warmer.close()


def note_append(path: str) -> None:
    """Tell the active warmer, if any, that ``path`` was appended to idempotently."""
    warmer = _ACTIVE.get()
    if warmer is not None:
        warmer.note(path)
