"""A batch's shape never stops a pipeline: whichever of a statement's sources a batch holds
rows of (one side of a join only, the other only, both), every operator gets and gives the
columns its definition declares. Run for real, in driver and distributed mode, across runs."""

import pytest

import ops as sp

TEST = {"ID": "long", "NAME": "string", "VALUE": "long"}
TEST_TABLE = {"ID": "long", "F1": "string", "F2": "long"}
JOIN = ("CREATE STREAM j AS SELECT t.id, name, value, f1, f2 FROM test t "
        "LEFT JOIN test_table tt ON t.id = tt.id")


def catalog():
    found = sp.Catalog()
    found.register("test", sp.read.from_callback("test", schema=TEST))
    found.register("test_table", sp.read.from_callback("test_table", schema=TEST_TABLE),
                   primary_key="ID")
    return found


@pytest.mark.parametrize("mode", ["driver", "distributed"])
@pytest.mark.parametrize("first", ["test", "test_table"])
def test_a_stream_table_join_runs_on_through_batches_of_table_updates_only(spark, tmp_path, mode,
                                                                           first):
    """The issue's report: a batch holding only the table's rows (first or later) stopped the
    join's SELECT for good (its stream columns were missing)."""
    pipeline = sp.sql(JOIN, catalog=catalog()).named(f"shapes_{mode}").with_mode(mode)
    warehouse = str(tmp_path)
    rows = {"test": [{"ID": 1, "NAME": "a", "VALUE": 3}],
            "test_table": [{"ID": 1, "F1": "x", "F2": 2}]}
    order = [first, "test" if first == "test_table" else "test_table", "test_table", "test"]
    for number, source in enumerate(order):
        pipeline.publish(spark, [dict(row, VALUE=number) if source == "test" else row
                                 for row in rows[source]], warehouse, source=source)
        pipeline.run_once(spark, warehouse)
    out = pipeline.read_sink(spark, "j", warehouse)
    assert list(out.columns[:5]) == ["ID", "NAME", "VALUE", "F1", "F2"]
    seen = [(r.ID, r.NAME, r.VALUE, r.F1 if isinstance(r.F1, str) else None)
            for r in out.itertuples()]
    # the stream's rows, each with the table's row as it stood when it came
    assert seen == ([(1, "a", 1, "x"), (1, "a", 3, "x")] if first == "test_table"
                    else [(1, "a", 0, None), (1, "a", 3, "x")])


def test_a_qualified_star_stands_for_that_sides_columns():
    found = catalog()
    assert sp.sql("CREATE STREAM s AS SELECT t.* FROM test t", catalog=found) \
        .stream.operators[-1].fn.__self__.names == ("ID", "NAME", "VALUE")
    joined = sp.sql("CREATE STREAM s2 AS SELECT t.*, tt.f1 FROM test t "
                    "LEFT JOIN test_table tt ON t.id = tt.id", catalog=found)
    assert joined.stream.operators[-1].fn.__self__.names == ("ID", "NAME", "VALUE", "F1")
    with pytest.raises(sp.SqlError, match=r"no source x in this query \(it reads test\)"):
        sp.sql("CREATE STREAM s3 AS SELECT x.* FROM test t", catalog=found)
    with pytest.raises(sp.SqlError, match="SELECT \\* is not supported in a table query"):
        sp.sql("CREATE TABLE s4 AS SELECT t.*, COUNT(*) AS n FROM test t GROUP BY id",
               catalog=found)
