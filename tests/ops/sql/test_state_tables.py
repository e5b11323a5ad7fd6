"""State tables: ksqlDB-style CREATE TABLE … AS SELECT … GROUP BY, the table in Delta, its
changelog, and rebuilding the table from the changelog."""

import json
import shutil

import pandas as pd
import pytest

import ops as sp
from ops import BatchScope, SqlError
from ops.testing import run_records
from state import PipelineLayout, StateStore
from state.lake import tables

SALES = {"title": "string", "ticket_total_value": "double", "seat": "string"}
MOVIE_SQL = """CREATE TABLE movie_tickets_sold AS
  SELECT title, COUNT(ticket_total_value) AS tickets_sold
  FROM movie_ticket_sales
  GROUP BY title
  EMIT CHANGES;"""


def sales_stream(max_versions=None):
    return sp.read.from_callback("sales", schema=SALES, max_versions=max_versions)


def table_rows(spark, pipeline, warehouse, name):
    path = pipeline.layout(warehouse).table(name)
    return [tuple(r) for r in spark.sql(f"SELECT * FROM delta.`{path}` ORDER BY 1").drop(
        "_batch_id").collect()]


def changelog(spark, pipeline, warehouse, name):
    path = pipeline.layout(warehouse).table(f"{name}_changelog")
    return spark.read.format("delta").load(path).orderBy("_batch_id", "_row").toPandas()


