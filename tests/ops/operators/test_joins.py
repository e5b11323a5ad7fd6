"""Stream–table join: each event gets the table's value for its key, as of the batch's plan."""

import json

import pandas as pd
import pytest

import ops as sp
from state.lake import tables


def test_events_are_enriched_from_a_state_table_pinned_per_plan(spark, warehouse):
    sales = sp.read.from_callback("sales", schema={"title": "string", "price": "double"})
    tickets = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
                     streams={"sales": sales})
    table_path = tickets.layout(warehouse).table("sold")

    views = (sp.read.from_callback("views", schema={"title": "string", "user": "string"})
             .join_table(table_path, on="title", columns=("n",))
             .write.to_delta("enriched")).named("views_enriched")

    views.publish(spark, [{"title": "Heat", "user": "u0"}], warehouse)
    with pytest.raises(sp.OperatorError, match="does not exist yet"):
        views.run_once(spark, warehouse)       # nothing to join yet: the stream waits for it
    tickets.publish(spark, [{"title": "Up", "price": 5}], warehouse)
    tickets.run_once(spark, warehouse)
    views.run_once(spark, warehouse)           # u0: no Heat row yet -> kept with n null (left)

    tickets.publish(spark, [{"title": "Heat", "price": 9}, {"title": "Heat", "price": 9}], warehouse)
    tickets.run_once(spark, warehouse)
    views.publish(spark, [{"title": "Heat", "user": "u1"}, {"title": "Alien", "user": "u2"},
                          {"title": "Up", "user": "u3"}], warehouse)
    views.run_once(spark, warehouse)

    tickets.publish(spark, [{"title": "Heat", "price": 9}], warehouse)
    tickets.run_once(spark, warehouse)
    views.publish(spark, [{"title": "Heat", "user": "u4"}], warehouse)
    views.run_once(spark, warehouse)

    rows = views.read_sink(spark, "enriched", warehouse)
    assert [(r.user, None if pd.isna(r.n) else int(r.n)) for r in rows.itertuples()] == [
        ("u0", None), ("u1", 2), ("u2", None), ("u3", 1), ("u4", 3)]
    plans = tables.read(spark, views.layout(warehouse).batches).orderBy("batch_id").collect()
    pinned = [json.loads(p["ranges"])["table:join"][1] for p in plans]
    assert pinned[0] < pinned[1] < pinned[2]  # each plan records the table version it read


def test_inner_join_drops_events_without_a_match(spark, warehouse, tmp_path):
    path = str(tmp_path / "dim")
    spark.createDataFrame([("a", "Alpha")], "code string, label string").write.format("delta").save(path)
    stream = (sp.read.from_callback("events", schema={"code": "string"})
              .join_table(path, on="code", how="inner").write.to_delta("out")).named("inner_join")
    stream.publish(spark, [{"code": "a"}, {"code": "z"}], warehouse)
    stream.run_once(spark, warehouse)
    assert stream.read_sink(spark, "out", warehouse)[["code", "label"]].values.tolist() == [["a", "Alpha"]]


def test_table_table_join_follows_both_sides(spark, warehouse):
    users = sp.read.from_callback("users", schema={"user": "string", "name": "string"})
    spend = sp.read.from_callback("orders", schema={"user": "string", "total": "double"})
    joined = (users.merge(spend)
              .join_tables(on="user", left=("orders", ("total",)), right=("users", ("name",)))
              .write.to_table("spend_by_name")).named("spend_join")
    joined.publish(spark, [{"user": "u1", "total": 10.0}, {"user": "u2", "total": 5.0}],
                   warehouse, source="orders")
    joined.publish(spark, [{"user": "u1", "name": "Ann"}], warehouse, source="users")
    joined.run_once(spark, warehouse)
    assert joined.read_sink(spark, "spend_by_name", warehouse)[["user", "total", "name"]] \
        .values.tolist() == [["u1", 10.0, "Ann"]]  # u2 has no user row yet: inner join hides it

    joined.publish(spark, [{"user": "u2", "name": "Bo"}, {"user": "u1", "name": None}],
                   warehouse, source="users")              # u1's user row deleted (tombstone)
    joined.run_once(spark, warehouse)
    assert joined.read_sink(spark, "spend_by_name", warehouse)[["user", "total", "name"]] \
        .values.tolist() == [["u2", 5.0, "Bo"]]


def test_the_python_api_of_the_joins_that_keep_both_sides():
    """join_kept_table and join_within as a Python user writes them (SQL compiles to these):
    over a merged stream, with the batch fed to the operators and state in memory."""
    from tests.ops.sql.test_ksql_semantics import Run

    def feed(stream, *rows):
        return Run(stream.write.to_delta("out")).feed(*rows)

    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    views = sp.read.from_callback("views", schema={"uid": "string", "ad": "string", "ts": "timestamp"})
    clicks = sp.read.from_callback("clicks", schema={"uid": "string", "to": "string", "ts": "timestamp"})
    accounts = sp.read.from_callback("accounts", schema={"uid": "string", "owner": "string"})
    kept = views.merge(accounts).join_kept_table("uid", ("accounts", ("owner",)), how="inner")
    out = feed(kept, {"_source": "views", "uid": "u1", "ad": "x", "ts": t0},
               {"_source": "accounts", "uid": "u1", "owner": "Ann"},
               {"_source": "views", "uid": "u2", "ad": "y", "ts": t0})
    assert out[["uid", "ad", "owner"]].values.tolist() == [["u1", "x", "Ann"]]
    within = views.merge(clicks).join_within(
        "uid", sp.JoinSide("views", (("ad", "ad"), ("ts", "ts")), "ts"),
        sp.JoinSide("clicks", (("to", "to"), ("ts", "clicked")), "ts"), before="0s", after="1min")
    out = feed(within, {"_source": "views", "uid": "u1", "ad": "x", "ts": t0},
               {"_source": "clicks", "uid": "u1", "to": "/a", "ts": t0 + pd.Timedelta("30s")},
               {"_source": "clicks", "uid": "u1", "to": "/b", "ts": t0 + pd.Timedelta("2min")})
    assert out[["uid", "ad", "to"]].values.tolist() == [["u1", "x", "/a"]]
    assert out["clicked"].tolist() == [t0 + pd.Timedelta("30s")] and out["ts"].tolist() == [t0]
    with pytest.raises(sp.PipelineDefinitionError, match="'soon' is not a duration"):
        views.merge(clicks).join_within("uid", within.operators[0].left, within.operators[0].right,
                                        before="soon", after="1s")
