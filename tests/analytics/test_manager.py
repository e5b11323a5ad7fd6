"""The query manager: shared subscriptions, snapshot + delta continuity, cleanup, isolation,
restarts, bad parameters — over a real pipeline's state table in Delta."""

import pytest

from analytics import AnalyticsError, QueryManager, Registry
from analytics.demo import _in_syms, cpu_pipeline, register_cpu_analytic

CPU = Registry()  # this module's own: the default registry is the whole process's (docs examples too)
register_cpu_analytic(CPU)


def cpu_manager(spark, pipeline, warehouse):
    """A manager of the ``servers`` target over ``pipeline``'s ``cpu_now`` table."""
    return QueryManager(spark, {"servers": (pipeline, "cpu_now")}, warehouse, registry=CPU)


def merged(snapshot, deltas):
    """What a client's live table shows: the snapshot, then each delta applied by key."""
    view = {row["sym"]: row["cpu"] for row in snapshot}
    for _, rows in deltas:
        for row in rows:
            if row["_change"] == "delete":
                view.pop(row["sym"], None)
            else:
                view[row["sym"]] = row["cpu"]
    return view


def step(spark, warehouse, pipeline, manager, rows):
    pipeline.publish(spark, rows, warehouse)
    pipeline.run_once(spark, warehouse)
    return manager.publish_new()


def test_shared_subscriptions_late_joiner_and_cleanup(spark, warehouse):
    pipeline = cpu_pipeline()
    manager = cpu_manager(spark, pipeline, warehouse)
    step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 10.0}, {"sym": "s2", "cpu": 20.0}])

    first = [manager.subscribe("cpu_by_server", {"syms": ["s1", "s2"]}, "servers", "ann")
             for _ in range(3)]
    other = manager.subscribe("cpu_by_server", {"syms": ["s3"]}, "servers", "ann")
    assert len({h.subscription.id for h in first}) == 1 and len(manager.subscriptions("ann")) == 2
    assert merged(first[0].rows, []) == {"s1": 10.0, "s2": 20.0} and first[0].batch_id == 1

    out = step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 11.0}, {"sym": "s3", "cpu": 5.0}])
    assert manager.computations[("servers", 2)] == 2  # two distinct subscriptions, not four clients
    shared = first[0].subscription.id
    assert [(b, [r["sym"] for r in rows]) for b, rows in out[shared]] == [(2, ["s1"])]

    late = manager.subscribe("cpu_by_server", {"syms": ["s1", "s2"]}, "servers", "ann")
    assert late.batch_id == 2 and late.subscription.id == shared
    later = step(spark, warehouse, pipeline, manager,
                 [{"sym": "s2", "cpu": None}, {"sym": "s1", "cpu": 12.0}])
    truth = {"s1": 12.0}  # s2 was deleted (a tombstone)
    assert merged(first[0].rows, out[shared] + later[shared]) == truth
    assert merged(late.rows, later[shared]) == truth  # no gap, no duplicate at the join point

    for handle in first:
        assert manager.unsubscribe(handle.client, "ann") is False  # the late joiner still holds it
    assert manager.unsubscribe(late.client, "ann") is True
    assert [s.id for s in manager.subscriptions("ann")] == [other.subscription.id]


def test_users_are_isolated_and_params_validated(spark, warehouse):
    pipeline = cpu_pipeline()
    manager = cpu_manager(spark, pipeline, warehouse)
    ann = manager.subscribe("cpu_by_server", {"syms": ["s1"]}, "servers", "ann")
    bob = manager.subscribe("cpu_by_server", {"syms": ["s1"]}, "servers", "bob")
    assert ann.subscription.id != bob.subscription.id  # same request, different users
    assert [s.user for s in manager.subscriptions("bob")] == ["bob"]
    with pytest.raises(AnalyticsError, match="no subscription handle"):
        manager.unsubscribe(ann.client, "bob")
    with pytest.raises(AnalyticsError, match="parameter 'syms' must be a list of string"):
        manager.subscribe("cpu_by_server", {"syms": "s1; DROP TABLE x"}, "servers", "ann")
    with pytest.raises(AnalyticsError, match=r"unknown parameter\(s\) \['limit'\]"):
        manager.subscribe("cpu_by_server", {"syms": [], "limit": 3}, "servers", "ann")
    with pytest.raises(AnalyticsError, match="no analytic 'nope'"):
        manager.subscribe("nope", {}, "servers", "ann")