def test_movie_tickets_end_to_end_with_rebuild(spark, warehouse):
    pipeline = sp.sql(MOVIE_SQL, streams={"movie_ticket_sales": sales_stream()})
    pipeline.publish(spark, [{"title": "Aliens", "ticket_total_value": 10},
                             {"title": "Aliens", "ticket_total_value": 12},
                             {"title": "Heat", "ticket_total_value": 9}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "movie_tickets_sold") == [("Aliens", 2), ("Heat", 1)]

    pipeline.publish(spark, [{"title": "Aliens", "ticket_total_value": 11},
                             {"title": "Up", "ticket_total_value": None}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "movie_tickets_sold") == [
        ("Aliens", 3), ("Heat", 1), ("Up", 0)]  # COUNT(column) ignores nulls, as in SQL

    log = changelog(spark, pipeline, warehouse, "movie_tickets_sold")
    assert list(zip(log["title"], log["tickets_sold"], log["_change"])) == [
        ("Aliens", 2, "insert"), ("Heat", 1, "insert"), ("Aliens", 3, "update"), ("Up", 0, "insert")]
    assert json.loads(log["_old"][2]) == {"tickets_sold": 2}

    before = table_rows(spark, pipeline, warehouse, "movie_tickets_sold")
    shutil.rmtree(pipeline.layout(warehouse).table("movie_tickets_sold"))  # the local store is lost
    assert pipeline.rebuild_table(spark, "movie_tickets_sold", warehouse) == 3
    assert table_rows(spark, pipeline, warehouse, "movie_tickets_sold") == before


ALL_AGGREGATES = """CREATE TABLE seat_stats AS
  SELECT title, seat, COUNT(*) AS n, SUM(ticket_total_value) AS total,
         MIN(ticket_total_value) AS low, MAX(ticket_total_value) AS high,
         AVG(ticket_total_value) AS mean, LATEST_BY_OFFSET(ticket_total_value) AS last_price,
         COLLECT_LIST(ticket_total_value) AS prices
  FROM sales WHERE ticket_total_value IS NOT NULL AND ticket_total_value > 1
  GROUP BY title, seat HAVING COUNT(*) >= 2"""
BATCHES = [
    [{"title": "A", "seat": "x", "ticket_total_value": 5},
     {"title": "A", "seat": "x", "ticket_total_value": 3},
     {"title": "B", "seat": "y", "ticket_total_value": 1}],                   # 1 fails WHERE
    [{"title": "B", "seat": "y", "ticket_total_value": 7},
     {"title": None, "seat": "y", "ticket_total_value": 4}],
    [{"title": "B", "seat": "y", "ticket_total_value": 8},
     {"title": "A", "seat": "x", "ticket_total_value": 9}],
]


def test_every_aggregate_where_having_and_batching(spark, warehouse):
    per_batch = sp.sql(ALL_AGGREGATES, streams={"sales": sales_stream(max_versions=1)})
    for rows in BATCHES:
        per_batch.publish(spark, rows, warehouse)
    report = per_batch.run_once(spark, warehouse, max_batches=2)  # stop mid-stream …
    assert len(report.batches) == 2
    assert table_rows(spark, per_batch, warehouse, "seat_stats") == [
        ("A", "x", 2, 8.0, 3.0, 5.0, 4.0, 3.0, [5.0, 3.0])]  # B has one row: HAVING hides it
    per_batch.run_once(spark, warehouse)  # … and resume in a new run (state recovered)

    expected = [("A", "x", 3, 17.0, 3.0, 9.0, 17 / 3, 9.0, [5.0, 3.0, 9.0]),
                ("B", "y", 2, 15.0, 7.0, 8.0, 7.5, 8.0, [7.0, 8.0])]
    assert table_rows(spark, per_batch, warehouse, "seat_stats") == expected

    other = f"{warehouse}_one_batch"
    one_batch = sp.sql(ALL_AGGREGATES, streams={"sales": sales_stream()})
    for rows in BATCHES:
        one_batch.publish(spark, rows, other)
    assert len(one_batch.run_once(spark, other).batches) == 1
    assert table_rows(spark, one_batch, other, "seat_stats") == expected


def test_having_turning_false_deletes_the_key(spark, warehouse):
    pipeline = (sales_stream().group_by("title")
                .agg(total=sp.sum_("ticket_total_value"), having=lambda t: t["total"] < 20)
                .write.to_table("cheap")).named("cheap_titles")
    pipeline.publish(spark, [{"title": "A", "ticket_total_value": 5}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"title": "A", "ticket_total_value": 50}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "cheap") == []
    log = changelog(spark, pipeline, warehouse, "cheap")
    assert list(log["_change"]) == ["insert", "delete"] and log["total"].isna().iloc[1]


def test_user_aggregate_and_state_survives_restart(spark, warehouse):
    def distinct_seats(seen, values):
        return sorted(set(seen) | set(values))

    pipeline = (sales_stream().group_by("title")
                .agg(seats=sp.aggregate("seat", distinct_seats, initial=[]))
                .write.to_table("seats")).named("seats_by_title")
    pipeline.publish(spark, [{"title": "A", "seat": "b"}, {"title": "A", "seat": "a"}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"title": "A", "seat": "c"}, {"title": "A", "seat": "a"}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "seats") == [("A", ["a", "b", "c"])]


@pytest.mark.parametrize("statement, message", [
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title ORDER BY n",
     "unsupported in a table query: 'ORDER BY n'"),
    ("CREATE TABLE t AS SELECT s.title, COUNT(*) AS n FROM sales s JOIN other o ON s.title = o.title "
     "GROUP BY s.title", "no such stream or table other"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title EMIT FINAL",
     "EMIT FINAL needs a WINDOW"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales WINDOW SLIDING (5 MINUTES) "
     "GROUP BY title", "WINDOW must be TUMBLING"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales WINDOW SESSION (5 MINUTES) "
     "GROUP BY title", "WINDOW needs an event-time column"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales WINDOW TUMBLING (SIZE 1 FORTNIGHT) "
     "GROUP BY title", "1 FORTNIGHT is not a duration"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales", "needs GROUP BY"),
    ("CREATE TABLE t AS SELECT title, seat, COUNT(*) AS n FROM sales GROUP BY title",
     "seat must be in GROUP BY"),
    ("CREATE TABLE t AS SELECT title, MEDIAN(seat) AS m FROM sales GROUP BY title",
     "unsupported aggregate MEDIAN"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM nowhere GROUP BY title",
     "FROM: no such stream or table nowhere"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n FROM sales WHERE COUNT(*) > 1 GROUP BY title",
     "aggregates belong in HAVING"),
    ("SELECT title FROM sales", "expected CREATE TABLE"),
])
def test_unsupported_sql_points_at_the_part(statement, message):
    with pytest.raises(SqlError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        sp.sql(statement, streams={"sales": sales_stream()})


def test_values_pandas_cannot_type_are_emitted_as_objects():
    """Lists of unequal lengths (a latest value that is an array) once failed inside pandas."""
    op = sp.GroupAggregate(name="g", keys=("k",), aggs=(("last", sp.latest_by_offset("v")),))
    store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
    out = op.apply(BatchScope("p", 1, ("k",), store),
                   pd.DataFrame({"k": [1, 2, 1], "v": [[1, 2], [3], [4, 5, 6]]}))
    assert out["last"].dtype == object
    assert list(zip(out["k"], out["last"], out["_change"])) == [
        (1, [4, 5, 6], "insert"), (2, [3], "insert")]


KSQL_ORDERS = {"ID": "string", "TITLE": "string", "PRICE": "double", "QTY": "long"}
PRICED = """CREATE TABLE priced AS
  SELECT UCASE(title) AS title_upper, COUNT(*) AS orders, SUM(price * qty) / SUM(qty) AS unit_price
  FROM orders WHERE qty > 0 GROUP BY UCASE(title) HAVING MAX(qty) > 1 EMIT CHANGES;"""
ORDER_BATCHES = [
    [{"ID": "1", "TITLE": "heat", "PRICE": 10.0, "QTY": 1},
     {"ID": "2", "TITLE": "up", "PRICE": 2.0, "QTY": 2}],
    [{"ID": "3", "TITLE": "Heat", "PRICE": 4.0, "QTY": 2},
     {"ID": "4", "TITLE": "up", "PRICE": 1.0, "QTY": 0}],
    [{"ID": "5", "TITLE": "UP", "PRICE": 5.0, "QTY": 2},
     {"ID": "6", "TITLE": "x", "PRICE": None, "QTY": 3}],
]


def test_ksql_table_and_stream_restart_mid_stream_and_pull_query(spark, warehouse):
    catalog = sp.Catalog()
    catalog.register("orders", sp.read.from_callback("orders", schema=KSQL_ORDERS, max_versions=1))
    first = sp.sql(PRICED, catalog=catalog)
    for rows in ORDER_BATCHES:
        first.publish(spark, rows, warehouse)
    assert len(first.run_once(spark, warehouse, max_batches=2).batches) == 2
    # a new process compiles the statement again and resumes from the checkpoint
    sp.sql(PRICED, catalog=catalog).run_once(spark, warehouse)
    rows = [tuple(r) for r in spark.read.format("delta").load(first.table_path("priced", warehouse))
            .orderBy("title_upper").select("title_upper", "orders", "unit_price").collect()]
    # HEAT: (10 + 8) / 3 = 6.0 over 2 orders; UP: (4 + 10) / 4 = 3.5 over 2 orders (qty 0 is
    # filtered); X: price null -> unit price null, but its max qty 3 passes HAVING
    assert rows == [("HEAT", 2, 6.0), ("UP", 2, 3.5), ("X", 1, None)]
    log = changelog(spark, first, warehouse, "priced")
    assert list(zip(log["title_upper"], log["_change"])) == [
        ("UP", "insert"), ("HEAT", "insert"), ("UP", "update"), ("X", "insert")]
    assert json.loads(log["_old"][2]) == {"orders": 1, "unit_price": 2.0}

    pulled = sp.query(spark, "select title_upper, unit_price * 2 as doubled from priced "
                      "where orders >= 2 order by title_upper desc", catalog=catalog,
                      warehouse=warehouse)
    assert list(zip(pulled["title_upper"], pulled["doubled"])) == [("UP", 7.0), ("HEAT", 12.0)]
    with pytest.raises(SqlError, match=r"unknown column nope in priced; its columns: "
                                       r"\['title_upper', 'orders', 'unit_price'\]"):
        sp.query(spark, "SELECT nope FROM priced", catalog=catalog, warehouse=warehouse)

    stream = sp.sql("CREATE STREAM big AS SELECT id, price * qty AS total FROM orders "
                    "WHERE price * qty >= 10", catalog=catalog)
    stream.publish(spark, ORDER_BATCHES[0], warehouse)
    stream.run_once(spark, warehouse)
    out = stream.read_sink(spark, "big", warehouse)
    assert list(zip(out["ID"], out["total"])) == [("1", 10.0)]


def test_a_statement_reads_the_stream_an_earlier_create_stream_writes(spark, warehouse):
    catalog = sp.Catalog()
    catalog.register("sales", sales_stream(), timestamp="at")
    dear = sp.sql("CREATE STREAM dear AS SELECT title, ticket_total_value * 2 AS doubled FROM sales "
                  "WHERE ticket_total_value > 5", catalog=catalog, warehouse=warehouse)
    totals = sp.sql("CREATE TABLE dear_totals AS SELECT title, MAX_BY(doubled, doubled) AS top, "
                    "COUNT(*) AS n FROM dear GROUP BY title", catalog=catalog, warehouse=warehouse)
    dear.publish(spark, [{"title": "A", "ticket_total_value": 9.0},
                         {"title": "A", "ticket_total_value": 2.0},
                         {"title": "B", "ticket_total_value": 6.0}], warehouse)
    dear.run_once(spark, warehouse)
    totals.run_once(spark, warehouse)
    dear.publish(spark, [{"title": "A", "ticket_total_value": 10.0}], warehouse)
    dear.run_once(spark, warehouse)
    totals.run_once(spark, warehouse)
    assert table_rows(spark, totals, warehouse, "dear_totals") == [("A", 20.0, 2), ("B", 12.0, 1)]


def test_a_table_over_another_tables_changelog_retracts_and_resumes(spark, warehouse):
    catalog = sp.Catalog()
    catalog.register("moves", sp.read.from_callback("moves", schema={"user": "string", "region": "string"}))
    where = sp.sql("CREATE TABLE user_region AS SELECT user, LATEST_BY_OFFSET(region) AS region "
                   "FROM moves GROUP BY user", catalog=catalog)
    counts_sql = ("CREATE TABLE region_users AS SELECT region, COUNT(*) AS users FROM user_region "
                  "GROUP BY region")
    counts = sp.sql(counts_sql, catalog=catalog, warehouse=warehouse)

    where.publish(spark, [{"user": "ann", "region": "east"}, {"user": "bob", "region": "east"}], warehouse)
    where.run_once(spark, warehouse)
    counts.run_once(spark, warehouse)
    where.publish(spark, [{"user": "ann", "region": "west"}], warehouse)
    where.run_once(spark, warehouse)
    # a new process: the downstream statement compiled again resumes from its checkpoint
    sp.sql(counts_sql, catalog=catalog, warehouse=warehouse).run_once(spark, warehouse)
    assert table_rows(spark, counts, warehouse, "region_users") == [("east", 1), ("west", 1)]
    log = changelog(spark, counts, warehouse, "region_users")
    assert list(zip(log["region"], log["users"], log["_change"])) == [
        ("east", 2, "insert"), ("east", 1, "update"), ("west", 1, "insert")]


def chained_windows(spark, warehouse, mode, fine_mode="driver"):
    """A 5-second FINAL window over ``hits`` and a 10-second one over its table (grace 0): the
    fine pipeline, and a function that publishes hits at the seconds given, runs both, and
    returns the coarse table's (window start in seconds, n), sorted."""
    catalog = sp.Catalog()
    catalog.register("hits", sp.read.from_callback("hits", schema={"page": "string", "ts": "timestamp"}),
                     timestamp="ts")
    fine = sp.sql("CREATE TABLE hits_5s AS SELECT page, COUNT(*) AS n FROM hits "
                  "WINDOW TUMBLING (SIZE 5 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY page EMIT FINAL",
                  catalog=catalog).with_mode(fine_mode)
    coarse = sp.sql("CREATE TABLE hits_10s AS SELECT page, SUM(n) AS n FROM hits_5s "
                    "WINDOW TUMBLING (SIZE 10 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY page EMIT FINAL",
                    catalog=catalog, warehouse=warehouse).with_mode(mode)
    base = pd.Timestamp("2026-01-01", tz="UTC")

    def hits(*seconds):
        fine.publish(spark, [{"page": "p", "ts": (base + pd.Timedelta(seconds=s)).isoformat()}
                             for s in seconds], warehouse)
        fine.run_once(spark, warehouse)
        coarse.run_once(spark, warehouse)
        return sorted((int((pd.Timestamp(r.window_start, tz="UTC") - base).total_seconds()), r.n)
                      for r in coarse.read_sink(spark, "hits_10s", warehouse).itertuples())
    return fine, hits


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_a_windowed_table_feeds_a_coarser_window(spark, warehouse, mode):
    """The coarse window closes in the batch where the fine one closes its last part (Spark's
    chained windows in append mode): a FINAL tumbling window's end is stream time reached."""
    _, hits = chained_windows(spark, warehouse, mode)
    assert hits(1, 2, 6) == []                 # [0,5) closed upstream; [0,10) is open
    assert hits(11) == [(0, 3)]                # [5,10) closed upstream: its end closes [0,10) at once
    assert hits(16) == [(0, 3)]                # [10,15) closed upstream; [10,20) is open


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_chained_windows_close_in_the_batch_the_upstream_stream_time_passes_them(spark, warehouse,
                                                                                mode):
    """Spark closes both chained windows in the batch whose stream time passes the outer end
    (its no-data batch runs the chain again once the watermark moved). Here the coarse window
    learns the fine table's stream time from its changelog (the earliest window start it may
    still emit), not only from the ends of the windows it closed: 00:00:12 closes [0, 5) and,
    at once, [0, 10), though no fine window ends at 10 (the coarse one waited a batch)."""
    fine, hits = chained_windows(spark, warehouse, mode, fine_mode=mode)
    assert hits(1, 12) == [(0, 1)]
    assert hits(21) == [(0, 1), (10, 1)]  # [10, 15) closes upstream at 21: [10, 20) too
    assert "_watermark" not in fine.read_sink(spark, "hits_5s", warehouse).columns  # changelog only


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_avg_and_collect_list_over_a_tables_changelog_with_nulls_in_a_long_column(spark, warehouse,
                                                                                  mode):
    """The changelog read from Delta gives a long column with a null in the batch as doubles;
    the table still groups by the long (a group 1.0 beside 1 took the update's retraction, and
    its row, AVG 0.0 over a count of 0 and a list without 10 taken back, replaced group 1's)."""
    catalog = sp.Catalog()
    catalog.register("events", sp.read.from_callback(
        "events", schema={"id": "string", "g": "long", "v": "long"}))
    latest = sp.sql("CREATE TABLE latest AS SELECT id, LATEST_BY_OFFSET(g, false) AS g, "
                    "LATEST_BY_OFFSET(v, false) AS v FROM events GROUP BY id", catalog=catalog)
    groups = sp.sql("CREATE TABLE by_g AS SELECT g, AVG(v) AS a, COLLECT_LIST(v) AS l, COUNT(*) AS n "
                    "FROM latest GROUP BY g", catalog=catalog, warehouse=warehouse).with_mode(mode)
    for rows in ([{"id": "u1", "g": 1, "v": 10}, {"id": "u2", "g": 1, "v": 20}],
                 [{"id": "u1", "g": 1, "v": 30}, {"id": "u3", "g": None, "v": None}],
                 [{"id": "u2", "g": 2, "v": 20}]):
        latest.publish(spark, rows, warehouse)
        latest.run_once(spark, warehouse)
        groups.run_once(spark, warehouse)
    table = groups.read_sink(spark, "by_g", warehouse).sort_values("g")
    assert [(g, a, list(values), n)
            for g, a, values, n in zip(table["g"], table["a"], table["l"], table["n"])] == [
        (1, 30.0, [30], 1), (2, 20.0, [20], 1)]
    log = changelog(spark, groups, warehouse, "by_g")
    assert list(zip(log["_batch_id"], log["g"], log["n"], log["_change"])) == [
        (1, 1, 2, "insert"), (2, 1, 2, "update"), (3, 1, 1, "update"), (3, 2, 1, "insert")]


def test_sql_joins_stream_table_and_table_table(spark, warehouse):
    catalog = sp.Catalog()
    catalog.register("user_updates", sp.read.from_callback(
        "user_updates", schema={"id": "string", "name": "string"}))
    catalog.register("orders", sp.read.from_callback(
        "orders", schema={"order_id": "string", "user_id": "string", "amount": "long"}))
    names = sp.sql("CREATE TABLE user_names AS SELECT id, LATEST_BY_OFFSET(name) AS name "
                   "FROM user_updates GROUP BY id", catalog=catalog)
    totals = sp.sql("CREATE TABLE user_totals AS SELECT user_id AS id, SUM(amount) AS total "
                    "FROM orders GROUP BY user_id", catalog=catalog)
    names.publish(spark, [{"id": "u1", "name": "Ann"}, {"id": "u2", "name": "Bob"}], warehouse)
    names.run_once(spark, warehouse)  # a table must exist before a stream joins it, as in ksqlDB

    enriched = sp.sql("CREATE STREAM enriched AS SELECT o.order_id, u.name, o.amount FROM orders o "
                      "LEFT JOIN user_names u ON o.user_id = u.id", catalog=catalog, warehouse=warehouse)
    spend = sp.sql("CREATE TABLE spend AS SELECT u.name, SUM(o.amount) AS spent FROM orders o "
                   "JOIN user_names u ON o.user_id = u.id GROUP BY u.name",
                   catalog=catalog, warehouse=warehouse)
    both = sp.sql("CREATE TABLE user_spend AS SELECT id, name, total FROM user_names "
                  "FULL OUTER JOIN user_totals ON user_names.id = user_totals.id",
                  catalog=catalog, warehouse=warehouse)
    orders = [{"order_id": "o1", "user_id": "u1", "amount": 10},
              {"order_id": "o2", "user_id": "u2", "amount": 5},
              {"order_id": "o3", "user_id": "u3", "amount": 7}]
    for pipeline in (enriched, spend, totals):
        pipeline.publish(spark, orders, warehouse)
        pipeline.run_once(spark, warehouse)
    both.run_once(spark, warehouse)
    out = enriched.read_sink(spark, "enriched", warehouse)
    assert [tuple(None if pd.isna(v) else v for v in row)
            for row in out[["order_id", "name", "amount"]].itertuples(index=False)] == [
        ("o1", "Ann", 10), ("o2", "Bob", 5), ("o3", None, 7)]
    assert table_rows(spark, spend, warehouse, "spend") == [("Ann", 10), ("Bob", 5)]
    assert table_rows(spark, both, warehouse, "user_spend") == [
        ("u1", "Ann", 10), ("u2", "Bob", 5), ("u3", None, 7)]

    names.publish(spark, [{"id": "u3", "name": "Cid"}], warehouse)
    names.run_once(spark, warehouse)
    both.run_once(spark, warehouse)
    assert table_rows(spark, both, warehouse, "user_spend")[-1] == ("u3", "Cid", 7)

    with pytest.raises(SqlError, match="a stream–stream join needs a time bound"):
        sp.sql("CREATE STREAM s AS SELECT * FROM orders a JOIN user_updates b ON a.user_id = b.id",
               catalog=catalog)
    with pytest.raises(SqlError, match=r"ON the table's key \['id'\], not name"):
        sp.sql("CREATE STREAM s AS SELECT o.order_id FROM orders o JOIN user_names u "
               "ON o.user_id = u.name", catalog=catalog)


def test_joins_on_a_declared_table_end_to_end_across_runs(spark, warehouse):
    """ksqlDB's most common join, a stream enriched from a TABLE declared on a stream of
    updates, and that table joined to a table a statement made (whose column is null in every
    row of its first batch: it was created as VOID and the next batch failed). On executors:
    the crash tests below."""
    catalog = sp.Catalog()
    catalog.register("users", sp.read.from_callback(
        "users", schema={"id": "string", "name": "string"}), primary_key="id")
    catalog.register("orders", sp.read.from_callback(
        "orders", schema={"order_id": "string", "user_id": "string", "amount": "long",
                          "coupon": "string"}))
    enriched = sp.sql("CREATE STREAM named_orders AS SELECT o.order_id, u.name, o.amount "
                      "FROM orders o LEFT JOIN users u ON o.user_id = u.id",
                      catalog=catalog)
    coupons = sp.sql("CREATE TABLE coupons AS SELECT user_id AS id, LATEST_BY_OFFSET(coupon, FALSE) "
                     "AS coupon FROM orders GROUP BY user_id", catalog=catalog)
    both = sp.sql("CREATE TABLE user_coupons AS SELECT id, name, coupon FROM users "
                  "JOIN coupons ON users.id = coupons.id", catalog=catalog,
                  warehouse=warehouse)

    def run(users, orders):
        for pipeline in (enriched, both):
            pipeline.publish(spark, users, warehouse, source="users")
        for pipeline in (enriched, coupons):
            pipeline.publish(spark, orders, warehouse, source="orders")
        for pipeline in (enriched, coupons, both):
            pipeline.run_once(spark, warehouse)
        named = enriched.read_sink(spark, "named_orders", warehouse).sort_values(["_batch_id", "_row"])
        return ([tuple(None if pd.isna(v) else v for v in row)
                 for row in named[["order_id", "name", "amount"]].itertuples(index=False)],
                table_rows(spark, both, warehouse, "user_coupons"))

    named, joined = run([{"id": "u1", "name": "Ann"}],
                        [{"order_id": "o1", "user_id": "u1", "amount": 3, "coupon": None},
                         {"order_id": "o2", "user_id": "u2", "amount": 4, "coupon": None}])
    assert named == [("o1", "Ann", 3), ("o2", None, 4)]
    assert joined == [("u1", "Ann", None)]
    named, joined = run([{"id": "u2", "name": "Bob"}, {"id": "u1", "name": "Ann B"}],
                        [{"order_id": "o3", "user_id": "u2", "amount": 5, "coupon": "X"}])
    assert named[2:] == [("o3", "Bob", 5)]  # the table kept from the first run's updates
    assert joined == [("u1", "Ann B", None), ("u2", "Bob", "X")]
    schema = spark.read.format("delta").load(both.layout(warehouse).table("user_coupons")).schema
    assert schema["coupon"].dataType.simpleString() == "string"


@pytest.mark.parametrize("step, store", [
    pytest.param("table_changelog_written", None, id="table_changelog_written"),
    pytest.param("before_checkpoint_commit", None, id="before_checkpoint_commit"),
    pytest.param("table_changelog_written", "s3_warehouse", id="table_changelog_written-s3",
                 marks=pytest.mark.slow),
])
def test_a_table_over_a_table_with_per_record_changes_is_exactly_once_across_a_crash(
        spark, request, step, store):
    """The retracting aggregation and the per-record changelog (several changes of one key in
    a batch, the table taking the last) written once though the second batch crashed between
    the changelog's append and the table's upsert, or after both, before its checkpoint (where
    a duplicate would come from; the protocol's other steps are crash-tested for every
    pipeline shape in tests/ops/runtime/recovery/test_crash_recovery.py). The first step also
    with the warehouse on the session's S3 server."""
    catalog = sp.Catalog()
    catalog.register("users", sp.read.from_callback(
        "users", schema={"id": "string", "region": "string"}, max_versions=1), primary_key="id")
    pipeline = sp.sql("CREATE TABLE region_users AS SELECT region, COUNT(*) AS users FROM users "
                      "GROUP BY region", catalog=catalog, emit_changes="per_record")
    result = run_records(pipeline, [{"id": "ann", "region": "east"}, {"id": "bob", "region": "east"}],
                         [{"id": "ann", "region": "west"}], [{"id": "bob", "region": None}],
                         spark=spark, crash_at_step=step, crash=2,
                         warehouse=request.getfixturevalue(store) if store else None)
    assert result.reports[-1].batches[0].batch_id == 2  # the recovery replayed the crashed batch
    table = result.outputs["region_users"]
    assert list(zip(table["region"], table["users"])) == [("east", 0), ("west", 1)]
    log = changelog(spark, pipeline, result.warehouse, "region_users")
    assert list(zip(log["_batch_id"], log["region"], log["users"], log["_change"])) == [
        (1, "east", 1, "insert"), (1, "east", 2, "update"),
        (2, "east", 1, "update"), (2, "west", 1, "insert"), (3, "east", 0, "update")]


JOIN_BATCHES = [{"users": [{"id": "u1", "name": "Ann"}], "orders": [{"order_id": "o1", "user_id": "u1"}]},
                {"users": [{"id": "u1", "name": None}, {"id": "u2", "name": "Bob"}],
                 "orders": [{"order_id": "o2", "user_id": "u1"}, {"order_id": "o3", "user_id": "u2"}]},
                {"users": [{"id": "u1", "name": "Cy"}], "orders": [{"order_id": "o4", "user_id": "u1"}]}]


def _kept_join(mode):
    catalog = sp.Catalog()
    for name, schema in (("users", {"id": "string", "name": "string"}),
                         ("orders", {"order_id": "string", "user_id": "string"})):
        catalog.register(name, sp.read.from_callback(name, schema=schema, max_versions=1),
                         primary_key="id" if name == "users" else None)
    return sp.sql("CREATE STREAM named AS SELECT o.order_id, u.name FROM orders o "
                  "LEFT JOIN users u ON o.user_id = u.id", catalog=catalog).with_mode(mode)


@pytest.mark.parametrize("mode, step", [("driver", "after_sink_write"),
                                        ("distributed", "before_checkpoint_commit")])
def test_a_stream_joined_to_a_declared_table_is_exactly_once_across_a_crash(spark, mode, step):
    """The table kept in the join's state and both sources' positions come back from the last
    checkpoint: the crashed second batch is replayed once, as the crash-free run has it."""
    result = run_records(_kept_join(mode), *JOIN_BATCHES, spark=spark, crash_at_step=step, crash=2)
    assert result.reports[-1].batches[0].batch_id == 2
    named = result.outputs["named"].sort_values(["_batch_id", "_row"])
    assert [(o, None if pd.isna(n) else n) for o, n in zip(named["order_id"], named["name"])] == [
        ("o1", "Ann"), ("o2", None), ("o3", "Bob"), ("o4", "Cy")]
    assert sorted(result.state["join_users"]["key"]) == ["u1", "u2"]


def _t(second):
    return (pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=second)).isoformat()


WITHIN_BATCHES = [
    {"clicks": [{"uid": "u1", "page": "a", "ts": _t(0)}, {"uid": "u2", "page": "b", "ts": _t(1)}],
     "views": [{"uid": "u1", "ad": "x", "ts": _t(4)}]},
    {"clicks": [{"uid": "u1", "page": "c", "ts": _t(30)}], "views": [{"uid": "u3", "ad": "y", "ts": _t(30)}]},
    {"clicks": [{"uid": "u3", "page": "d", "ts": _t(35)}], "views": [{"uid": "u1", "ad": "z", "ts": _t(38)}]}]


def _within_join(mode):
    catalog = sp.Catalog()
    for name, column in (("clicks", "page"), ("views", "ad")):
        catalog.register(name, sp.read.from_callback(
            name, schema={"uid": "string", column: "string", "ts": "timestamp"}, max_versions=1),
            timestamp="ts")
    return sp.sql("CREATE STREAM clicked AS SELECT c.uid, c.page, v.ad FROM clicks c LEFT JOIN "
                  "views v WITHIN 10 SECONDS GRACE PERIOD 0 SECONDS ON c.uid = v.uid",
                  catalog=catalog).with_mode(mode)


@pytest.mark.parametrize("mode, step", [("driver", "before_checkpoint_commit"),
                                        ("distributed", "after_sink_write")])
def test_a_stream_stream_join_is_exactly_once_across_a_crash(spark, mode, step):
    """The records each side keeps, the stream time and the matched flags come back from the
    last checkpoint: batch 2 (which emits u2's unmatched click) is replayed once, and batch 3
    still meets the records batches 1 and 2 left."""
    result = run_records(_within_join(mode), *WITHIN_BATCHES, spark=spark, crash_at_step=step,
                         crash=2)
    assert result.reports[-1].batches[0].batch_id == 2
    out = result.outputs["clicked"].sort_values(["_batch_id", "_row"])
    assert [(b, u, p, None if pd.isna(a) else a)
            for b, u, p, a in zip(out["_batch_id"], out["uid"], out["page"], out["ad"])] == [
        (1, "u1", "a", "x"), (2, "u2", "b", None), (3, "u3", "d", "y"), (3, "u1", "c", "z")]


def test_a_sql_table_over_a_table_runs_the_same_on_executors(spark, warehouse):
    """The SQL engine's parts, on executors: the projection of the table's change rows, the
    map, the retracting aggregation (keyed by region) and the SELECT list. One table written
    by the driver (delta-rs's merge), then by executors (Spark's MERGE), then by the driver
    again: each continues from what the other left."""
    catalog = sp.Catalog()
    catalog.register("users", sp.read.from_callback(
        "users", schema={"id": "string", "region": "string", "score": "long"}), primary_key="id")
    pipeline = sp.sql("CREATE TABLE region_stats AS SELECT UCASE(region) AS region, COUNT(*) AS "
                      "users, SUM(score) * 2 AS doubled FROM users GROUP BY UCASE(region) "
                      "HAVING COUNT(*) > 0", catalog=catalog)
    pipeline.publish(spark, [{"id": "ann", "region": "east", "score": 1},
                             {"id": "bob", "region": "East", "score": 2},
                             {"id": "cid", "region": "west", "score": 4}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"id": "ann", "region": "west", "score": 8},
                             {"id": "cid", "region": None, "score": None}], warehouse)
    pipeline.with_mode("distributed").run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "region_stats") == [("EAST", 1, 4), ("WEST", 1, 16)]
    pipeline.publish(spark, [{"id": "bob", "region": "north", "score": 3}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "region_stats") == [("NORTH", 1, 6), ("WEST", 1, 16)]
    log = changelog(spark, pipeline, warehouse, "region_stats")
    users = [None if pd.isna(n) else n for n in log["users"]]  # a deleted key's values are null
    assert list(zip(log["_batch_id"], log["region"], users, log["_change"])) == [
        (1, "EAST", 2, "insert"), (1, "WEST", 1, "insert"),
        (2, "EAST", 1, "update"), (2, "WEST", 1, "update"),
        (3, "EAST", None, "delete"), (3, "NORTH", 1, "insert")]


def _noted(data):
    return data.assign(note=[None if n == 0 else f"n{n}" for n in data["n"]])  # untyped if all None


def test_a_column_of_nulls_alone_in_the_first_batch_takes_values_later(spark, warehouse):
    """A first batch whose ``note`` holds only untyped nulls makes it a ``void`` column of the
    changelog and the table; a later batch's values give it their type (it was refused with
    Spark's CAST error), and the batches after that are written as any other."""
    pipeline = (sp.read.from_callback("people", schema={"k": "string", "n": "long"}).map(_noted)
                .as_table("k").write.to_table("notes")).named("noted")
    for batch in ([{"k": "a", "n": 0}], [{"k": "a", "n": 1}, {"k": "b", "n": 0}], [{"k": "b", "n": 2}]):
        pipeline.publish(spark, batch, warehouse)
        pipeline.run_once(spark, warehouse)
    assert table_rows(spark, pipeline, warehouse, "notes") == [("a", 1, "n1"), ("b", 2, "n2")]
    log = changelog(spark, pipeline, warehouse, "notes")
    assert [None if pd.isna(n) else n for n in log["note"]] == [None, "n1", None, "n2"]
    stored = tables.read(spark, pipeline.layout(warehouse).table("notes")).schema
    assert stored["note"].dataType.typeName() == "string"
