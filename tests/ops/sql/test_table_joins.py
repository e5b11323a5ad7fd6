"""Joins over TABLEs declared on a stream of updates (``primary_key=`` or ``as_table``), as
ksqlDB's ``CREATE TABLE users (id … PRIMARY KEY) WITH (kafka_topic=…)``: a stream enriched from
the table, and two tables joined. Checked batch by batch against hand-computed rows, with a
restart through the encoded state in the middle (the Spark test in ``test_state_tables`` runs
them end to end)."""

import json

import pandas as pd
import pytest

import ops as sp
from ops import SqlError
from ops.sources.callback import CallbackSource
from tests.ops.sql.test_ksql_semantics import Run, values

ORDERS = {"order_id": "string", "user_id": "string", "amount": "long", "ts": "timestamp"}
USERS = {"id": "string", "name": "string", "tier": "long", "ts": "timestamp"}
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def catalog(*, timestamps=False, users_as_table=False):
    """orders (a stream) and users (a TABLE keyed by id), with event times when asked."""
    found = sp.Catalog()
    time = "ts" if timestamps else None
    found.register("orders", sp.read.from_callback("orders", schema=ORDERS), timestamp=time)
    users = sp.read.from_callback("users", schema=USERS)
    if users_as_table:
        found.register("users", users.as_table("id"), timestamp=time)
    else:
        found.register("users", users, timestamp=time, primary_key="id")
    return found


def order(order_id, user, amount, second=0):
    return {"_source": "orders", "order_id": order_id, "user_id": user, "amount": amount,
            "ts": T0 + pd.Timedelta(seconds=second)}


def user(user_id, name, tier=1, second=0):
    return {"_source": "users", "id": user_id, "name": name, "tier": None if name is None else tier,
            "ts": None if name is None else T0 + pd.Timedelta(seconds=second)}


@pytest.mark.parametrize("users_as_table", [False, True])
def test_a_stream_left_joined_to_a_declared_table_across_a_restart(users_as_table):
    run = Run(sp.sql("CREATE STREAM enriched AS SELECT o.order_id, u.name, o.amount * u.tier AS "
                     "points FROM orders o LEFT JOIN users u ON o.user_id = u.id",
                     catalog=catalog(users_as_table=users_as_table)))
    # without event times, a batch's updates come before its events
    first = run.feed(order("o1", "u1", 10), user("u1", "Ann", 2), order("o2", "u9", 5))
    assert values(first, "order_id", "name", "points") == [("o1", "Ann", 20), ("o2", None, None)]
    run.restart()  # the table lives in the join's state, encoded and read back
    second = run.feed(order("o3", "u1", 1), user("u9", "Zed"))
    assert values(second, "order_id", "name", "points") == [("o3", "Ann", 2)]
    third = run.feed(user("u1", None), order("o4", "u1", 3), order("o5", "u9", 4))  # u1 deleted
    assert values(third, "order_id", "name", "points") == [("o4", None, None), ("o5", "Zed", 4)]
    assert str(third["points"].dtype) == "Int64" and str(third["name"].dtype) == "string"


def test_an_inner_join_with_event_times_sees_only_the_updates_before_each_event():
    run = Run(sp.sql("CREATE STREAM enriched AS SELECT o.order_id, u.name, u.ts AS named_at "
                     "FROM orders o JOIN users u ON o.user_id = u.id", catalog=catalog(timestamps=True)))
    out = run.feed(order("o1", "u1", 1, second=1), user("u1", "Ann", second=2),
                   order("o2", "u1", 1, second=3), user("u1", "Bea", second=3),
                   order("o3", "u1", 1, second=5))
    # o1 comes before any row of u1 (an inner join drops it); an update at an event's time
    # comes first (o2 sees Bea, as ksqlDB processes the table's record first on a tie)
    assert values(out, "order_id", "name") == [("o2", "Bea"), ("o3", "Bea")]
    assert out["named_at"].tolist() == [T0 + pd.Timedelta(seconds=3)] * 2
    run.restart()
    later = run.feed(order("o4", "u1", 1, second=4), user("u1", "Cy", second=9))
    assert values(later, "order_id", "name") == [("o4", "Bea")]  # Cy comes after o4


