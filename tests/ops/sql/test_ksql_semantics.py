"""ksqlDB's rules for what ``sp.sql`` accepts, checked batch by batch against hand-computed
rows: the compiled pipeline's operators run over explicit batches with state kept in memory
(the Spark tests in ``test_state_tables`` cover the same statements end to end, with a
restart)."""

import json

import pandas as pd
import pytest

import ops as sp
from ops import BatchScope, SqlError
from state import PipelineLayout, StateStore

ORDERS = {"ID": "string", "TITLE": "string", "PRICE": "double", "QTY": "long", "NOTE": "string"}


def orders(schema=ORDERS):
    return sp.read.from_callback("orders", schema=schema)


class Run:
    """Applies a compiled pipeline's operators to batches, in order, state in memory."""

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
        self.saved = {}
        self.batch = 0

    def restart(self):
        """What a new run finds: the state checkpointed so far, encoded, read back (a store
        handed the stored rows, as an executor is)."""
        for row in self.store.take_changes().rows.itertuples(index=False):
            if row.deleted:
                self.saved.pop((row.operator, row.key), None)
            else:
                self.saved[(row.operator, row.key)] = row.value
        self.store = StateStore.of_rows(pd.DataFrame(
            [{"operator": op, "key": key, "value": value} for (op, key), value in self.saved.items()],
            columns=["operator", "key", "value"]))

    def feed(self, *rows, **columns):
        self.batch += 1
        frame = pd.DataFrame(list(rows)) if rows else pd.DataFrame(columns)
        scope = BatchScope("p", self.batch, (), self.store)
        for op in self.pipeline.stream.operators:
            frame = op.apply(scope, frame)
        return frame.reset_index(drop=True)


def values(frame, *columns):
    """The rows as tuples of plain Python values (nulls as None)."""
    return [tuple(v if isinstance(v, list) else None if pd.isna(v) else v for v in row)
            for row in frame[list(columns)].astype(object).itertuples(index=False)]


def table(statement, schema=ORDERS, **options):
    return Run(sp.sql(statement, streams={"orders": orders(schema)}, catalog=sp.Catalog(),
                      **options))


def test_lower_case_identifiers_read_upper_case_columns_and_quoted_ones_must_match():
    run = table("create table by_title as select title, count(*) as n, sum(qty) as units "
                "from Orders group by title")
    out = run.feed({"TITLE": "Heat", "QTY": 2}, {"TITLE": "Heat", "QTY": 3})
    assert values(out, "TITLE", "n", "units") == [("Heat", 2, 5)]
    with pytest.raises(SqlError, match=r'unknown column title in orders'):
        sp.sql('CREATE TABLE t AS SELECT "title", COUNT(*) FROM orders GROUP BY "title"',
               streams={"orders": orders()}, catalog=sp.Catalog())


def test_count_star_count_one_count_column_and_group_by_an_expression():
    run = table("CREATE TABLE t AS SELECT UCASE(title) AS upper_title, COUNT(*) AS star, "
                "COUNT(1) AS one, COUNT(note) AS notes FROM orders GROUP BY UCASE(title)")
    out = run.feed({"TITLE": "heat", "NOTE": None}, {"TITLE": "Heat", "NOTE": "x"},
                   {"TITLE": "up", "NOTE": None})
    assert values(out, "upper_title", "star", "one", "notes") == [("HEAT", 2, 2, 1), ("UP", 1, 1, 0)]
    assert run.pipeline.sinks[0].keys == ("upper_title",)


def test_count_with_no_argument_counts_rows_as_ksqldb_does():
    run = table("CREATE TABLE t AS SELECT title, COUNT() AS n, COUNT(note) AS notes FROM orders "
                "GROUP BY title")
    assert values(run.feed({"TITLE": "a", "NOTE": None}, {"TITLE": "a", "NOTE": "x"}),
                  "TITLE", "n", "notes") == [("a", 2, 1)]
    assert values(run.feed({"TITLE": "a", "NOTE": None}), "TITLE", "n", "notes") == [("a", 3, 1)]


def test_a_group_by_expression_without_a_name_is_ksql_col_n():
    run = table("CREATE TABLE t AS SELECT COUNT(*) AS n FROM orders GROUP BY LCASE(title)")
    assert values(run.feed({"TITLE": "A"}, {"TITLE": "a"}), "KSQL_COL_0", "n") == [("a", 2)]


