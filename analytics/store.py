"""Where the query manager keeps what must survive a restart: subscriptions and published deltas,
in two Delta tables under ``<warehouse>/_analytics``.

Writes go through a :class:`BackgroundWriter`, off the path from a changelog commit to the
clients: pushes go out first, and the writer appends what queued up since its last commit in one
commit per table. A crash loses at most what was queued; the manager's position in each target
(the ``subscription = ""`` rows) is written with the deltas it covers, so a restarted manager
computes the lost batches again from the changelog rather than skipping them.

Stored deltas are read back (a client resuming after a restart) from the table's files, pruned
by the bounds each file's log entry records; through Spark only when the files cannot be read.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from state import delta_io, resolve_warehouse
from state.lake import tables

from .delta_files import DeltaFiles, Unreadable
from .registry import Subscription, canonical

log = logging.getLogger(__name__)

SUBSCRIPTIONS_SCHEMA = StructType([
    StructField("id", StringType(), False), StructField("analytic", StringType(), False),
    StructField("params", StringType(), False), StructField("target", StringType(), False),
    StructField("user", StringType(), False), StructField("active", BooleanType(), False),
    StructField("at", DoubleType(), False)])
DELTAS_SCHEMA = StructType([
    StructField("target", StringType(), False), StructField("batch_id", LongType(), False),
    StructField("subscription", StringType(), False), StructField("rows", StringType(), False)])
#: The ``subscription`` of the row that records a target's position: every batch up to it has
#: its deltas stored.
POSITION = ""
#: What a subscription's first stored row holds: nothing, at the batch its first snapshot
#: reflects (so a restarted manager computes nothing for it up to there).
START_ROWS = "[]"


@dataclass(frozen=True)
class Stored:
    """What a manager starting up finds: the active subscriptions, each target's position, and
    the last batch stored for each subscription."""

    subscriptions: list[Subscription]
    positions: dict[str, int]
    last_stored: dict[str, int]


class AnalyticsStore:
    """The two tables, their reads at start-up and for resumes, and the writer that fills them."""

    def __init__(self, spark: SparkSession, warehouse: str | None):
        self.root = root = f"{resolve_warehouse(warehouse)}/_analytics"
        self.subscriptions_path, self.deltas_path = f"{root}/subscriptions", f"{root}/deltas"
        self._spark = spark
        tables.ensure(spark, self.subscriptions_path, SUBSCRIPTIONS_SCHEMA)
        tables.ensure(spark, self.deltas_path, DELTAS_SCHEMA)
        self.writer = BackgroundWriter(spark, {self.subscriptions_path: SUBSCRIPTIONS_SCHEMA,
                                               self.deltas_path: DELTAS_SCHEMA})

    # -- start-up (Spark: once) -------------------------------------------------------------
    def load(self) -> Stored:
        order = Window.partitionBy("id").orderBy(F.col("at").desc())
        rows = (tables.read(self._spark, self.subscriptions_path)
                .withColumn("_rank", F.row_number().over(order)).where("_rank = 1 AND active")
                .collect())
        subscriptions = [Subscription(r["id"], r["analytic"], json.loads(r["params"]), r["target"],
                                      r["user"]) for r in rows]
        deltas = tables.read(self._spark, self.deltas_path)
        last = {r["subscription"]: int(r["batch"]) for r in
                deltas.where(F.col("subscription") != POSITION).groupBy("subscription")
                .agg(F.max("batch_id").alias("batch")).collect()}
        return Stored(subscriptions, self._positions(deltas), last)

    @staticmethod
    def _positions(deltas: DataFrame) -> dict[str, int]:
        """Each target's newest position row (by when it was written: a reset of the target
        moves its position back)."""
        at = F.get_json_object("rows", "$.at").cast("double")
        newest = Window.partitionBy("target").orderBy(at.desc_nulls_last(), F.col("batch_id").desc())
        rows = (deltas.where(F.col("subscription") == POSITION)
                .withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").collect())
        return {r["target"]: int(r["batch_id"]) for r in rows}

    # -- writes (queued) --------------------------------------------------------------------
    def record(self, sub: Subscription, active: bool) -> None:
        """Queue the subscription's new state (the newest record of an id wins at start-up)."""
        self.writer.put(self.subscriptions_path, (sub.id, sub.analytic, canonical(sub.params),
                                                  sub.target, sub.user, active, time.time()))

    def started(self, sub: Subscription, batch: int) -> None:
        """Queue the row that marks where ``sub``'s deltas start (its first snapshot's batch)."""
        self.writer.put(self.deltas_path, (sub.target, batch, sub.id, START_ROWS))

    def deltas(self, target: str, batch: int, by_subscription: Mapping[str, list[dict]]) -> None:
        """Queue the deltas pushed for ``batch`` (a period's last batch, for timer pushes)."""
        for subscription, rows in by_subscription.items():
            self.writer.put(self.deltas_path, (target, batch, subscription,
                                               json.dumps(rows, default=str)))

    def position(self, target: str, batch: int) -> None:
        """Queue ``target``'s position: the deltas of every batch up to ``batch`` are queued."""
        self.writer.put(self.deltas_path, (target, batch, POSITION, json.dumps({"at": time.time()})))

    # -- resumes ----------------------------------------------------------------------------
    def stored_deltas(self, subscription: str, after: int) -> tuple[int | None, list[tuple[int, list]]]:
        """The batch ``subscription``'s stored deltas start at (``None``: none stored), and its
        non-empty deltas after batch ``after``, in batch order. Flushes the writer first."""
        self.writer.flush()
        try:
            rows = self._rows_from_files(subscription, after)
        except Unreadable:
            rows = [(int(r["batch_id"]), r["rows"]) for r in
                    tables.read(self._spark, self.deltas_path)
                    .where(F.col("subscription") == subscription).collect()]
        start = min((batch for batch, _ in rows), default=None)
        found = sorted((batch, json.loads(text)) for batch, text in rows if batch > after)
        return start, [(batch, delta) for batch, delta in found if delta]

    def _rows_from_files(self, subscription: str, after: int) -> list[tuple[int, str]]:
        """(batch, rows) of ``subscription``'s stored rows: all with batch > ``after`` and, to
        tell where they start, at least its oldest one (read from files whose bounds allow)."""
        frame = DeltaFiles(self.deltas_path).rows_where("subscription", subscription)
        if frame.empty:
            return []
        mine = frame[frame["subscription"] == subscription]
        return list(zip(mine["batch_id"].astype(int), mine["rows"]))


