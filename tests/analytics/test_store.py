"""The analytics store's background writer: it lingers before a commit (the pushes it records
are going out meanwhile), but a flush does not wait for the linger, and bursts go in one commit."""

import time

from deltalake import DeltaTable

from analytics.store import DELTAS_SCHEMA, BackgroundWriter
from state.lake import tables


def test_a_flush_writes_at_once_and_a_burst_is_one_commit(spark, tmp_path):
    path = str(tmp_path / "deltas")
    tables.ensure(spark, path, DELTAS_SCHEMA)
    created = DeltaTable(path).version()
    writer = BackgroundWriter(spark, {path: DELTAS_SCHEMA}, linger_seconds=30)
    try:
        for batch in range(1, 6):  # a burst, while the writer lingers on the first row
            writer.put(path, ("cpu", batch, "sub", "[]"))
        started = time.monotonic()
        assert writer.flush(timeout=20)
        assert time.monotonic() - started < 20  # not the 30 s linger
        table = DeltaTable(path)
        assert sorted(table.to_pandas()["batch_id"]) == [1, 2, 3, 4, 5]
        assert table.version() == created + 1  # the burst in one commit
    finally:
        writer.close()