def test_expressions_over_aggregates_and_having_on_an_aggregate_not_selected():
    run = table("CREATE TABLE t AS SELECT title, SUM(price * qty) / SUM(qty) AS unit_price, "
                "SUM(qty) / COUNT(*) AS per_order, ROUND(AVG(price), 1) AS mean "
                "FROM orders GROUP BY title HAVING MAX(qty) >= 2")
    first = run.feed({"TITLE": "A", "PRICE": 10.0, "QTY": 1}, {"TITLE": "B", "PRICE": 4.0, "QTY": 3})
    # A's largest quantity is 1: HAVING hides it. B: 12/3 = 4.0; 3 // 1 = 3 (integer division)
    assert values(first, "TITLE", "unit_price", "per_order", "mean", "_change") == [
        ("B", 4.0, 3, 4.0, "insert")]
    assert "MAX" not in " ".join(first.columns) and not any(c.startswith("_agg") for c in first.columns)
    second = run.feed({"TITLE": "A", "PRICE": 20.0, "QTY": 2}, {"TITLE": "B", "PRICE": 1.0, "QTY": 2})
    # A: (10 + 40) / 3 = 16.66…; 3 // 2 = 1. B: (12 + 2) / 5 = 2.8; 5 // 2 = 2; avg(4, 1) = 2.5
    assert values(second, "TITLE", "per_order", "mean", "_change") == [
        ("A", 1, 15.0, "insert"), ("B", 2, 2.5, "update")]
    assert second["unit_price"].round(4).tolist() == [16.6667, 2.8]
    # the changelog's old values are the projected columns the table showed
    assert json.loads(second["_old"][1]) == {"unit_price": 4.0, "per_order": 3, "mean": 4.0}


def test_scalar_functions_and_operators():
    run = Run(sp.sql(
        """CREATE STREAM shown AS SELECT id,
             CASE WHEN qty > 2 THEN 'bulk' ELSE 'single' END AS size,
             CAST(qty AS VARCHAR) AS qty_text, UPPER(title) AS up, LOWER(title) AS low,
             CONCAT(title, '-', note) AS label, SUBSTRING(title, 2, 3) AS middle,
             LEN(title) AS length, COALESCE(note, 'none') AS note_or, IFNULL(qty, 0) AS qty_or,
             ROUND(price, 1) AS rounded, ABS(qty - 5) AS distance, qty / 2 AS halves,
             price / 4 AS quarter
           FROM orders WHERE price IS NOT NULL""",
        streams={"orders": orders()}, catalog=sp.Catalog()))
    out = run.feed({"ID": "1", "TITLE": "Heat", "PRICE": 10.26, "QTY": 3, "NOTE": None},
                   {"ID": "2", "TITLE": "Up", "PRICE": 3.0, "QTY": None, "NOTE": "gift"},
                   {"ID": "3", "TITLE": "Gone", "PRICE": None, "QTY": 1, "NOTE": None})
    assert values(out, "ID", "size", "qty_text", "up", "low", "label", "middle", "length",
                  "note_or", "qty_or", "rounded", "distance", "halves", "quarter") == [
        ("1", "bulk", "3", "HEAT", "heat", "Heat-", "eat", 4, "none", 3, 10.3, 2, 1, 2.565),
        ("2", "single", None, "UP", "up", "Up-gift", "p", 2, "gift", 0, 3.0, None, None, 0.75)]


def test_regexp_extract_takes_ksqldbs_capture_group_and_is_null_without_a_match():
    run = Run(sp.sql("CREATE STREAM parts AS SELECT id, REGEXP_EXTRACT(note, '(\\w+)-(\\d+)', 2) "
                     "AS num, REGEXP_EXTRACT(note, '[a-z]+') AS word FROM orders",
                     streams={"orders": orders()}, catalog=sp.Catalog()))
    out = run.feed({"ID": "1", "NOTE": "box-42 left"}, {"ID": "2", "NOTE": "42"},
                   {"ID": "3", "NOTE": None})
    assert values(out, "ID", "num", "word") == [("1", "42", "box"), ("2", None, None),
                                                ("3", None, None)]


def test_min_max_latest_of_a_timestamp_are_timestamps_across_a_restart():
    run = table("CREATE TABLE t AS SELECT title, MIN(at) AS first, MAX(at) AS last, "
                "LATEST_BY_OFFSET(at) AS latest FROM orders GROUP BY title",
                schema={**ORDERS, "AT": "timestamp"})
    t = [pd.Timestamp(f"2026-01-01 00:00:0{s}", tz="UTC") for s in range(4)]
    assert values(run.feed({"TITLE": "A", "AT": t[2]}, {"TITLE": "A", "AT": t[1]}),
                  "first", "last", "latest") == [(t[1], t[2], t[1])]
    run.restart()
    out = run.feed({"TITLE": "A", "AT": t[3]}, {"TITLE": "A", "AT": t[0]}, {"TITLE": "A", "AT": None})
    assert values(out, "first", "last", "latest") == [(t[0], t[3], t[0])]
    assert str(out["first"].dtype) == "datetime64[ns, UTC]"