def test_subscriptions_and_deltas_survive_a_restart(spark, warehouse):
    pipeline = cpu_pipeline()
    manager = cpu_manager(spark, pipeline, warehouse)
    handle = manager.subscribe("cpu_by_server", {"syms": ["s1"]}, "servers", "ann")
    step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 1.0}])
    manager.close()  # a clean shutdown: what was published is stored

    restarted = cpu_manager(spark, pipeline, warehouse)
    assert [s.id for s in restarted.subscriptions("ann")] == [handle.subscription.id]
    pipeline.publish(spark, [{"sym": "s1", "cpu": 2.0}], warehouse)  # ran while the server was down
    pipeline.run_once(spark, warehouse)
    out = restarted.publish_new()
    assert [(b, rows[0]["cpu"]) for b, rows in out[handle.subscription.id]] == [(2, 2.0)]
    resumed = restarted.deltas_since(handle.subscription.id, 0)  # a client resuming from batch 0
    assert [(b, rows[0]["cpu"]) for b, rows in resumed] == [(1, 1.0), (2, 2.0)]


def test_an_analytic_selecting_by_column_works_before_the_first_batch(spark, warehouse):
    """The guide's analytic indexes the table by its key column; before any batch the table has no
    rows but has that column (it had no columns at all, and the lambda raised KeyError)."""
    registry = Registry()
    registry.register("by_sym", params={"syms": "list[string]"},
                      snapshot=lambda sub, table: table[table["sym"].isin(sub.params["syms"])],
                      delta=lambda sub, changes: changes[changes["sym"].isin(sub.params["syms"])])
    pipeline = cpu_pipeline()
    manager = QueryManager(spark, {"servers": (pipeline, "cpu_now")}, warehouse, registry=registry)
    handle = manager.subscribe("by_sym", {"syms": ["s1"]}, "servers", "ann")
    assert (handle.batch_id, handle.rows) == (0, [])
    out = step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 3.0}, {"sym": "s2", "cpu": 4.0}])
    assert merged(handle.rows, out[handle.subscription.id]) == {"s1": 3.0}


def test_a_push_query_is_a_shared_subscription_that_survives_a_restart(spark, warehouse):
    import ops as sp
    from analytics import Registry

    catalog = sp.Catalog()
    catalog.register("readings", sp.read.from_callback(
        "readings", schema={"SYM": "string", "CPU": "double"}))
    table = sp.sql("CREATE TABLE peaks AS SELECT sym, MAX(cpu) AS peak FROM readings GROUP BY sym",
                   catalog=catalog)
    manager = QueryManager(spark, {}, warehouse, registry=Registry())
    step(spark, warehouse, table, manager, [{"SYM": "a", "CPU": 50.0}, {"SYM": "b", "CPU": 10.0}])

    query = "SELECT sym, peak FROM peaks WHERE peak > 20 EMIT CHANGES"
    first = manager.subscribe_query(query, "ann", catalog)
    again = manager.subscribe_query("select SYM, PEAK\n from PEAKS where PEAK > 20 emit changes;",
                                    "ann", catalog)
    assert first.subscription.id == again.subscription.id  # the same query, spelt differently
    assert first.rows == [{"SYM": "a", "peak": 50.0}] and first.batch_id == 1

    out = step(spark, warehouse, table, manager, [{"SYM": "b", "CPU": 30.0}, {"SYM": "c", "CPU": 5.0}])
    assert out[first.subscription.id] == [(2, [{"SYM": "b", "peak": 30.0, "_change": "upsert"}])]
    manager.close()

    restarted = QueryManager(spark, {"peaks": (table, "peaks")}, warehouse, registry=Registry())
    later = step(spark, warehouse, table, restarted, [{"SYM": "c", "CPU": 99.0}])
    assert later[first.subscription.id] == [(3, [{"SYM": "c", "peak": 99.0, "_change": "upsert"}])]
    restarted.close()
    with pytest.raises(AnalyticsError, match="a push query ends with EMIT CHANGES"):
        manager.subscribe_query("SELECT sym FROM peaks", "ann", catalog)
    with pytest.raises(AnalyticsError, match="unknown column cpu in peaks"):
        manager.subscribe_query("SELECT cpu FROM peaks EMIT CHANGES", "ann", catalog)


