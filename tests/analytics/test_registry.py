"""Registries are independent: one analytic name can mean different things in two registries,
the module-level functions keep to the default one, and a manager (and its server) look
analytics up only in the registry it was built with."""

import asyncio
import json

import pandas as pd
import pytest
from starlette.requests import Request

import analytics
from analytics import AnalyticsError, QueryManager, QueryServer, Registry
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic

NAME = "registry_test_rows"  # used by no other test, so the default registry never holds it


def answering(tag):
    """A snapshot/delta function whose one row says which registration answered."""
    return lambda subscription, rows: pd.DataFrame([{"answered_by": tag}])


def test_two_registries_hold_the_same_name_independently():
    before = analytics.registered()
    first, second = Registry(), Registry()
    mine = first.register(NAME, params={}, snapshot=answering("first"), delta=answering("first"))
    theirs = second.register(NAME, params={"n": "long"}, snapshot=answering("second"),
                             delta=answering("second"))
    first.register("only_in_first", params={}, snapshot=answering("first"), delta=answering("first"))

    assert first.get(NAME) is mine and second.get(NAME) is theirs
    assert first.get(NAME).snapshot(None, pd.DataFrame())["answered_by"].tolist() == ["first"]
    assert second.get(NAME).snapshot(None, pd.DataFrame())["answered_by"].tolist() == ["second"]
    assert sorted(first.registered()) == ["only_in_first", NAME] and list(second.registered()) == [NAME]
    with pytest.raises(AnalyticsError, match=rf"no analytic 'only_in_first'; registered: \['{NAME}'\]"):
        second.get("only_in_first")

    assert analytics.registered() == before  # the default registry saw none of it
    with pytest.raises(AnalyticsError, match=f"no analytic '{NAME}'"):
        analytics.get(NAME)


def test_a_registry_validates_like_the_module_functions():
    with pytest.raises(AnalyticsError, match=r"analytic 'bad': unknown parameter type\(s\) \{'n': 'int'\}"):
        Registry().register("bad", params={"n": "int"}, snapshot=answering("x"), delta=answering("x"))
    registry = Registry()
    registry.register(NAME, params={"n": "long"}, snapshot=answering("x"), delta=answering("x"))
    with pytest.raises(AnalyticsError, match="parameter 'n' must be a long"):
        registry.get(NAME).validate({"n": "1"})


def _one_sym(subscription, rows):
    return rows[rows["sym"] == subscription.params["sym"]] if len(rows) else rows


def _analytics_listed(server):
    """``GET /analytics`` of ``server``, called directly (no HTTP needed for one route)."""
    request = Request({"type": "http", "method": "GET", "path": "/analytics", "query_string": b"",
                       "headers": [(b"authorization", b"Bearer t-ann")]})
    return json.loads(asyncio.run(server.list_analytics(request)).body)


def test_a_manager_and_its_server_use_the_managers_registry(spark, warehouse):
    register_cpu_analytic()  # the default registry's cpu_by_server takes a list: {"syms": [...]}
    own = Registry()  # ... this one's takes one server: {"sym": "..."}
    own.register("cpu_by_server", params={"sym": "string"}, snapshot=_one_sym, delta=_one_sym)
    pipeline = cpu_pipeline()
    manager = QueryManager(spark, {TARGET: (pipeline, TABLE)}, warehouse, registry=own)
    assert manager.registry is own
    assert QueryManager(spark, {TARGET: (pipeline, TABLE)}, warehouse).registry \
        is analytics.default_registry

    pipeline.publish(spark, [{"sym": "s1", "cpu": 1.0}, {"sym": "s2", "cpu": 2.0}], warehouse)
    pipeline.run_once(spark, warehouse)
    manager.publish_new()
    handle = manager.subscribe("cpu_by_server", {"sym": "s2"}, TARGET, "ann")
    assert [(r["sym"], r["cpu"]) for r in handle.rows] == [("s2", 2.0)]
    with pytest.raises(AnalyticsError, match=r"unknown parameter\(s\) \['syms'\]"):
        manager.subscribe("cpu_by_server", {"syms": ["s1"]}, TARGET, "ann")

    pipeline.publish(spark, [{"sym": "s1", "cpu": 3.0}, {"sym": "s2", "cpu": 4.0}], warehouse)
    pipeline.run_once(spark, warehouse)
    out = manager.publish_new()
    assert [(b, [r["cpu"] for r in rows]) for b, rows in out[handle.subscription.id]] == [(2, [4.0])]

    server = QueryServer(manager, {"t-ann": "ann"})
    assert _analytics_listed(server) == {"cpu_by_server": {"sym": "string"}}