def test_aggregate_filter_and_count_distinct_across_a_restart():
    run = table("CREATE TABLE t AS SELECT title, COUNT(*) FILTER (WHERE price < 10) AS cheap, "
                "SUM(qty) FILTER (WHERE price >= 10) AS dear_qty, COUNT(DISTINCT id) AS ids, "
                "COUNT(DISTINCT note) FILTER (WHERE qty > 1) AS notes FROM orders GROUP BY title")
    out = run.feed({"TITLE": "A", "ID": "1", "PRICE": 5.0, "QTY": 2, "NOTE": "x"},
                   {"TITLE": "A", "ID": "1", "PRICE": 50.0, "QTY": 3, "NOTE": "y"},
                   {"TITLE": "A", "ID": "2", "PRICE": None, "QTY": 1, "NOTE": "z"})
    assert values(out, "cheap", "dear_qty", "ids", "notes") == [(1, 3, 2, 2)]
    run.restart()
    out = run.feed({"TITLE": "A", "ID": "3", "PRICE": 1.0, "QTY": 5, "NOTE": "x"},
                   {"TITLE": "A", "ID": None, "PRICE": 10.0, "QTY": 4, "NOTE": None})
    assert values(out, "cheap", "dear_qty", "ids", "notes") == [(2, 7, 3, 2)]


def test_max_by_and_min_by_pick_the_first_row_at_the_extreme_across_a_restart():
    run = table("CREATE TABLE t AS SELECT title, MAX_BY(id, price) AS dearest, "
                "MIN_BY(at, price) AS cheapest_at, MAX_BY(note, qty * 1.0) AS most FROM orders "
                "GROUP BY title", schema={**ORDERS, "AT": "timestamp"})
    t = [pd.Timestamp(f"2026-01-01 00:00:0{s}", tz="UTC") for s in range(4)]
    out = run.feed({"TITLE": "A", "ID": "1", "PRICE": 5.0, "AT": t[0], "QTY": 1, "NOTE": "x"},
                   {"TITLE": "A", "ID": "2", "PRICE": 9.0, "AT": t[1], "QTY": 1, "NOTE": "y"},
                   {"TITLE": "A", "ID": "3", "PRICE": 9.0, "AT": t[2], "QTY": None, "NOTE": "z"},
                   {"TITLE": "B", "ID": "4", "PRICE": None, "AT": t[3], "QTY": None, "NOTE": "w"})
    assert values(out, "TITLE", "dearest", "cheapest_at", "most") == [("A", "2", t[0], "x"),
                                                                       ("B", None, None, None)]
    run.restart()
    out = run.feed({"TITLE": "A", "ID": "5", "PRICE": 9.0, "AT": t[3], "QTY": 2, "NOTE": "v"},
                   {"TITLE": "A", "ID": "6", "PRICE": 1.0, "AT": t[2], "QTY": 1, "NOTE": "u"})
    assert values(out, "dearest", "cheapest_at", "most") == [("2", t[2], "v")]  # a tie keeps "2"
    assert str(out["cheapest_at"].dtype) == "datetime64[ns, UTC]"


def test_count_distinct_is_refused_over_a_table_which_it_cannot_take_back():
    with pytest.raises(SqlError, match=r"COUNT\(DISTINCT .* cannot aggregate a TABLE"):
        users_table("CREATE TABLE t AS SELECT region, COUNT(DISTINCT score) FROM users GROUP BY region")


def test_create_stream_projects_and_filters_every_row():
    pipeline = sp.sql("CREATE STREAM big_orders AS SELECT id, price * qty AS total FROM orders "
                      "WHERE price * qty > 10 EMIT CHANGES;",
                      streams={"orders": orders()}, catalog=sp.Catalog())
    assert pipeline.name == "big_orders" and pipeline.sinks[0].name == "big_orders"
    out = Run(pipeline).feed({"ID": "a", "PRICE": 5.0, "QTY": 3}, {"ID": "b", "PRICE": 5.0, "QTY": 1})
    assert values(out, "ID", "total") == [("a", 15.0)]  # a column keeps the source's name


def test_latest_by_offset_ignore_nulls_false_keeps_a_null():
    run = table("CREATE TABLE t AS SELECT title, LATEST_BY_OFFSET(note) AS kept, "
                "LATEST_BY_OFFSET(note, false) AS last FROM orders GROUP BY title")
    assert values(run.feed({"TITLE": "A", "NOTE": "x"}, {"TITLE": "A", "NOTE": None}),
                  "kept", "last") == [("x", None)]
    assert run.feed({"TITLE": "A", "NOTE": None}).empty  # nothing the table shows changed
    assert values(run.feed({"TITLE": "A", "NOTE": "y"}), "kept", "last") == [("y", "y")]


def test_avg_ignores_nulls_in_its_sum_and_its_count_and_is_0_over_none():
    run = table("CREATE TABLE t AS SELECT title, AVG(price) AS mean, COUNT(price) AS priced, "
                "COUNT(*) AS n FROM orders GROUP BY title")
    # ksqlDB's AVG of no values is 0.0 (its accumulator's map() with a count of 0), not null
    assert values(run.feed({"TITLE": "A", "PRICE": None}), "mean", "priced", "n") == [(0.0, 0, 1)]
    assert values(run.feed({"TITLE": "A", "PRICE": 4.0}, {"TITLE": "A", "PRICE": None},
                           {"TITLE": "A", "PRICE": 2.0}), "mean", "priced", "n") == [(3.0, 2, 4)]


