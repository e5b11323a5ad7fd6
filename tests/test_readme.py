"""Every Python block of the README runs, in order, in one namespace, as a new user would paste
them into one session: in an empty folder, with the default warehouse (``./warehouse``)."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import ops as sp
from tests.helpers import dead_letters

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, match.start()) + 2, match.group(1)) for match in BLOCK.finditer(text)]


def test_every_python_block_runs(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKESTREAM_WAREHOUSE", raising=False)
    namespace: dict = {}
    found = blocks()
    assert len(found) >= 6
    try:
        for line, code in found:
            try:
                exec(compile(code, f"README.md, the block at line {line}", "exec"), namespace)
            except Exception as exc:
                pytest.fail(f"README.md, the Python block at line {line} fails: "
                            f"{type(exc).__name__}: {exc}")
    finally:
        if "kafka" in namespace:  # the Kafka block's broker, even when a block failed
            namespace["kafka"].stop()
    # what the blocks did is real: the quick start's sums and the SQL state table are in Delta
    sums = namespace["pipeline"].read_sink(spark, "sums")
    assert sums["total"].tolist() == [1, 3, 1, 6]  # the last from the continuous-mode block
    assert namespace["report"].totals.batches == 1
    tickets = namespace["tickets"].read_sink(spark, "movie_tickets_sold")
    assert tickets[["title", "tickets_sold"]].values.tolist() == [["Aliens", 2], ["Heat", 1]]
    assert (tmp_path / "warehouse" / "sums_by_y" / "_state").is_dir()
    # the SQL block: an expression over aggregates, a pull query, a table over a table, a join
    pulled = sp.query(spark, "SELECT title, unit_price FROM priced")
    assert pulled.values.tolist() == [["HEAT", 6.0]]
    regions = namespace["regions"].read_sink(spark, "region_users")
    assert regions[["region", "users"]].values.tolist() == [["east", 0], ["west", 1]]
    visits = namespace["visits"].read_sink(spark, "visits_enriched")
    assert visits["users"].tolist()[0] == 1 and pd.isna(visits["users"].tolist()[1])
    totals = sorted(json.loads(value)["total"] for value in namespace["totals"])  # Kafka, exactly once
    assert totals == [1, 2, 4]
    letters = dead_letters(spark, namespace["per_user"], str(tmp_path / "warehouse"))
    assert letters["reason"].tolist() == ["field 'n' 'x' is not an integer; expected long"]
    ended = namespace["sessions"].read_sink(spark, "sessions")  # the timers example
    assert ended[["user", "total"]].values.tolist() == [["ann", 2]]
    stored = sp.read_state(spark, namespace["sessions"], "__global__")
    assert dict(zip(stored["key"], stored["value"])) == {"clicks": 3}
    # the migration example: refused, migrated, continued from the migrated state
    assert namespace["stopped"]
    assert namespace["migrated"].written == {"total": 1}
    assert namespace["v2"].read_sink(spark, "totals")["total"].tolist() == [1, 3, 13]
