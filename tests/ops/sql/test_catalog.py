"""Catalogs: the names SQL reads FROM live in objects, so several coexist in one process."""

import pytest

import ops as sp
from ops import SqlError
from ops.sql import DEFAULT_CATALOG

STATEMENT = "CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title"


def sales(name):
    return sp.read.from_callback(name, schema={"title": "string"})


def test_two_catalogs_resolve_the_same_name_to_their_own_stream():
    first, second = sp.Catalog(), sp.Catalog()
    first.register("Sales", sales("first_inbox"))
    second.register("sales", sales("second_inbox"))
    assert sp.sql(STATEMENT, catalog=first).source.name == "first_inbox"
    assert sp.sql(STATEMENT, catalog=second).source.name == "second_inbox"


def test_a_name_in_one_catalog_is_unknown_to_another_and_to_the_default():
    mine = sp.Catalog()
    mine.register("only_here", sales("inbox"))
    with pytest.raises(SqlError, match=r"FROM: no such stream or table only_here; registered: \[\]"):
        sp.sql(STATEMENT.replace("sales", "only_here"), catalog=sp.Catalog())
    assert "only_here" not in DEFAULT_CATALOG


def test_the_default_catalog_serves_register_and_sql():
    sp.register("default_sales_for_test", sales("default_inbox"))
    pipeline = sp.sql(STATEMENT.replace("sales", "default_sales_for_test"))
    assert pipeline.source.name == "default_inbox"


def test_streams_given_to_sql_come_before_the_catalog():
    catalog = sp.Catalog()
    catalog.register("sales", sales("catalog_inbox"))
    pipeline = sp.sql(STATEMENT, streams={"sales": sales("given_inbox")}, catalog=catalog)
    assert pipeline.source.name == "given_inbox"


def test_only_streams_can_be_registered():
    with pytest.raises(SqlError, match="expected a stream"):
        sp.Catalog().register("sales", "not a stream")