def test_a_first_batch_of_nulls_still_types_computed_columns():
    run = table("CREATE TABLE t AS SELECT title, SUM(qty * 2) AS doubled, MAX(UPPER(note)) AS top "
                "FROM orders GROUP BY title")
    out = run.feed({"TITLE": "A", "QTY": None, "NOTE": None})
    assert values(out, "doubled", "top") == [(None, None)]
    assert (str(out["doubled"].dtype), str(out["top"].dtype)) == ("Int64", "string")


WINDOWED = {"PAGE": "string", "TS": "timestamp", "X": "long"}


def at(seconds):
    return pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=seconds)


def test_windowstart_windowend_are_bigint_epoch_ms_and_having_with_a_window():
    run = table("CREATE TABLE t AS SELECT page, WINDOWSTART AS ws, WINDOWEND AS we, COUNT(*) AS n "
                "FROM orders WINDOW TUMBLING (SIZE 10 SECONDS) GROUP BY page HAVING COUNT(*) > 1",
                schema=WINDOWED, timestamp="ts")
    out = run.feed({"PAGE": "a", "TS": at(1), "X": 1}, {"PAGE": "a", "TS": at(2), "X": 1},
                   {"PAGE": "b", "TS": at(3), "X": 1})
    start_ms = at(0).value // 1_000_000
    assert values(out, "PAGE", "ws", "we", "n") == [("a", start_ms, start_ms + 10_000, 2)]  # BIGINT ms
    assert str(out["ws"].dtype) == "Int64"
    assert out.columns.tolist()[:3] == ["PAGE", "window_start", "window_end"]  # the key: timestamps


def test_hopping_windows_starting_before_the_epoch_are_not_created():
    run = Run(sp.sql("CREATE TABLE t AS SELECT page, COUNT(*) AS n FROM orders "
                     "WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY page",
                     streams={"orders": orders(WINDOWED)}, catalog=sp.Catalog(), timestamp="TS"))
    epoch = pd.Timestamp(0, tz="UTC")
    out = run.feed({"PAGE": "a", "TS": epoch + pd.Timedelta(seconds=7), "X": 1})
    assert [start - epoch for start in out["window_start"]] == [pd.Timedelta(0), pd.Timedelta("5s")]


def test_a_window_without_grace_period_gets_ksqldb_default_of_24_hours():
    pipeline = sp.sql("CREATE TABLE t AS SELECT page, COUNT(*) AS n FROM orders "
                      "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY page EMIT FINAL",
                      streams={"orders": orders(WINDOWED)}, catalog=sp.Catalog(), timestamp="TS")
    assert pipeline.stream.operators[-1].window.grace == pd.Timedelta("24h")
    run = Run(pipeline)
    assert run.feed({"PAGE": "a", "TS": at(10), "X": 1}, {"PAGE": "a", "TS": at(4000), "X": 1}).empty
    late_but_in_grace = run.feed({"PAGE": "a", "TS": at(20), "X": 1},
                                 {"PAGE": "b", "TS": at(10 + 86400 + 60), "X": 1})
    assert values(late_but_in_grace, "PAGE", "n") == [("a", 2)]  # closed a day after its end


