"""What a commit asks of an object store (state.delta_io on the local S3 server, counted through
a proxy): no request that the answer is already known for, and exactly-once as before when
another writer's commits come in between."""

from urllib.parse import parse_qs, unquote, urlparse

import pandas as pd
import pytest

from state import delta_io
from tests.objectstore.faulty_proxy import FaultyProxy

LONG = {"name": "x", "type": "long", "nullable": True, "metadata": {}}


@pytest.fixture
def store(s3, monkeypatch):
    """Every request of this process's delta-rs through a proxy that lists them (``seen``)."""
    proxy = FaultyProxy(s3.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
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


def counted(store: FaultyProxy, action) -> list[str]:
    """The requests ``action()`` made, as :func:`kinds` names them."""
    before = len(store.seen)
    action()
    return kinds(store.seen[before:])


def append(path: str, value: int, txn: tuple[str, int] | None = None):
    return delta_io.append(pd.DataFrame({"x": [value]}), path, txn=txn,
                           create=delta_io.Creation((LONG,)))


def test_a_commit_lists_the_whole_log_only_at_every_tenth_version(store, s3_warehouse):
    """delta-rs looks for expired log files after each commit by listing the whole log, which
    grows with every commit: here only at every tenth version (the files go the same)."""
    path = f"{s3_warehouse}/t"
    append(path, 0)  # creates the table: version 0
    whole = {}
    for version in range(1, 22):
        whole[version] = counted(store, lambda: append(path, version)).count("LIST whole log")
    assert delta_io.latest_version(path) == 21
    assert [version for version, lists in whole.items() if lists] == [10, 20], whole