def test_a_table_column_the_stream_also_has_is_suffixed():
    found = catalog()
    found.register("accounts", sp.read.from_callback(
        "accounts", schema={"user_id": "string", "amount": "long"}), primary_key="user_id")
    run = Run(sp.sql("CREATE STREAM s AS SELECT * FROM orders o JOIN accounts a "
                     "ON o.user_id = a.user_id", catalog=found))
    out = run.feed({"_source": "accounts", "user_id": "u1", "amount": 100}, order("o1", "u1", 7))
    assert values(out, "order_id", "amount", "amount_table") == [("o1", 7, 100)]


def test_two_declared_tables_joined_and_a_declared_table_joined_to_a_made_one():
    found = catalog()
    found.register("tiers", sp.read.from_callback("tiers", schema={"id": "string", "label": "string"}),
                   primary_key="id")
    run = Run(sp.sql("CREATE TABLE user_tiers AS SELECT id, name, label FROM users "
                     "FULL OUTER JOIN tiers ON users.id = tiers.id", catalog=found))
    first = run.feed(user("u1", "Ann"), {"_source": "tiers", "id": "u2", "label": None},
                     {"_source": "tiers", "id": "u1", "label": "gold"})
    assert values(first, "id", "name", "label", "_change") == [("u1", "Ann", "gold", "insert")]
    assert str(first["label"].dtype) == "string"
    run.restart()
    second = run.feed({"_source": "tiers", "id": "u3", "label": "tin"}, user("u1", None))
    assert values(second, "id", "name", "label", "_change") == [
        ("u3", None, "tin", "insert"), ("u1", None, "gold", "update")]


def test_a_first_batch_of_nulls_keeps_the_declared_types():
    """A column null in every row of a side's first batch is still a string (it was cast to
    VOID by the state table, and reached DuckDB as a double)."""
    found = catalog()
    found.register("tiers", sp.read.from_callback(
        "tiers", schema={"id": "string", "label": "string", "rank": "long"}), primary_key="id")
    run = Run(sp.sql("CREATE TABLE t AS SELECT id, LENGTH(label) AS label_length, tier * 2 AS "
                     "double_tier FROM users JOIN tiers ON users.id = tiers.id", catalog=found))
    out = run.feed({"_source": "tiers", "id": "u1", "label": None, "rank": 1},
                   {"_source": "users", "id": "u1", "name": "Ann", "tier": None, "ts": None})
    assert values(out, "id", "label_length", "double_tier") == [("u1", None, None)]
    assert [str(out[c].dtype) for c in ("label_length", "double_tier")] == ["Int64", "Int64"]


@pytest.mark.parametrize("statement, message", [
    ("CREATE TABLE t AS SELECT id, COUNT(*) AS n FROM users u JOIN orders o ON u.id = o.user_id "
     "GROUP BY id", "users is a table and orders a stream"),
    ("CREATE STREAM s AS SELECT * FROM orders o JOIN users u ON o.user_id = u.name",
     r"ON the table's key \['id'\], not name"),
    ("CREATE STREAM s AS SELECT * FROM orders o FULL OUTER JOIN users u ON o.user_id = u.id",
     "JOIN or LEFT JOIN, not FULL JOIN"),
])
def test_joins_a_declared_table_refuses(statement, message):
    with pytest.raises(SqlError, match=message):
        sp.sql(statement, catalog=catalog())


def test_a_declared_table_needs_its_schema_and_one_key():
    found = catalog()
    found.register("loose", sp.read.from_callback("loose"), primary_key="id")
    with pytest.raises(SqlError, match="a reader with a declared schema"):
        sp.sql("CREATE STREAM s AS SELECT * FROM orders o JOIN loose l ON o.user_id = l.id",
               catalog=found)
    with pytest.raises(SqlError, match="say the key once"):
        found.register("users", sp.read.from_callback("users2", schema=USERS).as_table("id"),
                       primary_key="name")