@pytest.mark.parametrize("statement, message", [
    ("CREATE TABLE t AS SELECT title, COUNT(*) FROM orders WHERE pirce > 1 GROUP BY title",
     r"WHERE: unknown column pirce in orders; its columns: \['ID', 'TITLE', 'PRICE', 'QTY', "
     r"'NOTE'\] \(line 1, column 60\)"),
    ("CREATE TABLE t AS\n  SELECT title, price, COUNT(*) FROM orders GROUP BY title",
     r"SELECT: PRICE must be in GROUP BY or inside an aggregate \(line 2, column 17\)\n"
     r"    SELECT title, price, COUNT\(\*\) FROM orders GROUP BY title\n                  \^"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) FROM orders GROUP BY title HAVING SUM(",
     r"syntax error at line 1, column 79"),
    ("CREATE TABLE t AS SELECT title, MEDIAN(qty) FROM orders GROUP BY title",
     r"SELECT: unsupported aggregate MEDIAN; use COUNT"),
    ("CREATE TABLE t AS SELECT title, SUM(COUNT(*)) FROM orders GROUP BY title",
     r"an aggregate inside an aggregate"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) AS n, SUM(qty) AS n FROM orders GROUP BY title",
     r"column name\(s\) \['n'\] used twice"),
    ("CREATE TABLE t AS SELECT title, FROB(qty) AS f, COUNT(*) FROM orders GROUP BY title",
     r"SELECT: unknown function FROB \(line 1, column 33\)"),
    ("CREATE TABLE t AS SELECT title, WINDOWSTART AS ws, COUNT(*) FROM orders GROUP BY title",
     r"SELECT: WINDOWSTART needs a WINDOW"),
    ("CREATE STREAM s AS SELECT title, COUNT(*) FROM orders",
     r"SELECT: aggregates need CREATE TABLE … GROUP BY"),
    ("CREATE TABLE t AS SELECT x.title, COUNT(*) FROM orders GROUP BY x.title",
     r"no source x in this query"),
    ("CREATE TABLE t AS SELECT title, COUNT(*, qty) FROM orders GROUP BY title",
     r"SELECT: 'COUNT\(\*, \"QTY\"\)': COUNT takes one argument, or none .* \(line 1, column 33\)"),
    ("CREATE TABLE t AS SELECT title, MAX(qty, price) FROM orders GROUP BY title",
     r"SELECT: .*MAX takes one argument \(line 1, column 33\)"),
    ("CREATE TABLE t AS SELECT title, SUM(DISTINCT qty) FROM orders GROUP BY title",
     r"SELECT: .*DISTINCT inside an aggregate is supported in COUNT\(DISTINCT column\) only"),
    ("CREATE TABLE t AS SELECT title, COLLECT_LIST(qty) FILTER (WHERE qty > 1) FROM orders "
     "GROUP BY title", r"SELECT: .*FILTER \(WHERE …\) applies to COUNT, SUM, MIN, MAX or AVG "
     r"\(line 1, column 33\)"),
    ("CREATE TABLE t AS SELECT title, SUM(qty) OVER () FROM orders GROUP BY title",
     r"SELECT: .*OVER \(…\) is not supported"),
    ("CREATE TABLE t AS WITH x AS (SELECT 1) SELECT title, COUNT(*) FROM orders GROUP BY title",
     r"WITH: unsupported in a table query"),
    ("CREATE TABLE t WITH (kafka_topic='t') AS SELECT title, COUNT(*) FROM orders GROUP BY title",
     r"WITH: unsupported property"),
    ("CREATE STREAM s AS SELECT title FROM orders PARTITION BY qty",
     r"PARTITION BY: unsupported"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) FROM orders WINDOW TUMBLING (SIZE 0 SECONDS) "
     "GROUP BY title", r"WINDOW TUMBLING \(SIZE 0 SECONDS\): window size and advance must be positive"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) FROM orders "
     "WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 20 SECONDS) GROUP BY title",
     r"WINDOW HOPPING .*advance cannot exceed its size"),
    ("CREATE TABLE t AS SELECT title, COUNT(*) FROM orders WINDOW SESSION (0 SECONDS) "
     "GROUP BY title", r"WINDOW SESSION \(0 SECONDS\): a session gap must be positive"),
])
def test_refused_statements_name_the_clause_and_the_position(statement, message):
    with pytest.raises(SqlError, match=message) as caught:
        sp.sql(statement, streams={"orders": orders()}, catalog=sp.Catalog())
    assert "<class" not in str(caught.value) and "sqlglot" not in str(caught.value)


USERS = {"ID": "string", "REGION": "string", "SCORE": "long"}


def users_table(statement):
    catalog = sp.Catalog()
    catalog.register("users", sp.read.from_callback("users", schema=USERS), primary_key="id")
    return Run(sp.sql(statement, catalog=catalog))


def test_aggregating_a_table_retracts_the_old_row_before_adding_the_new_one():
    run = users_table("CREATE TABLE by_region AS SELECT region, COUNT(*) AS n, SUM(score) AS total, "
                      "AVG(score) AS mean FROM users GROUP BY region")
    first = run.feed({"ID": "u1", "REGION": "east", "SCORE": 10}, {"ID": "u2", "REGION": "east", "SCORE": 20},
                     {"ID": "u3", "REGION": "west", "SCORE": 5})
    assert values(first, "REGION", "n", "total", "mean") == [("east", 2, 30, 15.0), ("west", 1, 5, 5.0)]
    # u1 moves: both groups change, the one it left first
    moved = run.feed({"ID": "u1", "REGION": "west", "SCORE": 12})
    assert values(moved, "REGION", "n", "total", "mean", "_change") == [
        ("east", 1, 20, 20.0, "update"), ("west", 2, 17, 8.5, "update")]
    # a tombstone (nulls besides the key) only retracts
    assert values(run.feed({"ID": "u3", "REGION": None, "SCORE": None}), "REGION", "n", "total") == [
        ("west", 1, 12)]
    # a count that falls to 0 stays, at 0 (SUM of nothing left is 0, AVG 0.0 as in ksqlDB)
    assert values(run.feed({"ID": "u2", "REGION": None, "SCORE": None}),
                  "REGION", "n", "total", "mean", "_change") == [("east", 0, 0, 0.0, "update")]
    # an update that changes nothing a group shows still retracts and re-adds: no visible change
    assert run.feed({"ID": "u1", "REGION": "west", "SCORE": 12}).empty


def test_having_removes_a_table_group_whose_count_falls_to_zero():
    run = users_table("CREATE TABLE busy AS SELECT region, COUNT(*) AS n FROM users "
                      "GROUP BY region HAVING COUNT(*) > 0")
    run.feed({"ID": "u1", "REGION": "east", "SCORE": 1})
    assert values(run.feed({"ID": "u1", "REGION": "west", "SCORE": 1}), "REGION", "n", "_change") == [
        ("east", None, "delete"), ("west", 1, "insert")]