class BackgroundWriter:
    """Appends queued rows to Delta tables from one thread: everything queued for a table since
    its last commit goes in one commit, tables in the order they were first queued. A failed
    commit is retried (after a second) with the same rows.

    The writer waits ``linger_seconds`` after the first row of a commit arrives before it
    writes (at once when :meth:`flush` or :meth:`close` asks): the rows come while the pushes
    they record go out to the clients, and a commit then would compete with them for the
    process. Bursts of batches also go in fewer commits."""

    def __init__(self, spark: SparkSession, schemas: Mapping[str, StructType],
                 linger_seconds: float = 0.2):
        self._spark = spark
        self._schemas = dict(schemas)
        self._linger = linger_seconds
        self._hurry = threading.Event()  # a flush or close is waiting: no lingering
        self._queue: queue.Queue[tuple[str, tuple] | None] = queue.Queue()
        self._idle = threading.Condition()
        self._queued = self._written = 0
        self._thread = threading.Thread(target=self._run, name="analytics-writer", daemon=True)
        self._thread.start()

    def put(self, path: str, row: tuple) -> None:
        with self._idle:
            self._queued += 1
        self._queue.put((path, row))

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until everything queued so far is written; whether it was within ``timeout``."""
        with self._idle:
            target = self._queued
            self._hurry.set()
            return self._idle.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Write what is queued, then stop the thread."""
        self._hurry.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        stop = False
        while not stop:
            items = [self._queue.get()]
            if items[0] is not None:
                self._hurry.wait(self._linger)
            self._hurry.clear()
            while not self._queue.empty():  # what queued up while lingering or the last commit ran
                items.append(self._queue.get_nowait())
            stop = None in items
            rows = [item for item in items if item is not None]
            self._write(rows)
            with self._idle:
                self._written += len(rows)
                self._idle.notify_all()

    def _write(self, items: list[tuple[str, tuple]]) -> None:
        by_path: dict[str, list[tuple]] = {}
        for path, row in items:
            by_path.setdefault(path, []).append(row)
        for path, rows in by_path.items():
            for attempt in range(3):
                try:
                    self._append(path, rows)
                    break
                except Exception:  # Spark or the file system failed; the rows stay queued here
                    log.exception("analytics: writing %d row(s) to %s failed (attempt %d)",
                                  len(rows), path, attempt + 1)
                    time.sleep(1)

    def _append(self, path: str, rows: list[tuple]) -> None:
        """One commit of ``rows`` to ``path``: through delta-rs, which takes a few milliseconds
        of this process (a Spark job would take the server's JVM and cores for a good part of a
        second per batch, beside the pushes it follows); through Spark when delta-rs leaves it
        (a store it does not serve)."""
        schema = self._schemas[path]
        frame = pd.DataFrame.from_records(rows, columns=schema.fieldNames())
        if delta_io.append(frame, path) is None:
            tables.append(self._spark.createDataFrame(rows, schema), path, again_soon=False)
