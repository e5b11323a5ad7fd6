"""An aggregate's batch partial, on pandas alone: COUNT(DISTINCT …)'s values per group."""

import pandas as pd

import ops as sp


def test_count_distinct_keeps_each_groups_distinct_values_first_seen_first_without_nulls():
    frame = pd.DataFrame({
        "channel": ["a", "b", "a", None, "a", "b", "c"],
        "bidder": pd.array([3, 1, 3, 9, 2, None, None], dtype="Int64"),
        "at": pd.to_datetime(["2026-01-01 00:00:01", "2026-01-01 00:00:02", None,
                              "2026-01-01 00:00:03", "2026-01-01 00:00:01",
                              "2026-01-01 00:00:02", "2026-01-01 00:00:04"], utc=True),
    }, index=[10, 11, 12, 13, 14, 15, 16])  # an index of its own, as a batch's slice has
    groups = frame.groupby("channel", sort=False)
    bidders = sp.count_distinct("bidder").partial(groups)
    assert bidders.to_dict() == {"a": [3, 2], "b": [1], "c": []}  # the null key's row left out
    assert all(type(v) is int for values in bidders for v in values)  # JSON-ready
    instants = sp.count_distinct("at").partial(groups)
    second = pd.Timestamp("2026-01-01 00:00:01", tz="UTC").value
    assert instants["a"] == [second] and len(instants["b"]) == 1 and len(instants["c"]) == 1