def test_aggregates_that_cannot_take_a_row_back_are_refused_on_a_table():
    with pytest.raises(SqlError, match=r"SELECT: 'MAX\(\"SCORE\"\)' cannot aggregate a TABLE.* "
                       r"\(line 1, column 34\)"):
        users_table("CREATE TABLE t AS SELECT region, MAX(score) AS top FROM users GROUP BY region")
    with pytest.raises(SqlError, match=r"COLLECT_SET.*cannot aggregate a TABLE"):
        users_table("CREATE TABLE t AS SELECT region, COLLECT_SET(id) AS ids FROM users "
                    "GROUP BY region")


def test_emit_changes_per_record_emits_a_row_per_input_even_unchanged():
    statement = "CREATE TABLE t AS SELECT title, MAX(qty) AS top, COUNT(*) AS n FROM orders GROUP BY title"
    rows = ({"TITLE": "A", "QTY": 5}, {"TITLE": "B", "QTY": 1}, {"TITLE": "A", "QTY": 2})
    per_record = table(statement, emit_changes="per_record")
    assert values(per_record.feed(*rows), "TITLE", "top", "n", "_change") == [
        ("A", 5, 1, "insert"), ("B", 1, 1, "insert"), ("A", 5, 2, "update")]
    assert per_record.pipeline.sinks[0].coalesced is False
    assert values(table(statement).feed(*rows), "TITLE", "top", "n", "_change") == [
        ("A", 5, 2, "insert"), ("B", 1, 1, "insert")]
    windowed = table("CREATE TABLE w AS SELECT page, MAX(x) AS top FROM orders "
                     "WINDOW TUMBLING (SIZE 10 SECONDS) GROUP BY page", schema=WINDOWED,
                     timestamp="TS", emit_changes="per_record")
    out = windowed.feed({"PAGE": "a", "TS": at(1), "X": 3}, {"PAGE": "a", "TS": at(2), "X": 1})
    assert values(out, "PAGE", "top", "_change") == [("a", 3, "insert"), ("a", 3, "update")]


ODD_STATEMENTS = [
    "", ";", "CREATE TABLE", "SELECT * FROM orders", "DROP TABLE t",
    "CREATE TABLE t AS SELECT title, COUNT() FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM() FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, LATEST_BY_OFFSET() FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, COLLECT_LIST() FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, TOPK(qty, 3) FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders GROUP BY title HAVING",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders GROUP BY title HAVING qty > 1",
    "CREATE TABLE t AS SELECT * FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM (SELECT * FROM orders) GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders, orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, (SELECT 1) FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FILTER (WHERE qty > 1) FROM orders GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders GROUP BY title EMIT SOMETIMES",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders WINDOW TUMBLING (SIZE -1 SECONDS) "
    "GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders WINDOW TUMBLING (SIZE 1 FORTNIGHT) "
    "GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders WINDOW TUMBLING GROUP BY title",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders GROUP BY title UNION "
    "SELECT title, 1 FROM orders",
    "CREATE STREAM s AS SELECT title FROM orders WHERE",
    "CREATE STREAM s AS SELECT nope FROM orders",
    "CREATE TABLE t AS SELECT title, SUM(qty) FROM orders GROUP BY title; CREATE TABLE u AS SELECT 1",
]


@pytest.mark.parametrize("statement", ODD_STATEMENTS)
def test_no_statement_escapes_sql_with_anything_but_a_sql_error(statement):
    """Each statement compiles, or is refused with a SqlError: never an exception from inside
    the compiler (COUNT() once raised AttributeError)."""
    try:
        sp.sql(statement, streams={"orders": orders()}, catalog=sp.Catalog())
    except SqlError as refused:
        assert "<class" not in str(refused) and "sqlglot" not in str(refused)


def test_collect_list_keeps_nulls_and_collect_set_keeps_distinct_values_across_a_restart():
    run = table("CREATE TABLE t AS SELECT title, COLLECT_LIST(note) AS notes, "
                "COLLECT_SET(note) AS kinds FROM orders GROUP BY title")
    out = run.feed({"TITLE": "a", "NOTE": "x"}, {"TITLE": "a", "NOTE": None},
                   {"TITLE": "a", "NOTE": "x"})
    assert values(out, "TITLE", "notes", "kinds") == [("a", ["x", None, "x"], ["x", None])]
    run.restart()
    out = run.feed({"TITLE": "a", "NOTE": None}, {"TITLE": "a", "NOTE": "y"})
    assert values(out, "TITLE", "notes", "kinds") == [
        ("a", ["x", None, "x", None, "y"], ["x", None, "y"])]


