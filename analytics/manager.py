"""The query manager: shared subscriptions, snapshots and deltas, without Spark on the hot path.

Clients subscribe to an analytic over a target pipeline's state table. Identical requests
(same analytic, canonical parameters, target and user) share one subscription and one delta
computation per batch (per period, for timer analytics); each client holds its own handle.

Each target's state table is held in memory (:class:`~analytics.live.LiveTable`): loaded from
its changelog's files once, then followed commit by commit. ``publish_new`` applies the
commits made since the last call and returns each subscription's pushes; a subscriber's snapshot
is the analytic's filter over the table in memory as of the last batch published, so the pushes
it receives next (batch ids above that) follow it with no gap and no duplicate.

Pushes are stored in ``_analytics/deltas`` by a background writer, after they are returned for
broadcast: that is how a client resumes after a disconnect or a server restart
(:meth:`QueryManager.resume`). A push's id is its batch (for a timer push, the period's last
batch), increasing per subscription.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from ops import Catalog, Pipeline, SqlError, TableQuery, compile_query
from state import delta_io

from .errors import AnalyticsError
from .live import LiveTable
from .periods import PeriodBuffer, Periods, last_batch, merge_changes
from .registry import Analytic, Registry, Subscription, canonical, default_registry
from .sharing import SharedSubscriptions
from .store import AnalyticsStore
from .targets import Targets

log = logging.getLogger(__name__)
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


@dataclass(frozen=True)
class Resume:
    """What a client that last saw batch ``after`` is sent: the pushes it missed (``deltas``,
    in batch order), or, when those are no longer available, a fresh ``snapshot`` at
    ``batch_id``."""

    deltas: list[tuple[int, list[dict]]] | None = None
    snapshot: tuple[int, list[dict]] | None = None


class QueryManager:
    """Subscriptions over ``targets`` (name -> (pipeline, state table name)), to the analytics
    in ``registry`` (default: the module-level ``analytics.register`` ones). ``clock``: seconds,
    for timer analytics' periods (injectable for tests)."""

    def __init__(self, spark: SparkSession, targets: Mapping[str, tuple[Pipeline, str]],
                 warehouse: str | None = None, registry: Registry | None = None, *,
                 clock: Callable[[], float] = time.monotonic):
        self.registry = registry if registry is not None else default_registry
        self._spark, self._warehouse, self._clock = spark, warehouse, clock
        self._targets = Targets(targets)
        self._lock = threading.RLock()
        self._store = AnalyticsStore(spark, warehouse)
        stored = self._store.load()
        self._shared = SharedSubscriptions(stored.subscriptions)
        self._positions = dict(stored.positions)  # what the store holds, per target
        self._published: dict[str, int] = {}
        self._live: dict[str, LiveTable] = {}
        self._periods = Periods(clock)
        self.computations: Counter = Counter()  # (target, batch) -> delta computations run
        for target in self._targets.names():
            self._open(target, stored.positions.get(target, 0))
        for sub in self._shared.all():  # those still live after opening their targets
            self._shared.start(sub, max(self._published.get(sub.target, 0),
                                        stored.last_stored.get(sub.id, 0)))

    def _open(self, target: str, after: int | None) -> None:
        """Load ``target``'s table: as of batch ``after`` (later batches are published next),
        or as it is now (``None``)."""
        live = LiveTable(self._targets.changelog(target, self._warehouse), self.table_keys(target),
                         self._spark, after=after)
        self._live[target] = live
        self._published[target] = live.batch
        if after is not None and live.batch < after:  # the changelog went back while we were down
            self._end_target(target, f"target {target!r} was reset to batch {live.batch}")

    # -- clients ----------------------------------------------------------------------------
    def subscribe(self, analytic: str, params: Any, target: str, user: str) -> Handle:
        """A handle on the (possibly shared) subscription, with its snapshot."""
        chosen = self._analytic(analytic)
        checked = chosen.validate(params)
        self._targets.check(target)
        with self._lock:
            sub = self._shared.find((analytic, canonical(checked), target, user))
            if sub is None:
                sub = self._new_subscription(chosen, checked, target, user)
            return Handle(self._shared.attach(sub), sub, *self._snapshot_of(sub))

    def _new_subscription(self, chosen: Analytic, params: dict, target: str,
                          user: str) -> Subscription:
        sub = Subscription(uuid.uuid4().hex, chosen.name, params, target, user)
        if chosen.subscribe:
            chosen.subscribe(sub)
        batch = self._published[target]
        self._store.record(sub, active=True)
        self._store.started(sub, batch)
        self._shared.start(sub, batch)
        if chosen.every is not None:
            self._periods.open(target, chosen.every)
        return sub

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
            target = self._targets.reading(read.pipeline, read.table)
            if target is None:
                target = read.table
                self._targets.add(target, read.pipeline, read.table)
                self._open(target, None)  # starts at its latest batch: snapshots hold the past
                self._store.position(target, self._published[target])
        return self.subscribe(SQL_ANALYTIC + query.sql, {}, target, user)

    def _analytic(self, name: str) -> Analytic:
        """The registered analytic ``name``; a push query's is made from its name on first use
        (also after a restart, for the subscriptions stored)."""
        if isinstance(name, str) and name.startswith(SQL_ANALYTIC) \
                and name not in self.registry.registered():
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
            sub = self._shared.release(client, user)
            if sub is None:
                return False
            self._remove(sub)
            return True

    def _remove(self, sub: Subscription) -> None:
        self._shared.remove(sub)
        self._store.record(sub, active=False)
        unsubscribe = self._analytic(sub.analytic).unsubscribe
        if unsubscribe:
            unsubscribe(sub)

    def subscriptions(self, user: str) -> list[Subscription]:
        with self._lock:
            return self._shared.of_user(user)

    def handles(self, user: str) -> list[tuple[str, Subscription]]:
        """``user``'s client handles and the subscription each holds."""
        with self._lock:
            return self._shared.handles(user)

    def handle(self, client: str) -> Subscription | None:
        """The subscription ``client`` holds (``None``: no such handle)."""
        with self._lock:
            return self._shared.holder(client)

    def snapshot(self, client: str) -> tuple[int, list[dict]]:
        """The current view of ``client``'s subscription and the batch it reflects."""
        with self._lock:
            sub = self._shared.held(client)
            return self._snapshot_of(sub)

    def _snapshot_of(self, sub: Subscription) -> tuple[int, list[dict]]:
        """The subscription's rows as of the last batch published for its target, and that
        batch: the pushes a client receives next start right after it."""
        table = self._live[sub.target].frame()
        return self._published[sub.target], _records(self._analytic(sub.analytic).snapshot(sub, table))

    @property
    def on_object_store(self) -> bool:
        """Whether the warehouse is on an object store (where a poll is a request)."""
        return delta_io.on_object_store(self._store.root)

    def table_keys(self, target: str) -> tuple[str, ...]:
        """The key columns of ``target``'s state table (how a client merges deltas)."""
        return self._targets.sink(target).keys

    def published(self, target: str) -> int:
        """The last batch of ``target`` whose deltas were published (0 before any)."""
        with self._lock:
            return self._published.get(target, 0)

    def targets(self) -> list[str]:
        """The names of the state tables this manager serves."""
        return self._targets.names()

    def subscription_count(self) -> int:
        """Live subscriptions (each shared by every identical request's handle)."""
        with self._lock:
            return self._shared.count()

    def clients_of(self, subscription_id: str) -> list[str]:
        with self._lock:
            return self._shared.clients_of(subscription_id)

    def take_ended(self) -> dict[str, str]:
        """Clients whose subscription the manager ended since the last call (their target was
        reset), with the reason: the server tells them and drops them."""
        with self._lock:
            return self._shared.take_ended()

    # -- resuming ---------------------------------------------------------------------------
    def resume(self, client: str, after: int) -> Resume:
        """What ``client`` must be sent after the push with id ``after`` (a batch id): the
        pushes since, exactly once, or a snapshot when they cannot be had (older than the
        subscription, or an id this target never reached)."""
        with self._lock:
            sub = self._shared.held(client)
            recent = self._shared.recent(sub.id)
            if after > self._published[sub.target]:
                return Resume(snapshot=self._snapshot_of(sub))
            if after >= recent.floor:
                return Resume(deltas=recent.after(after))
        start, stored = self._store.stored_deltas(sub.id, after)  # slow: outside the lock
        with self._lock:
            if start is None or after < start:
                return Resume(snapshot=self._snapshot_of(sub))
            found = dict(stored)
            found.update(recent.after(after))
            return Resume(deltas=sorted(found.items(), key=lambda pair: pair[0]))

    def deltas_since(self, subscription_id: str, batch_id: int) -> list[tuple[int, list[dict]]]:
        """Non-empty deltas of a subscription after ``batch_id``, stored or about to be."""
        _, stored = self._store.stored_deltas(subscription_id, batch_id)
        return stored

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until everything published so far is stored; whether it was within ``timeout``."""
        return self._store.writer.flush(timeout)

    def close(self) -> None:
        """Store what is queued and stop the background writer (a clean shutdown)."""
        self._store.writer.close()

    # -- batches ----------------------------------------------------------------------------
    def publish_new(self) -> dict[str, list[tuple[int, list[dict]]]]:
        """Apply every target's changelog commits since the last call and end the periods of
        timer analytics that are due; returns each subscription's pushes, in batch order. Their
        storage is queued (see :meth:`flush`)."""
        out: dict[str, list[tuple[int, list[dict]]]] = {}
        with self._lock:
            now = self._clock()
            for target in self._targets.names():
                self._publish_target(target, now, out)
        return out

    def _publish_target(self, target: str, now: float, out: dict) -> None:
        followed = self._live[target].follow()
        if followed.rewound:
            self._end_target(target, f"target {target!r} was reset (batches discarded); "
                                     "subscribe again")
            self._published[target] = self._live[target].batch
        for batch, changes in followed.batches:
            self._publish_batch(target, batch, changes, out)
        for period in self._periods.of(target):
            if period.tick(now):
                self._publish_period(target, period, out)
        self._store_position(target)

    def _publish_batch(self, target: str, batch: int, changes: pd.DataFrame, out: dict) -> None:
        """Event analytics' deltas of one batch; timer analytics' periods keep its changes."""
        pushed = {}
        for sub in self._shared.of_target(target):
            analytic = self._analytic(sub.analytic)
            if analytic.every is not None or self._shared.floor(sub.id) >= batch:
                continue
            pushed[sub.id] = _records(analytic.delta(sub, changes))
            self.computations[(target, batch)] += 1
        for period in self._periods.of(target):
            period.add(batch, changes)
        self._published[target] = batch
        self._push(target, batch, pushed, out)

    def _publish_period(self, target: str, period: PeriodBuffer, out: dict) -> None:
        """Each timer subscription's push for the period that ended: the merged changes of the
        batches it has not had yet; nothing when there are none."""
        merged: dict[int, pd.DataFrame] = {}  # by floor: subscriptions level with each other share
        keys = self.table_keys(target)
        mine = [s for s in self._shared.of_target(target) if self._analytic(s.analytic).every == period.every]
        for floor in sorted({self._shared.floor(s.id) for s in mine}):
            batches = period.after(floor)
            if not batches:
                continue
            merged[floor] = merge_changes(batches, keys)
            last = last_batch(batches)
            pushed = {}
            for sub in (s for s in mine if self._shared.floor(s.id) == floor):
                pushed[sub.id] = _records(self._analytic(sub.analytic).delta(sub, merged[floor]))
                self.computations[(target, last)] += 1
            self._push(target, last, pushed, out)
        period.drop_through(min((self._shared.floor(s.id) for s in mine), default=self._published[target]))

    def _push(self, target: str, batch: int, pushed: Mapping[str, list[dict]], out: dict) -> None:
        """Record each subscription's push of ``batch`` (empty ones only move it on)."""
        nonempty = {sub: rows for sub, rows in pushed.items() if rows}
        for sub, rows in pushed.items():
            self._shared.pushed(sub, batch, rows)
        for sub, rows in nonempty.items():
            out.setdefault(sub, []).append((batch, rows))
        if nonempty:
            self._store.deltas(target, batch, nonempty)

    def _store_position(self, target: str) -> None:
        """Queue ``target``'s position when it moved: the last batch whose pushes are all
        queued, so before any batch a timer period still holds."""
        held = [p.first() for p in self._periods.of(target) if p.first()]
        position = min([self._published[target], *(first - 1 for first in held if first)])
        if position > self._positions.get(target, -1):
            self._positions[target] = position
            self._store.position(target, position)

    def _end_target(self, target: str, reason: str) -> None:
        """End every subscription of ``target`` (its changelog went back): their clients are
        told ``reason`` and subscribe afresh, so no stored delta of the discarded batches is
        ever resumed."""
        log.warning("%s: ending its %d subscription(s)", reason, len(self._shared.of_target(target)))
        for sub in self._shared.of_target(target):
            self._shared.end(sub, reason)
            self._remove(sub)
        self._periods.close(target)
        self._positions[target] = -1


def _records(rows: Any) -> list[dict]:
    if rows is None:
        return []
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    return json.loads(frame.to_json(orient="records", date_format="iso")) if len(frame) else []

