"""Upserts by delta-rs's MERGE (state.delta_io.merge) on S3: the newest row per key across
replays and racing writers, and what it leaves to Spark."""

import textwrap

import pandas as pd

from state import delta_io
from state.lake import direct
from state.lake.direct import NewTable, Outcome
from tests.state.delta_io.racing import racing

_UPSERTER = textwrap.dedent("""
    import sys
    import pandas as pd
    from state import delta_io
    from state.lake import direct

    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    how = delta_io.Upsert(("k",), version="v", change="c")
    for i in range(count):
        rows = pd.DataFrame({"k": [writer, "shared"], "n": [i, i], "v": [i, i],
                             "c": ["update", "update"]})
        assert direct.upsert(rows, path, how, create=direct.NewTable()) is direct.Outcome.COMMITTED
""")


def test_upserts_keep_the_newest_row_per_key_across_replays_and_racing_writers(s3_warehouse):
    """The state table's merge by delta-rs: a replayed or older row changes nothing, a delete
    removes its key (and inserts none), and two processes merging at once lose no commit."""
    path = f"{s3_warehouse}/latest"
    how = delta_io.Upsert(("k",), version="v", change="c")

    def merged(k, n, v, c):
        rows = pd.DataFrame({"k": k, "n": n, "v": v, "c": c})
        assert direct.upsert(rows, path, how, create=NewTable()) is Outcome.COMMITTED
        table = delta_io.table(path).to_pandas().sort_values("k")
        return list(zip(table["k"], table["n"], table["v"]))

    assert merged(["a", "b"], [1, 2], [1, 1], ["insert"] * 2) == [("a", 1, 1), ("b", 2, 1)]
    assert merged(["a", "b", "c"], [5, None, None], [2, 2, 2], ["update", "delete", "delete"]) == [
        ("a", 5, 2)]
    assert merged(["a", "b"], [1, 2], [1, 1], ["insert"] * 2) == [("a", 5, 2), ("b", 2, 1)]
    assert merged(["a"], [5], [2], ["update"]) == [("a", 5, 2), ("b", 2, 1)]  # a replay

    raced = f"{s3_warehouse}/raced"
    racing(_UPSERTER, raced, ("x", "y"), 8)
    table = delta_io.table(raced).to_pandas().sort_values("k")
    assert list(zip(table["k"], table["n"])) == [("shared", 7), ("x", 7), ("y", 7)]
    assert delta_io.latest_version(raced) == 16  # the creation, then one commit per merge


def test_an_upsert_into_a_table_with_the_feed_on_is_left_to_spark(s3_warehouse):
    path = f"{s3_warehouse}/fed"
    delta_io.create(path, delta_io.Creation(
        ({"name": "k", "type": "string", "nullable": True, "metadata": {}},
         {"name": "v", "type": "long", "nullable": True, "metadata": {}}),
        properties=(("delta.enableChangeDataFeed", "true"),)))
    rows = pd.DataFrame({"k": ["a"], "v": [1], "c": ["insert"]})
    assert direct.upsert(rows, path, delta_io.Upsert(("k",), version="v", change="c")) is None
    assert delta_io.latest_version(path) == 0