def test_collect_list_over_a_table_takes_a_changed_row_back_as_ksqldb_does():
    """A row taken back removes the last occurrence of its value (ksqlDB's undo); nulls count."""
    run = users_table("CREATE TABLE t AS SELECT region, COLLECT_LIST(score) AS scores "
                      "FROM users GROUP BY region")
    out = run.feed({"ID": "u1", "REGION": "east", "SCORE": 10}, {"ID": "u2", "REGION": "east", "SCORE": 20},
                   {"ID": "u3", "REGION": "east", "SCORE": 10}, {"ID": "u4", "REGION": "east", "SCORE": None})
    assert values(out, "REGION", "scores") == [("east", [10, 20, 10, None])]
    run.restart()
    # u1 moves west (its 10 leaves east: the last 10 goes), u4 gets a score (its null leaves)
    out = run.feed({"ID": "u1", "REGION": "west", "SCORE": 10}, {"ID": "u4", "REGION": "east", "SCORE": 7})
    assert values(out, "REGION", "scores") == [("east", [10, 20, 7]), ("west", [10])]
    run.restart()
    out = run.feed({"ID": "u2", "REGION": None, "SCORE": None})  # a tombstone: only taken back
    assert values(out, "REGION", "scores") == [("east", [10, 7])]


def test_avg_over_a_table_follows_each_update_across_restarts():
    """ksqlDB's AVG over a table: each changed row's old value taken back, its new one added
    (nulls neither), 0.0 once no value is left; hand-computed, with restarts between batches."""
    run = users_table("CREATE TABLE t AS SELECT region, AVG(score) AS mean FROM users GROUP BY region")
    steps = [
        ([("u1", "east", 10), ("u2", "east", 20), ("u3", "east", None)], [("east", 15.0)]),
        ([("u3", "east", 30)], [("east", 20.0)]),                       # (10 + 20 + 30) / 3
        ([("u1", "west", 10), ("u2", "east", 21)], [("east", 25.5), ("west", 10.0)]),
        ([("u2", "east", None)], [("east", 30.0)]),                     # a null leaves the mean to 30
        ([("u3", None, None)], [("east", 0.0)]),                        # nothing left: 0.0
        ([("u4", "east", 5)], [("east", 5.0)]),
    ]
    for rows, expected in steps:
        out = run.feed(*[{"ID": i, "REGION": r, "SCORE": v} for i, r, v in rows])
        assert values(out, "REGION", "mean") == expected
        run.restart()


def test_a_column_null_in_every_row_of_a_batch_keeps_its_declared_type():
    """A table made by sp.sql read back from its changelog: a batch whose names are all null
    arrives as pandas' NaN column; the name is still a string to DuckDB (it was a double, and
    LENGTH failed to bind), because the table's column types come from its statement."""
    catalog = sp.Catalog()
    catalog.register("people", sp.read.from_callback("people", schema={"id": "string", "name": "string"}))
    sp.sql("CREATE TABLE names AS SELECT id, LATEST_BY_OFFSET(name, FALSE) AS name FROM people "
           "GROUP BY id", catalog=catalog)
    assert dict(catalog.table("names").kinds) == {"id": "string", "name": "string"}
    run = Run(sp.sql("CREATE TABLE lengths AS SELECT COALESCE(LENGTH(name), -1) AS length, "
                     "COUNT(*) AS n FROM names GROUP BY COALESCE(LENGTH(name), -1)", catalog=catalog))
    changes = {"_change": ["insert", "insert"], "_old": [None, None]}
    first = run.feed(id=["a", "b"], name=[float("nan")] * 2, **changes)
    assert values(first, "length", "n") == [(-1, 2)]
    run.restart()
    second = run.feed(id=["a"], name=["Ann"], _change=["update"], _old=['{"name": null}'])
    assert values(second, "length", "n") == [(-1, 1), (3, 1)]


def test_session_windows_with_having_and_per_record_emission_across_a_restart():
    """ksqlDB's sessions: HAVING hides a session (its row goes when it stops passing), and
    without the record cache every record's merge emits the replaced sessions' tombstones,
    then the merged session."""
    def at(second):
        return pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=second)

    statement = ("CREATE TABLE visits AS SELECT id, COUNT(*) AS n FROM orders "
                 "WINDOW SESSION (60 SECONDS, GRACE PERIOD 10 MINUTES) GROUP BY id HAVING COUNT(*) >= 2")
    schema = {"ID": "string", "TS": "timestamp"}
    run = table(statement, schema=schema, timestamp="ts", emit_changes="per_record")
    out = run.feed({"ID": "a", "TS": at(0)}, {"ID": "a", "TS": at(150)}, {"ID": "a", "TS": at(30)})
    # 0 and 150 are sessions of one (hidden); 30 joins the first: two records, shown
    assert values(out, "ID", "n", "_change") == [("a", 2, "update")]
    run.restart()
    out = run.feed({"ID": "a", "TS": at(90)})  # bridges [0, 30] and [150, 150]
    assert [(r["_change"], r["window_start"].second + 60 * r["window_start"].minute, r["n"])
            for r in out.to_dict("records")] == [("delete", 0, None), ("update", 0, 4)]
    assert values(out, "window_end")[0][0] == at(30)  # the tombstone carries the old end


