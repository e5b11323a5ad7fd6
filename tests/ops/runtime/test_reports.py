"""Batch reports: ``keys`` counts the distinct keys of the keyed operators, whatever their kind."""

import ops as sp
from ops.testing import run_records

RECORDS = [{"user": u, "page": p} for u, p in
           [("ann", "a"), ("bob", "a"), ("ann", "b"), ("cy", "c"), ("ann", "a")]]


def keys_of(pipeline, spark):
    return [batch.keys for batch in run_records(pipeline, RECORDS, spark=spark).reports[-1].batches]


def test_an_aggregation_reports_its_groups(spark):
    pages = (sp.read.from_callback("in", schema={"user": "string", "page": "string"})
             .group_by("page").agg(views=sp.count()).write.to_table("views")).named("pages")
    assert keys_of(pages, spark) == [3]


def test_a_keyed_map_reports_the_stream_keys_and_a_stateless_one_none(spark):
    def seen(op, md, data):
        sp.set(op, md, len(data))
        return data

    keyed = sp.read.from_callback("in", key="user", schema={"user": "string", "page": "string"})
    assert keys_of(keyed.map(seen, state=0).write.to_delta("out").named("users"), spark) == [3]
    assert keys_of(keyed.map(lambda data: data).write.to_delta("out").named("plain"), spark) == [0]