# -- stream–stream joins WITHIN ---------------------------------------------------------

CLICKS = {"uid": "string", "page": "string", "ts": "timestamp"}
VIEWS = {"uid": "string", "ad": "string", "ts": "timestamp"}


def within(how, bound="10 SECONDS GRACE PERIOD 5 SECONDS"):
    found = sp.Catalog()
    found.register("clicks", sp.read.from_callback("clicks", schema=CLICKS), timestamp="ts")
    found.register("views", sp.read.from_callback("views", schema=VIEWS), timestamp="ts")
    return Run(sp.sql(f"CREATE STREAM s AS SELECT c.uid, c.page, v.ad FROM clicks c {how} views v "
                      f"WITHIN {bound} ON c.uid = v.uid", catalog=found))


def click(uid, page, second):
    return {"_source": "clicks", "uid": uid, "page": page, "ts": T0 + pd.Timedelta(seconds=second)}


def view(uid, ad, second):
    return {"_source": "views", "uid": uid, "ad": ad, "ts": T0 + pd.Timedelta(seconds=second)}


def test_an_inner_join_within_pairs_close_records_whichever_comes_second_and_drops_late_ones():
    run = within("JOIN")
    first = run.feed(click("u1", "a", 0), view("u1", "x", 5), view("u2", "y", 3))
    assert values(first, "uid", "page", "ad") == [("u1", "a", "x")]
    run.restart()
    # 14 - 5 = 9 s apart: a pair; u2's click is 17 s after its view: none
    second = run.feed(click("u1", "b", 14), click("u2", "c", 20))
    assert values(second, "uid", "page", "ad") == [("u1", "b", "x")]
    run.restart()
    # the clicks' time is 20: a click at -6 is late (-6 + 10 + 10 + 5 < 20) and 11 s from the
    # view at 5, so it is dropped; a view at 12 meets the click at 14 (the one at 0 is 12 s off)
    third = run.feed(click("u1", "late", -6), view("u1", "z", 12))
    assert values(third, "uid", "page", "ad") == [("u1", "b", "z")]


def test_a_left_join_emits_an_unmatched_left_record_once_nothing_can_match_it():
    run = within("LEFT JOIN")
    assert values(run.feed(click("u1", "a", 0), click("u3", "d", 1), view("u1", "x", 5)),
                  "uid", "page", "ad") == [("u1", "a", "x")]
    run.restart()
    # the views moving on does not end a click's wait: a view as late as 6 still pairs with it
    assert values(run.feed(view("u9", "q", 30)), "uid", "page", "ad") == []
    # the clicks' time 30: clicks up to 30 - (10 + 10 + 5) are out of reach; u3's matched
    # nothing (u1's did), so it is emitted with no ad; the view at 5 is kept until 30 is passed
    assert values(run.feed(click("u9", "p", 30)), "uid", "page", "ad") == [
        ("u9", "p", "q"), ("u3", "d", None)]
    assert values(run.feed(click("u1", "e", 31)), "uid", "page", "ad") == []


def test_a_full_outer_join_emits_both_sides_unmatched_records_and_the_key_of_either():
    run = within("FULL OUTER JOIN")
    run.feed(click("u1", "a", 0), view("u1", "x", 5))
    run.restart()
    run.feed(view("u9", "q", 30), click("u1", "e", 31))
    # each side's time 60: 31 + 25 < 60 and 30 + 25 < 60, both out of reach
    out = run.feed(view("u5", "w", 60), click("u7", "f", 60))
    assert sorted(values(out, "uid", "page", "ad"), key=str) == [("u1", "e", None), ("u9", None, "q")]


def test_within_before_and_after_bounds_a_right_record_on_each_side():
    run = within("JOIN", "(0 SECONDS, 10 SECONDS) GRACE PERIOD 0 SECONDS")
    out = run.feed(view("u1", "early", 1), click("u1", "a", 2), view("u1", "same", 2),
                   view("u1", "later", 12), view("u1", "too_late", 13))
    assert values(out, "page", "ad") == [("a", "same"), ("a", "later")]



