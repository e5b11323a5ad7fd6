"""The query manager: shared subscriptions, snapshots and per-batch deltas, kept in Delta.

Clients subscribe to an analytic over a target pipeline's state table. Identical requests
(same analytic, canonical parameters, target and user) share one subscription and one delta
computation per batch; each client holds its own handle. ``publish_new`` turns every new
micro-batch of the target's changelog into each active subscription's delta rows, stores them
in ``_analytics/deltas`` (one commit per batch, idempotent by batch id) and returns them for
broadcast. A subscriber's snapshot is the table as of the last batch published, so the deltas
it receives next (batch ids above that) follow it with no gap and no duplicate.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from ops import (
    BATCH_COLUMN,
    OLD_COLUMN,
    ROW_COLUMN,
    Catalog,
    Pipeline,
    SqlError,
    TableQuery,
    TableSink,
    compile_query,
)
from state import resolve_warehouse, tables

from .registry import Analytic, AnalyticsError, Registry, Subscription, canonical, default_registry

SUBSCRIPTIONS_SCHEMA = StructType([
    StructField("id", StringType(), False), StructField("analytic", StringType(), False),
    StructField("params", StringType(), False), StructField("target", StringType(), False),
    StructField("user", StringType(), False), StructField("active", BooleanType(), False),
    StructField("at", DoubleType(), False)])
DELTAS_SCHEMA = StructType([
    StructField("target", StringType(), False), StructField("batch_id", LongType(), False),
    StructField("subscription", StringType(), False), StructField("rows", StringType(), False)])
_POSITION = ""  # the row that marks a batch as published for its target, even with no deltas
#: Analytics made from push queries are named this, then the query's compiled SQL: identical
#: queries (whatever their spacing or case) share one subscription, and a restarted manager
#: rebuilds the analytic from its name.
SQL_ANALYTIC = "sql:"


@dataclass(frozen=True)
class Handle:
    """What a client gets back: its own id, the shared subscription, and the snapshot tagged
    with the batch it reflects."""

    client: str
    subscription: Subscription
    batch_id: int
    rows: list[dict]


class QueryManager:
    """Subscriptions over ``targets`` (name -> (pipeline, state table name)), to the analytics
    in ``registry`` (default: the module-level ``analytics.register`` ones)."""

    def __init__(self, spark: SparkSession, targets: Mapping[str, tuple[Pipeline, str]],
                 warehouse: str | None = None, registry: Registry | None = None):
        self.registry = registry if registry is not None else default_registry
        self._spark = spark
        self._warehouse = warehouse
        self._targets = dict(targets)
        root = f"{resolve_warehouse(warehouse)}/_analytics"
        self._subs_path, self._deltas_path = f"{root}/subscriptions", f"{root}/deltas"
        tables.ensure(spark, self._subs_path, SUBSCRIPTIONS_SCHEMA)
        tables.ensure(spark, self._deltas_path, DELTAS_SCHEMA)
        self._lock = threading.RLock()
        self._subscriptions: dict[tuple, Subscription] = {s.key: s for s in self._load_active()}
        self._clients: dict[str, Subscription] = {}
        self._published = self._load_positions()
        self.computations: Counter = Counter()  # (target, batch) -> delta computations run

    # -- clients ----------------------------------------------------------------------------
    def subscribe(self, analytic: str, params: Any, target: str, user: str) -> Handle:
        """A handle on the (possibly shared) subscription, with its snapshot."""
        chosen = self._analytic(analytic)
        checked = chosen.validate(params)
        if target not in self._targets:
            raise AnalyticsError(f"no target pipeline {target!r}; known: {sorted(self._targets)}")
        with self._lock:
            key = (analytic, canonical(checked), target, user)
            sub = self._subscriptions.get(key)
            if sub is None:
                sub = Subscription(uuid.uuid4().hex, analytic, checked, target, user)
                if chosen.subscribe:
                    chosen.subscribe(sub)
                self._record(sub, active=True)
                self._subscriptions[key] = sub
            client = uuid.uuid4().hex
            self._clients[client] = sub
            return Handle(client, sub, *self._snapshot_of(sub))

    def subscribe_query(self, statement: str, user: str, catalog: Catalog | None = None) -> Handle:
        """A push query, ``SELECT … FROM <state table> [WHERE …] EMIT CHANGES``, served as a
        subscription: the rows that match now, then each batch's matching changes (and the
        keys it deleted). The table is one ``sp.sql`` created (``catalog``: where it was
        registered, by default ``sp.sql``'s); it becomes a target if it is not one yet."""
        try:
            query = compile_query(statement, catalog)
        except SqlError as exc:
            raise AnalyticsError(str(exc)) from None
        if not query.push:
            raise AnalyticsError("a push query ends with EMIT CHANGES; for the rows as they are "
                                 "now, run it as a pull query (sp.query)")
        with self._lock:
            read = query.table
            assert read is not None  # a compiled query names its table
            target = next((name for name, (pipeline, table) in self._targets.items()
                           if pipeline.name == read.pipeline.name and table == read.table), None)
            if target is None:
                target = read.table
                self._targets[target] = (read.pipeline, read.table)
                self._start_at_latest(target)
        return self.subscribe(SQL_ANALYTIC + query.sql, {}, target, user)

    def _start_at_latest(self, target: str) -> None:
        """A target added while the manager runs starts at its latest batch (recorded, so a
        restart does not publish its past batches to subscribers whose snapshot holds them)."""
        changelog, _ = self._changelog(target)
        row = None if changelog is None else changelog.agg(F.max(BATCH_COLUMN)).first()
        latest = None if row is None else row[0]
        if latest is not None and latest > self._published.get(target, 0):
            self._publish_batch(target, int(latest), pd.DataFrame(), {})

    def _analytic(self, name: str) -> Analytic:
        """The registered analytic ``name``; a push query's is made from its name on first use
        (also after a restart, for the subscriptions stored)."""
        if name.startswith(SQL_ANALYTIC) and name not in self.registry.registered():
            sql = name[len(SQL_ANALYTIC):]

            def query(sub: Subscription) -> TableQuery:
                return TableQuery(sql, self.table_keys(sub.target), push=True)
            return self.registry.register(
                name, params={}, snapshot=lambda sub, table: query(sub).apply(table),
                delta=lambda sub, changes: query(sub).pushed(changes))
        return self.registry.get(name)

    def unsubscribe(self, client: str, user: str) -> bool:
        """Release ``client``'s handle; the last one removes the subscription. Returns whether
        the subscription went away. A user can only release their own handles."""
        with self._lock:
            sub = self._clients.get(client)
            if sub is None or sub.user != user:
                raise AnalyticsError(f"no subscription handle {client!r} for this user")
            del self._clients[client]
            if any(other is sub for other in self._clients.values()):
                return False
            del self._subscriptions[sub.key]
            self._record(sub, active=False)
            unsubscribe = self._analytic(sub.analytic).unsubscribe
            if unsubscribe:
                unsubscribe(sub)
            return True

    def subscriptions(self, user: str) -> list[Subscription]:
        with self._lock:
            return [s for s in self._subscriptions.values() if s.user == user]

    def handles(self, user: str) -> list[tuple[str, Subscription]]:
        """``user``'s client handles and the subscription each holds."""
        with self._lock:
            return [(c, s) for c, s in self._clients.items() if s.user == user]

    def snapshot(self, client: str) -> tuple[int, list[dict]]:
        """The current view of ``client``'s subscription and the batch it reflects."""
        with self._lock:
            sub = self._clients.get(client)
            if sub is None:
                raise AnalyticsError(f"no subscription handle {client!r}")
            return self._snapshot_of(sub)

    def _snapshot_of(self, sub: Subscription) -> tuple[int, list[dict]]:
        """The subscription's rows as of the last batch published for its target, and that
        batch: the deltas a client receives next start right after it."""
        batch = self._published.get(sub.target, 0)
        rows = self._analytic(sub.analytic).snapshot(sub, self._table_as_of(sub.target, batch))
        return batch, _records(rows)

    def table_keys(self, target: str) -> tuple[str, ...]:
        """The key columns of ``target``'s state table (how a client merges deltas)."""
        return self._changelog_sink(target).keys

    def published(self, target: str) -> int:
        """The last batch of ``target`` whose deltas were published (0 before any)."""
        with self._lock:
            return self._published.get(target, 0)

    def clients_of(self, subscription_id: str) -> list[str]:
        with self._lock:
            return [c for c, s in self._clients.items() if s.id == subscription_id]

    def deltas_since(self, subscription_id: str, batch_id: int) -> list[tuple[int, list[dict]]]:
        """Stored deltas of a subscription after ``batch_id``: how a client resumes."""
        rows = (tables.read(self._spark, self._deltas_path)
                .where((F.col("subscription") == subscription_id) & (F.col("batch_id") > batch_id))
                .orderBy("batch_id").collect())
        return [(row["batch_id"], json.loads(row["rows"])) for row in rows]

    # -- batches ----------------------------------------------------------------------------
    def publish_new(self) -> dict[str, list[tuple[int, list[dict]]]]:
        """Compute and store the deltas of every batch the targets ran since the last call;
        returns them per subscription id, in batch order."""
        out: dict[str, list[tuple[int, list[dict]]]] = {}
        with self._lock:
            for target in self._targets:
                after = self._published.get(target, 0)
                for batch_id, changes in self._batches_after(target, after):
                    self._publish_batch(target, batch_id, changes, out)
        return out

    def _publish_batch(self, target: str, batch_id: int, changes: pd.DataFrame, out: dict) -> None:
        rows = [(target, batch_id, _POSITION, "[]")]
        for sub in [s for s in self._subscriptions.values() if s.target == target]:
            delta = _records(self._analytic(sub.analytic).delta(sub, changes))
            self.computations[(target, batch_id)] += 1
            if delta:
                rows.append((target, batch_id, sub.id, json.dumps(delta, default=str)))
                out.setdefault(sub.id, []).append((batch_id, delta))
        frame = self._spark.createDataFrame(rows, DELTAS_SCHEMA)
        tables.append(frame, self._deltas_path, txn=(f"analytics/{target}", batch_id))
        self._published[target] = batch_id

    # -- reading the target -----------------------------------------------------------------
    def _changelog_sink(self, target: str) -> TableSink:
        pipeline, table = self._targets[target]
        sink = pipeline.sink(table)
        if not isinstance(sink, TableSink):
            raise AnalyticsError(f"target {target!r}: {table!r} is not a state table")
        return sink

    def _changelog(self, target: str) -> tuple[DataFrame | None, TableSink]:
        pipeline, _ = self._targets[target]
        sink = self._changelog_sink(target)
        path = sink.changelog(pipeline.layout(self._warehouse))
        return (tables.read(self._spark, path) if tables.exists(self._spark, path) else None), sink

    def _batches_after(self, target: str, after: int) -> list[tuple[int, pd.DataFrame]]:
        changelog, _ = self._changelog(target)
        if changelog is None:
            return []
        rows: pd.DataFrame = (changelog.where(F.col(BATCH_COLUMN) > after)
                              .orderBy(BATCH_COLUMN, ROW_COLUMN).toPandas())
        return [(int(b), group.drop(columns=[OLD_COLUMN, ROW_COLUMN]).reset_index(drop=True))
                for b, group in rows.groupby(BATCH_COLUMN, sort=True)]

    def _table_as_of(self, target: str, batch_id: int) -> pd.DataFrame:
        """The state table as it stood after ``batch_id``: latest change per key, deletes out."""
        changelog, sink = self._changelog(target)
        if changelog is None:
            return pd.DataFrame()
        return sink.latest(changelog.where(F.col(BATCH_COLUMN) <= batch_id)).toPandas()

    # -- persistence ------------------------------------------------------------------------
    def _record(self, sub: Subscription, active: bool) -> None:
        row = [(sub.id, sub.analytic, canonical(sub.params), sub.target, sub.user, active, time.time())]
        tables.append(self._spark.createDataFrame(row, SUBSCRIPTIONS_SCHEMA), self._subs_path)

    def _load_active(self) -> list[Subscription]:
        order = Window.partitionBy("id").orderBy(F.col("at").desc())
        rows = (tables.read(self._spark, self._subs_path)
                .withColumn("_rank", F.row_number().over(order)).where("_rank = 1 AND active")
                .collect())
        return [Subscription(r["id"], r["analytic"], json.loads(r["params"]), r["target"], r["user"])
                for r in rows]

    def _load_positions(self) -> dict[str, int]:
        rows = (tables.read(self._spark, self._deltas_path).groupBy("target")
                .agg(F.max("batch_id").alias("batch")).collect())
        return {r["target"]: int(r["batch"]) for r in rows}


def _records(rows: Any) -> list[dict]:
    if rows is None:
        return []
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    return json.loads(frame.to_json(orient="records", date_format="iso")) if len(frame) else []
