"""LiveTable over a real changelog (Delta, written by delta-rs): the table it holds is every key's
last change, whether the batches are merged as they come, later, or after many unmerged."""

import random

import pandas as pd
import pyarrow as pa
from deltalake import write_deltalake

from analytics.live import MERGE_AFTER, LiveTable
from ops import BATCH_COLUMN, CHANGE_COLUMN, ROW_COLUMN


def _commit(path, rows):
    """One changelog commit of ``rows`` (sym, cpu, batch, change, row)."""
    frame = pd.DataFrame(rows, columns=["sym", "cpu", BATCH_COLUMN, CHANGE_COLUMN, ROW_COLUMN])
    write_deltalake(path, pa.Table.from_pandas(frame, preserve_index=False), mode="append")


def _table(live):
    frame = live.frame()
    return {row["sym"]: (row["cpu"], row[BATCH_COLUMN]) for row in frame.to_dict("records")}


def test_the_table_is_each_keys_last_change_however_long_merging_waits(tmp_path):
    path = str(tmp_path / "changelog")
    rng = random.Random(7)
    oracle = {}
    _commit(path, [("s0", 0.0, 1, "insert", 0)])
    oracle["s0"] = (0.0, 1)
    live = LiveTable(path, ("sym",))
    assert _table(live) == oracle
    batches = MERGE_AFTER + 6  # more than a table holds unmerged: a merge happens on the way
    for batch in range(2, batches + 2):
        rows = []
        for row in range(4):
            sym = f"s{rng.randrange(6)}"
            if sym in oracle and rng.random() < 0.3:
                rows.append((sym, None, batch, "delete", row))
                oracle.pop(sym)
            else:
                cpu = float(rng.randrange(100))
                rows.append((sym, cpu, batch, "update" if sym in oracle else "insert", row))
                oracle[sym] = (cpu, batch)
        rows.reverse()  # the file's order is not the batch's: _row is
        _commit(path, rows)
        followed = live.follow()
        assert [b for b, _ in followed.batches] == [batch]
        changes = followed.batches[0][1]
        assert ROW_COLUMN not in changes  # hidden from subscribers
        assert list(changes["sym"]) == [r[0] for r in reversed(rows)]  # in _row order
        if batch % 9 == 0:  # a snapshot now and then: merged up to here
            assert _table(live) == oracle
    assert len(live._pending) < MERGE_AFTER  # bounded while nobody asked for the table
    assert _table(live) == oracle
    assert live.batch == batches + 1


def test_a_commit_of_two_batches_is_split_in_batch_then_row_order(tmp_path):
    path = str(tmp_path / "changelog")
    _commit(path, [("a", 1.0, 1, "insert", 0)])
    live = LiveTable(path, ("sym",))
    _commit(path, [("b", 3.0, 3, "insert", 0), ("a", 2.0, 2, "update", 1), ("c", 9.0, 2, "insert", 0),
                   ("a", None, 3, "delete", 1)])
    followed = live.follow()
    assert [(b, list(c["sym"])) for b, c in followed.batches] == [(2, ["c", "a"]), (3, ["b", "a"])]
    assert _table(live) == {"b": (3.0, 3), "c": (9.0, 2)}