def test_a_late_record_of_a_kept_side_is_emitted_at_once_with_nulls():
    """ksqlDB: a record too late to be kept is still a record of its stream; a LEFT join
    emits it with nulls unless a record the other side keeps pairs with it."""
    run = within("LEFT JOIN")
    assert values(run.feed(click("u1", "a", 100), view("u2", "x", 55)), "uid", "page", "ad") == []
    run.restart()
    # the clicks' time is 100: clicks at 50 and 40 are late (50 + 25 < 100), but the views have
    # not passed 55: the first pairs with it, the second has no view and is emitted alone
    late = run.feed(click("u2", "b", 50), click("u3", "c", 40))
    assert values(late, "uid", "page", "ad") == [("u3", "c", None), ("u2", "b", "x")]
    run.restart()
    assert values(run.feed(click("u3", "d", 101)), "uid", "page", "ad") == []  # none was kept
    outer = within("FULL OUTER JOIN")
    outer.feed(view("u1", "x", 100))
    assert values(outer.feed(view("u4", "y", 50)), "uid", "page", "ad") == [("u4", None, "y")]
    inner = within("JOIN")
    inner.feed(click("u1", "a", 100))
    assert values(inner.feed(click("u4", "b", 50)), "uid", "page", "ad") == []


def test_a_record_pairs_with_the_other_sides_records_until_that_side_moves_past_them():
    """Each side keeps its own time (ksqlDB): the views running ahead to 100 do not end the
    click at 0, which the clicks have not moved past; a view at 3, late for the views, still
    pairs with it."""
    run = within("JOIN")
    assert values(run.feed(click("u1", "a", 0), view("u9", "q", 100)), "uid", "page", "ad") == []
    run.restart()
    assert values(run.feed(view("u1", "x", 3)), "uid", "page", "ad") == [("u1", "a", "x")]
    # the view at 3 was too late to be kept: a click after it does not meet it
    assert values(run.feed(click("u1", "b", 4)), "uid", "page", "ad") == []


def test_a_checkpoint_with_one_stream_time_gives_it_to_both_sides():
    """State written before each side kept its own time holds one stream time: both sides
    start from it (the click at 0 is then out of reach and a LEFT join emits it)."""
    run = within("LEFT JOIN")
    run.feed(click("u1", "a", 0), view("u2", "x", 40))
    run.restart()
    clock = next(key for key in run.saved if key[1] == '"__clock__"')
    assert set(json.loads(run.saved[clock])) == {"time", "late", "l", "r"}
    run.saved[clock] = json.dumps({"time": json.loads(run.saved[clock])["time"], "late": 0})
    run.restart()
    assert values(run.feed(view("u7", "y", 41)), "uid", "page", "ad") == [("u1", "a", None)]


def test_a_right_join_is_a_left_join_with_the_sides_swapped():
    """ksqlDB runs ``a RIGHT JOIN b`` as ``b LEFT JOIN a``: every view is emitted, with its
    clicks or alone once nothing can match it; an unmatched click never is."""
    run = within("RIGHT JOIN")
    first = run.feed(view("u1", "x", 0), click("u1", "a", 5), view("u2", "y", 1), click("u8", "b", 2))
    assert values(first, "uid", "page", "ad") == [("u1", "a", "x")]
    run.restart()
    assert values(run.feed(view("u9", "z", 30)), "uid", "page", "ad") == [("u2", None, "y")]
    assert values(run.feed(click("u7", "c", 40)), "uid", "page", "ad") == []
    # WITHIN (before, after) bounds a view around a click, whichever side is kept
    bounded = within("RIGHT JOIN", "(0 SECONDS, 10 SECONDS) GRACE PERIOD 0 SECONDS")
    out = bounded.feed(view("u1", "early", 1), click("u1", "a", 2), view("u1", "same", 2),
                       view("u1", "later", 12), view("u1", "too_late", 13))
    # (the view at 1, never matched, is out of reach once the views reach 13: it is emitted)
    assert values(out, "page", "ad") == [("a", "same"), ("a", "later"), (None, "early")]

