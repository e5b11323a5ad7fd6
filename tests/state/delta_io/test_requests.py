"""What a commit asks of an object store (state.delta_io on the local S3 server, counted through
a proxy): no request that the answer is already known for, and exactly-once as before when
another writer's commits come in between."""

from urllib.parse import parse_qs, unquote, urlparse

import pandas as pd
import pytest

from state import delta_io
from state.delta_io import commits
from tests.objectstore.faulty_proxy import FaultyProxy

LONG = {"name": "x", "type": "long", "nullable": True, "metadata": {}}
LATER = commits._later  # what hands a log checkpoint to the background thread


@pytest.fixture
def store(s3, monkeypatch):
    """Every request of this process's delta-rs through a proxy that lists them (``seen``).
    Log checkpoints are not handed to the background thread: its requests would mix with the
    ones counted (the test of that hand-over makes it itself)."""
    proxy = FaultyProxy(s3.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setattr(commits, "_later", lambda path, current: None)
    delta_io.snapshots.clear()  # tables opened before reach the server directly
    yield proxy
    delta_io.snapshots.clear()  # and these reach the proxy, about to go
    proxy.down()


def kinds(seen: list[tuple[str, str]]) -> list[str]:
    """Each request as ``LIST whole log``, ``LIST log since`` (a version), ``LIST other`` (a
    probe for a folder), ``GET commit``, ``PUT commit``, ``GET _last_checkpoint``, ``PUT data``,
    ``HEAD commit``, …"""
    named = []
    for method, target in seen:
        where = urlparse(target)
        query = parse_qs(where.query)
        if "list-type" in query:
            whole = query.get("prefix", [""])[0].endswith("_delta_log/") and "delimiter" not in query
            named.append("LIST log since" if "start-after" in query else
                         "LIST whole log" if whole else "LIST other")
            continue
        name = unquote(where.path).rsplit("/", 1)[-1]
        what = ("_last_checkpoint" if name == "_last_checkpoint" else "commit" if name.endswith(".json")
                else "log checkpoint" if ".checkpoint." in name else "data")
        named.append(f"{method} {what}")
    return named


def counted(store: FaultyProxy, action, *args, **kwargs) -> list[str]:
    """The requests ``action(*args, **kwargs)`` made, as :func:`kinds` names them."""
    before = len(store.seen)
    action(*args, **kwargs)
    return kinds(store.seen[before:])


def append(path: str, value: int, txn: tuple[str, int] | None = None):
    return delta_io.append(pd.DataFrame({"x": [value]}), path, txn=txn,
                           create=delta_io.Creation((LONG,)))


def test_log_checkpoints_and_the_log_cleanup_are_written_after_the_commit_returns(
        store, s3_warehouse, monkeypatch):
    """delta-rs looked for expired log files after each commit by listing the whole log (which
    grows with every commit), and wrote a log checkpoint every tenth version (20-odd requests)
    before the commit's call returned. On S3 both are left to a background thread, once per
    log checkpoint: no append waits for them."""
    handed, later = [], LATER
    monkeypatch.setattr(commits, "_later",
                        lambda path, current: handed.append((path, current, int(current.version()))))
    path = f"{s3_warehouse}/t"
    append(path, 0)  # creates the table: version 0
    for version in range(1, 22):
        requests = counted(store, append, path, version)
        assert "LIST whole log" not in requests and "PUT log checkpoint" not in requests, requests
    offset = commits._offset(path, 10)  # each table checkpoints at versions of its own
    assert [version for _, _, version in handed] == [v for v in range(1, 22) if (v + 1 + offset) % 10 == 0]
    monkeypatch.setattr(commits, "_later", later)
    delta_io.snapshots.forget(path)  # the snapshots handed are not held any more: nothing done
    assert counted(store, lambda: (later(*handed[0][:2]), commits.settled())) == []
    commits.settled()
    delta_io.table(path)  # held again, at version 21: its log checkpoint is written
    before = len(store.seen)
    later(path, delta_io.snapshots.get(path))
    commits.settled()
    background = kinds(store.seen[before:])
    assert background.count("PUT log checkpoint") == 1 and "PUT _last_checkpoint" in background
    assert background.count("LIST whole log") == 1  # the cleanup's
    written = [target for method, target in store.seen[before:] if ".checkpoint." in target]
    assert written[0].split("?")[0].endswith("/_delta_log/00000000000000000021.checkpoint.parquet")


def before_the_commit(requests: list[str]) -> list[str]:
    """The requests an append made before putting its commit file."""
    return requests[:requests.index("PUT commit")]


def test_an_idempotent_append_after_this_process_committed_reads_no_commit_to_check_its_txn(
        store, s3_warehouse):
    """delta-rs tells a txn's latest version by reading every commit since the last log
    checkpoint; after this process's own commits the answer is known without it."""
    path = f"{s3_warehouse}/t"
    assert append(path, 0, txn=("sink", 0))  # creates the table
    first = counted(store, lambda: append(path, 1, txn=("sink", 1)))
    assert before_the_commit(first).count("GET commit") >= 1  # delta-rs read the log
    for batch in range(2, 8):
        requests = counted(store, append, path, batch, txn=("sink", batch))
        assert "GET commit" not in before_the_commit(requests), (batch, requests)
    assert append(path, 7, txn=("sink", 7)) is False  # seen: skipped, as before
    assert sorted(delta_io.table(path).to_pandas()["x"]) == list(range(8))


def test_a_txn_another_writer_committed_since_is_seen_and_skipped(store, s3_warehouse):
    """What this process knows of a txn holds only up to the commits it made: a commit by
    another writer (here with the same app id: a second run doing the same batch) is read, and
    the batch it wrote is not written twice."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    path = f"{s3_warehouse}/t"
    for batch in range(3):
        assert append(path, batch, txn=("sink", batch))
    other = DeltaTable(path.replace("s3a://", "s3://"))
    write_deltalake(other, pa.table({"x": pa.array([3], pa.int64())}), mode="append",
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id="sink", version=3)]))
    assert append(path, 3, txn=("sink", 3)) is False  # the other writer's batch 3: skipped
    assert append(path, 4, txn=("sink", 4)) is True
    write_deltalake(other, pa.table({"x": pa.array([-1], pa.int64())}), mode="append")  # no txn
    assert append(path, 4, txn=("sink", 4)) is False
    assert append(path, 5, txn=("sink", 5)) is True
    assert sorted(delta_io.table(path).to_pandas()["x"]) == [-1, 0, 1, 2, 3, 4, 5]


def test_an_append_after_this_process_own_commit_does_not_bring_the_table_up_to_date_first(
        store, s3_warehouse, monkeypatch):
    """Its commit finds a later commit itself: the LIST it makes before the commit's
    conditional PUT is delta-rs's, and nothing before that asks the store of the log."""
    monkeypatch.setenv(delta_io.RECHECK_SETTING, "3600")  # the table made again: not looked at
    path = f"{s3_warehouse}/t"
    assert append(path, 0, txn=("sink", 0))
    assert append(path, 1, txn=("sink", 1))  # opens the table, checks the txn once
    for batch in range(2, 6):
        requests = counted(store, append, path, batch, txn=("sink", batch))
        assert before_the_commit(requests) == ["PUT data", "LIST log since"], requests
    assert delta_io.latest_version(path) == 5


def test_rows_and_columns_another_writer_committed_since_this_process_last_did_are_kept(
        store, s3_warehouse):
    """Appends on the snapshot at this process's last commit, each after another writer's
    commit: a column added, which delta-rs refuses the append for (the metadata changed), so
    it is made again on the table as it is, the new column null; rows added, which the append
    is committed after."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from deltalake.schema import Field, PrimitiveType

    path = f"{s3_warehouse}/t"
    for value in range(2):
        assert append(path, value)
    other = DeltaTable(path.replace("s3a://", "s3://"))
    other.alter.add_columns([Field("y", PrimitiveType("long"), nullable=True)])  # version 2
    refused = counted(store, lambda: delta_io.append(pd.DataFrame({"x": [2]}), path, fill_missing=True))
    assert refused.count("PUT data") == 2 and refused.count("PUT commit") == 1, refused  # 3
    other.update_incremental()
    write_deltalake(other, pa.table({"x": pa.array([10], pa.int64()), "y": pa.array([1], pa.int64())}),
                    mode="append")  # 4
    after = counted(store, lambda: delta_io.append(pd.DataFrame({"x": [3]}), path, fill_missing=True))
    assert after.count("PUT data") == 1 and after.count("PUT commit") == 1, after  # 5
    rows = delta_io.table(path).to_pandas().sort_values("x")
    assert rows["x"].tolist() == [0, 1, 2, 3, 10]
    assert rows["y"].isna().tolist() == [True, True, True, True, False]
    assert delta_io.latest_version(path) == 5


def test_a_publish_to_an_inbox_this_process_wrote_last_asks_only_for_its_commit(
        spark, store, s3_warehouse, monkeypatch):
    """A publish made sure the inbox was there and told its version after, each bringing it
    up to date (a LIST of its log and a GET of _last_checkpoint, twice): a table this process
    holds exists, and its commit gives the version."""
    import ops as sp

    monkeypatch.setenv(delta_io.RECHECK_SETTING, "3600")
    job = (sp.read.from_callback("events", key="k", schema={"k": "long"})
           .write.to_delta("out")).named("publishes")
    for n in range(2):
        assert job.publish(spark, [{"k": n}], s3_warehouse).version == n + 1  # 0 made the inbox
    reports = []
    requests = counted(store, lambda: reports.append(job.publish(spark, [{"k": 2}], s3_warehouse)))
    assert requests == ["PUT data", "LIST log since", "PUT commit",  # the commit: conditional
                        "LIST log since", "GET commit", "GET commit"], requests  # then read back
    assert reports[0].version == 3 and reports[0].accepted == 1
    again = job.publish(spark, [{"k": 3}], s3_warehouse, dedupe_id="x")
    assert job.publish(spark, [{"k": 3}], s3_warehouse, dedupe_id="x").version == again.version == 4
    assert sorted(delta_io.table(job.layout(s3_warehouse).inbox("events")).to_pandas()["seq"]) == [0] * 4


def test_a_read_of_commits_this_process_holds_asks_for_their_json_and_their_files_only(
        spark, s3, s3_warehouse, monkeypatch):
    """The rows of commits up to a version the snapshot held is at are read with its columns,
    without bringing the table up to date (a LIST of its log and a GET of _last_checkpoint on
    S3), and each file with its size from the log: its ranged reads, no HEAD, no LIST. Counted
    by the calls to delta-rs and from the server's access log, not through the proxy: the
    by-hand reads of commits and files (pyarrow over delta-rs's store) hold the GIL while they
    wait for the store, and a proxy in this process then never answers."""
    import time

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from ops.sources import delta_inserts

    path = f"{s3_warehouse}/t"
    for value in range(3):
        assert append(path, value)
    updates = []
    update = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental",
                        lambda table: updates.append(table) or update(table))
    log = s3.folder / "server.log"
    time.sleep(0.5)  # the server writes its log line after its answer: the appends' are in
    before = len(log.read_text().splitlines())
    assert delta_inserts.inserted_rows(spark, path, 1, 2)["x"].tolist() == [1, 2]
    assert updates == []
    time.sleep(0.5)
    table = path.removeprefix("s3a://").split("/", 1)[1]
    asked = [line for line in log.read_text().splitlines()[before:] if table in line]
    files = [line for line in asked if ".parquet" in line]
    assert len(files) == 4 and all('"GET ' in line for line in files), asked  # 2 ranged reads each
    other = DeltaTable(path.replace("s3a://", "s3://"))
    write_deltalake(other, pa.table({"x": pa.array([3], pa.int64())}), mode="append")
    assert delta_inserts.inserted_rows(spark, path, 1, 3)["x"].tolist() == [1, 2, 3]
    assert len(updates) == 1  # version 3 is past the one held: brought up to date first