class Clock:
    """A manager's clock that the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_timer_analytic_pushes_once_per_period_what_changed_in_it(spark, warehouse):
    registry = Registry()
    registry.register("cpu_every_10s", params={"syms": "list[string]"}, snapshot=_in_syms,
                      delta=_in_syms, every="10s")
    registry.register("cpu_now", params={"syms": "list[string]"}, snapshot=_in_syms, delta=_in_syms)
    clock = Clock()
    pipeline = cpu_pipeline()
    manager = QueryManager(spark, {"servers": (pipeline, "cpu_now")}, warehouse, registry=registry,
                           clock=clock)
    step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 1.0}, {"sym": "s2", "cpu": 2.0}])
    syms = {"syms": ["s1", "s2", "s3"]}
    timed = manager.subscribe("cpu_every_10s", syms, "servers", "ann").subscription.id
    every_batch = manager.subscribe("cpu_now", syms, "servers", "ann").subscription.id

    clock.now = 1  # period 1 (ends at 10): s1 twice, s2 deleted, s3 inserted then deleted
    first = step(spark, warehouse, pipeline, manager, [{"sym": "s1", "cpu": 5.0}, {"sym": "s3", "cpu": 3.0}])
    clock.now = 2
    second = step(spark, warehouse, pipeline, manager,
                  [{"sym": "s1", "cpu": 6.0}, {"sym": "s2", "cpu": None}, {"sym": "s3", "cpu": None}])
    assert timed not in first and timed not in second  # nothing before the period ends
    assert [b for b, _ in first[every_batch] + second[every_batch]] == [2, 3]  # per batch

    clock.now = 10
    out = manager.publish_new()
    pushed = [(b, sorted((r["sym"], r["cpu"], r["_change"]) for r in rows)) for b, rows in out[timed]]
    assert pushed == [(3, [("s1", 6.0, "update"), ("s2", None, "delete")])]  # one merged push
    assert manager.computations[("servers", 3)] == 2  # the per-batch one and the period's

    clock.now = 20  # a period without change: nothing
    assert timed not in manager.publish_new()
    clock.now = 25
    step(spark, warehouse, pipeline, manager, [{"sym": "s2", "cpu": 7.0}])
    clock.now = 30
    assert [(b, [r["sym"] for r in rows]) for b, rows in manager.publish_new()[timed]] == [(4, ["s2"])]
    manager.flush()
    assert [b for b, _ in manager.deltas_since(timed, 0)] == [3, 4]  # stored for resumes
    manager.close()


def test_every_is_validated():
    for bad in ("1 sec", "0s", -1, "fast", True):
        with pytest.raises(AnalyticsError, match=r"analytic 'x': every=.* is not a period"):
            Registry().register("x", params={}, snapshot=_in_syms, delta=_in_syms, every=bad)
    assert Registry().register("x", params={}, snapshot=_in_syms, delta=_in_syms,
                               every="250ms").every == 0.25