@pytest.mark.parametrize("statement, message", [
    ("CREATE STREAM s AS SELECT * FROM clicks c JOIN views v ON c.uid = v.uid",
     "a stream–stream join needs a time bound"),
    ("CREATE STREAM s AS SELECT * FROM clicks c JOIN views v WITHIN 5 PARSECS ON c.uid = v.uid",
     "5 PARSECS is not a duration"),
    ("CREATE STREAM s AS SELECT * FROM clicks c JOIN views v WITHIN ON c.uid = v.uid",
     "WITHIN needs a time bound"),
    ("CREATE STREAM s AS SELECT * FROM clicks c CROSS JOIN views v WITHIN 5 SECONDS ON c.uid = v.uid",
     "JOIN, LEFT JOIN, RIGHT JOIN or FULL OUTER JOIN, not CROSS JOIN"),
])
def test_stream_stream_joins_refuse(statement, message):
    found = sp.Catalog()
    found.register("clicks", sp.read.from_callback("clicks", schema=CLICKS), timestamp="ts")
    found.register("views", sp.read.from_callback("views", schema=VIEWS), timestamp="ts")
    with pytest.raises(SqlError, match=message):
        sp.sql(statement, catalog=found)
    # a stream registered without timestamp= joins on its records' own time (ROWTIME), unless
    # its source's records have none
    untimed = sp.read.from_callback("views", schema=VIEWS)
    found.register("views", sp.Stream(_Untimed(**vars(untimed.source))))
    with pytest.raises(SqlError, match="needs each stream's event time, and views's records "
                                       "have none of their own"):
        sp.sql("CREATE STREAM s AS SELECT * FROM clicks c JOIN views v WITHIN 1 SECOND "
               "ON c.uid = v.uid", catalog=found)


class _Untimed(CallbackSource):
    """A source whose records have no time of their own."""

    def with_rowtime(self):
        return None


def test_streams_registered_without_event_times_join_on_their_rowtime():
    """ksqlDB's ROWTIME: a callback stream registered without ``timestamp=`` joins on the time
    its records were published (here given as the ``ROWTIME`` the source adds to each row)."""
    found = sp.Catalog()
    found.register("clicks", sp.read.from_callback("clicks", schema=CLICKS))
    found.register("views", sp.read.from_callback("views", schema=VIEWS), timestamp="ts")
    pipeline = sp.sql("CREATE STREAM s AS SELECT c.uid, c.page, v.ad FROM clicks c JOIN views v "
                      "WITHIN 10 SECONDS ON c.uid = v.uid", catalog=found)
    join = pipeline.stream.operators[-2]
    assert (join.left.time, join.right.time) == ("ROWTIME", "ts")
    assert pipeline.stream.source.parts[0].rowtime  # the clicks' source adds it
    run = Run(pipeline)
    published = [{**click("u1", "a", 100), "ROWTIME": T0 + pd.Timedelta(seconds=second)}
                 for second in (0, 30)]
    out = run.feed(published[0], published[1], view("u1", "x", 5))
    assert values(out, "uid", "page", "ad") == [("u1", "a", "x")]  # the ts of 100 is not its time
    # a Kafka record's ROWTIME is its timestamp, a column every Kafka row has (no broker here:
    # the statement is only compiled)
    found.register("clicks", sp.read.from_kafka("clicks", bootstrap="localhost:1",
                                                schema={"uid": "string", "page": "string"}))
    join = sp.sql("CREATE STREAM s AS SELECT c.uid, c.page, v.ad FROM clicks c JOIN views v "
                  "WITHIN 10 SECONDS ON c.uid = v.uid", catalog=found).stream.operators[-2]
    assert join.left.time == "_timestamp"


# -- found in review --------------------------------------------------------------------