def test_group_by_expressions_over_a_stream_without_a_schema():
    """Nothing declares the columns' types: their values decide (the types' inference from
    an empty frame of no columns escaped sp.sql)."""
    run = Run(sp.sql("CREATE TABLE t AS SELECT UCASE(title) AS title, SUM(qty * 2) AS n FROM orders "
                     "GROUP BY UCASE(title)", streams={"orders": sp.read.from_callback("orders")},
                     catalog=sp.Catalog()))
    assert values(run.feed({"title": "a", "qty": 1}, {"title": "A", "qty": 2}), "title", "n") == [("A", 6)]


def test_a_table_read_from_a_changelog_keeps_its_long_group_key_when_a_batch_has_a_null():
    """A table an earlier statement made, read from its changelog as the Delta source gives
    it: a long column with a null in the batch arrives as doubles. The update of u1 (10 -> 30)
    must take 10 out of group 1, not open a group 1.0 whose retraction finds nothing (AVG over
    a count of 0, a list without 10 taken back, written over group 1's row)."""
    catalog = sp.Catalog()
    catalog.register("events", sp.read.from_callback(
        "events", schema={"id": "string", "g": "long", "v": "long"}))
    sp.sql("CREATE TABLE latest AS SELECT id, LATEST_BY_OFFSET(g, false) AS g, "
           "LATEST_BY_OFFSET(v, false) AS v FROM events GROUP BY id", catalog=catalog)
    run = Run(sp.sql("CREATE TABLE t AS SELECT g, AVG(v) AS a, COLLECT_LIST(v) AS l, COUNT(*) AS n "
                     "FROM latest GROUP BY g", catalog=catalog))
    first = run.feed(id=["u1", "u2"], g=[1, 1], v=[10, 20], _change=["insert"] * 2, _old=[None] * 2)
    assert values(first, "g", "a", "l", "n") == [(1, 15.0, [10, 20], 2)]
    run.restart()
    second = run.feed(id=["u1", "u3"], g=[1.0, float("nan")], v=[30.0, float("nan")],
                      _change=["update", "insert"], _old=['{"g": 1, "v": 10}', None])
    assert values(second, "g", "a", "l", "n", "_change") == [(1, 25.0, [20, 30], 2, "update")]


def test_per_record_an_update_within_its_group_is_one_change_as_in_ksqldb():
    """Without the record cache, ksqlDB (Kafka Streams since KIP-904) sends an update whose
    row stays in its group as one record, old and new together: one output row; a row that
    moves groups is two, the group it left first. Every aggregate over a table alike."""
    catalog = sp.Catalog()
    catalog.register("users", sp.read.from_callback("users", schema=USERS), primary_key="id")
    run = Run(sp.sql("CREATE TABLE t AS SELECT region, COUNT(*) AS n, SUM(score) AS total, "
                     "AVG(score) AS mean, COLLECT_LIST(score) AS scores FROM users GROUP BY region",
                     catalog=catalog, emit_changes="per_record"))
    run.feed({"ID": "u1", "REGION": "east", "SCORE": 10}, {"ID": "u2", "REGION": "east", "SCORE": 20})
    updated = run.feed({"ID": "u1", "REGION": "east", "SCORE": 30})
    assert values(updated, "REGION", "n", "total", "mean", "scores", "_change") == [
        ("east", 2, 50, 25.0, [20, 30], "update")]
    assert json.loads(updated["_old"][0]) == {"n": 2, "total": 30, "mean": 15.0, "scores": [10, 20]}
    run.restart()
    moved = run.feed({"ID": "u1", "REGION": "west", "SCORE": 30}, {"ID": "u2", "REGION": "east", "SCORE": 20})
    assert values(moved, "REGION", "n", "total", "mean", "scores", "_change") == [
        ("east", 1, 20, 20.0, [20], "update"), ("west", 1, 30, 30.0, [30], "insert"),
        ("east", 1, 20, 20.0, [20], "update")]  # u2 unchanged: still one change, as ksqlDB's


def test_session_grace_period_out_of_order_follows_kafka_streams_bound():
    """WINDOW SESSION (60 SECONDS, GRACE PERIOD 30 SECONDS): at stream time 100 s the bound is
    10 s. A session ending at 0 no longer merges; a record at exactly 10 s is not late (ksqlDB
    drops only a session ending before the bound), one at 9 s is."""
    run = table("CREATE TABLE visits AS SELECT id, COUNT(*) AS n FROM orders "
                "WINDOW SESSION (60 SECONDS, GRACE PERIOD 30 SECONDS) GROUP BY id",
                schema={"ID": "string", "TS": "timestamp"}, timestamp="ts")
    run.feed({"ID": "a", "TS": at(0)}, {"ID": "b", "TS": at(100)})
    out = run.feed({"ID": "a", "TS": at(10)}, {"ID": "a", "TS": at(9)})
    assert [(r["ID"], r["window_start"], r["window_end"], r["n"], r["_change"])
            for r in out.to_dict("records")] == [("a", at(10), at(10), 1, "update")]