def test_a_tombstone_without_a_time_applies_where_it_arrives_and_updates_keep_their_order():
    """A tombstone has no event time: it takes the time of the update before it (the table's
    updates keep their arrival order, as a topic's offsets; events are taken between them by
    time, as Kafka Streams picks the input whose next record is earlier)."""
    run = Run(sp.sql("CREATE STREAM e AS SELECT o.order_id, u.name FROM orders o JOIN users u "
                     "ON o.user_id = u.id", catalog=catalog(timestamps=True)))
    assert values(run.feed(user("u1", "Ann", second=1), user("u1", None), order("o1", "u1", 1, second=5)),
                  "order_id", "name") == []
    out = run.feed(user("u1", "Bob", second=5), user("u1", "Cy", second=3), order("o2", "u1", 1, second=9))
    assert values(out, "order_id", "name") == [("o2", "Cy")]  # the last by arrival, as split
    run.restart()
    assert values(run.feed(order("o3", "u1", 1, second=10)), "order_id", "name") == [("o3", "Cy")]


def test_null_timestamps_are_kept_and_a_timestamp_sides_tombstone_deletes():
    within_run = within("JOIN")
    clicked = click("u1", "a", 0)
    out = within_run.feed({**clicked, "ts": clicked["ts"]}, view("u1", "x", 1))
    within_run.restart()  # the kept records encode (a NaT was not JSON)
    assert values(out, "uid", "page", "ad") == [("u1", "a", "x")]
    found = catalog()
    found.register("tiers", sp.read.from_callback(
        "tiers", schema={"id": "string", "label": "string", "since": "timestamp"}), primary_key="id")
    run = Run(sp.sql("CREATE TABLE t AS SELECT id, name, label FROM users JOIN tiers "
                     "ON users.id = tiers.id", catalog=found))
    run.feed(user("u1", "Ann"), {"_source": "tiers", "id": "u1", "label": "gold", "since": pd.NaT})
    run.restart()
    assert values(run.feed(user("u1", None)), "id", "_change") == [("u1", "delete")]


def test_event_times_given_as_text_order_a_kept_table_join():
    found = sp.Catalog()
    found.register("orders", sp.read.from_callback("orders", schema=ORDERS), timestamp="ts")
    found.register("users", sp.read.from_callback(
        "users", schema={"id": "string", "name": "string", "at": "string"}), timestamp="at",
        primary_key="id")
    run = Run(sp.sql("CREATE STREAM e AS SELECT o.order_id, u.name FROM orders o JOIN users u "
                     "ON o.user_id = u.id", catalog=found))
    out = run.feed({"_source": "users", "id": "u1", "name": "Ann", "at": "2026-01-01T00:00:01Z"},
                   order("o1", "u1", 1, second=5),
                   {"_source": "users", "id": "u1", "name": "Bea", "at": "2026-01-01T00:00:09Z"})
    assert values(out, "order_id", "name") == [("o1", "Ann")]


@pytest.mark.parametrize("statement", [
    "CREATE STREAM s AS SELECT uid, 'within' AS w FROM clicks",
    "CREATE STREAM s AS SELECT c.uid FROM clicks c JOIN views v WITHIN 1 HOUR ON c.uid = v.uid "
    "WHERE c.page = 'within'",
])
def test_within_in_a_string_is_a_value_not_a_clause(statement):
    found = sp.Catalog()
    found.register("clicks", sp.read.from_callback("clicks", schema=CLICKS), timestamp="ts")
    found.register("views", sp.read.from_callback("views", schema=VIEWS), timestamp="ts")
    assert sp.sql(statement, catalog=found).stream.operators


@pytest.mark.parametrize("bound, message", [
    ("99999999999999999999 DAYS", "is not a duration"),
    ("1 HOUR 2 HOURS", "cannot read WITHIN"),
])
def test_within_bounds_that_cannot_be_are_sql_errors(bound, message):
    found = sp.Catalog()
    found.register("clicks", sp.read.from_callback("clicks", schema=CLICKS), timestamp="ts")
    found.register("views", sp.read.from_callback("views", schema=VIEWS), timestamp="ts")
    with pytest.raises(SqlError, match=message):
        sp.sql(f"CREATE STREAM s AS SELECT * FROM clicks c JOIN views v WITHIN {bound} "
               "ON c.uid = v.uid", catalog=found)
