"""Every Python block of the README and of the docs site's pages runs, as a new user would paste
a page's blocks into one session: each document (the README, then the pages in the order of
``docs/mkdocs.yml``'s nav) in a namespace of its own, its blocks in order, in an empty folder of
its own with the default warehouse (``./warehouse``).

A block fenced as ``python`` runs; a block that must not (a fragment, printed output) is fenced
with another language (``text``, ``bash``, ``sql``, ``yaml``). What the blocks did is then checked
against the tables they wrote (``CHECKS``)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

import ops as sp
from tests.helpers import dead_letters

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "docs" / "mkdocs.yml"
PAGES = ROOT / "docs" / "pages"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def nav_pages(nav: list) -> list[str]:
    """The pages of the nav, in order (``Title: path`` entries and sections of them)."""
    found: list[str] = []
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            if isinstance(value, list):
                found += nav_pages(value)
            elif isinstance(value, str) and value.endswith(".md"):
                found.append(value)
    return found


def config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def documents() -> list[str]:
    """The README, then every page of the nav (relative to ``docs/pages``)."""
    return ["README.md", *nav_pages(config()["nav"])]


def path_of(document: str) -> Path:
    return ROOT / document if document == "README.md" else PAGES / document


def blocks(document: str) -> list[tuple[int, str]]:
    text = path_of(document).read_text()
    return [(text.count("\n", 0, match.start()) + 2, match.group(1)) for match in BLOCK.finditer(text)]


# What each document's blocks must have done; ``folder`` is the document's working folder.
Check = Callable[..., None]


def check_readme(spark, namespace: dict, folder: Path) -> None:
    # the quick start: its sums are in Delta, its state in the default warehouse
    sums = namespace["pipeline"].read_sink(spark, "sums")
    assert sums["total"].tolist() == [1, 3, 1]
    assert (folder / "warehouse" / "sums_by_y" / "_state").is_dir()


def check_pipelines(spark, namespace: dict, folder: Path) -> None:
    sums = namespace["pipeline"].read_sink(spark, "sums")
    assert sums["total"].tolist() == [1, 3, 1, 6]  # the last from the continuous-mode block
    assert namespace["report"].totals.batches == 1
    assert (folder / "warehouse" / "sums_by_y" / "_state").is_dir()


def check_kafka(spark, namespace: dict, folder: Path) -> None:
    totals = sorted(json.loads(value)["total"] for value in namespace["totals"])  # exactly once
    assert totals == [1, 2, 4]
    letters = dead_letters(spark, namespace["per_user"], str(folder / "warehouse"))
    assert letters["reason"].tolist() == ["field 'n' 'x' is not an integer; expected long"]
    per_item = namespace["per_item"].read_sink(spark, "per_item", str(folder / "warehouse"))
    assert sorted(zip(per_item["item"], per_item["qty"])) == [("cake", 1), ("tea", 2)]  # from Avro


def check_state_tables(spark, namespace: dict, folder: Path) -> None:
    tickets = namespace["tickets"].read_sink(spark, "movie_tickets_sold")
    assert tickets[["title", "tickets_sold"]].values.tolist() == [["Aliens", 2], ["Heat", 1]]
    # the SQL block: an expression over aggregates, a pull query, a table over a table, a join
    pulled = sp.query(spark, "SELECT title, unit_price FROM priced")
    assert pulled.values.tolist() == [["HEAT", 6.0]]
    regions = namespace["regions"].read_sink(spark, "region_users")
    assert regions[["region", "users"]].values.tolist() == [["east", 0], ["west", 1]]
    visits = namespace["visits"].read_sink(spark, "visits_enriched")
    assert visits["users"].tolist()[0] == 1 and pd.isna(visits["users"].tolist()[1])


def check_state_engine(spark, namespace: dict, folder: Path) -> None:
    ended = namespace["sessions"].read_sink(spark, "sessions")  # the timers example
    assert ended[["user", "total"]].values.tolist() == [["ann", 2]]
    stored = sp.read_state(spark, namespace["sessions"], "__global__")
    assert dict(zip(stored["key"], stored["value"])) == {"clicks": 3}


def check_changing(spark, namespace: dict, folder: Path) -> None:
    # the migration example: refused, migrated, continued from the migrated state
    assert namespace["stopped"]
    assert namespace["migrated"].written == {"total": 1}
    assert namespace["v2"].read_sink(spark, "totals")["total"].tolist() == [1, 3, 13]


def check_metrics(spark, namespace: dict, folder: Path) -> None:
    # the scrape after the run: two records in (one a dead letter), a batch and a checkpoint
    scraped = namespace["scraped"]
    for line in ('lakestream_rows_in_total{pipeline="metered"} 2.0',
                 'lakestream_dead_letters_total{pipeline="metered"} 1.0',
                 'lakestream_batches_total{mode="driver",pipeline="metered"} 1.0',
                 'lakestream_checkpoint_seconds_count{pipeline="metered"} 1.0'):
        assert line in scraped.splitlines(), line


def check_spark_processors(spark, namespace: dict, folder: Path) -> None:
    # the ported processor: its rows, and its variables read back by key
    latest = namespace["latest"]
    assert latest.read_sink(spark, "latest")[["sensor", "n", "last"]].values.tolist() == \
        [["s1", 2, 2.5], ["s2", 1, 4.0], ["s1", 3, 3.0]]
    stored = sp.read_state(spark, latest, "LastTwo.count")
    assert dict(zip(stored["key"], stored["value"]))["s1"] == (3,)
    recent = sp.read_state(spark, latest, "LastTwo.recent")
    assert recent[recent["key"] == "s1"]["value"].tolist() == [(2.5,), (3.0,)]
    assert namespace["recent"] == [('"s1"', 2.5), ('"s1"', 3.0), ('"s2"', 4.0)]  # by SQL
    assert namespace["tester"].state()["s1"] == {"count": (3,), "recent": [(2.5,), (3.0,)]}
    # the event-time session: u1's fired once the watermark passed its timer, u2's is open
    ended = namespace["sessions"].read_sink(spark, "sessions")
    assert ended[["user", "spent"]].values.tolist() == [["u1", 7.5]]
    assert str(ended["ended"].iloc[0]) == "2026-01-01 00:00:50"  # UTC, as Spark reads it


CHECKS: dict[str, Check] = {
    "README.md": check_readme,
    "guides/pipelines.md": check_pipelines,
    "guides/kafka.md": check_kafka,
    "guides/state-tables.md": check_state_tables,
    "concepts/state-engine.md": check_state_engine,
    "guides/changing-pipelines.md": check_changing,
    "guides/metrics.md": check_metrics,
    "guides/spark-processors.md": check_spark_processors,
}


def test_the_documents_and_their_checks():
    """Every page of the nav exists, every check names a document, and the pages run what they
    did in the README before the split (no block was lost on the way)."""
    found = documents()
    assert all(path_of(document).is_file() for document in found), found
    assert set(CHECKS) <= set(found)
    # the README's quick start, and the 13 blocks it had before its reference moved to the pages
    assert sum(len(blocks(document)) for document in found) >= 14
    for document in found:
        for line, code in blocks(document):
            ast.parse(code, f"{document}, the block at line {line}")


def test_the_api_reference_covers_every_public_name():
    """``docs/pages/reference/ops.md`` documents exactly ``ops.__all__`` (one ``::: ops.name``
    each), and the analytics and Dagster pages list exactly their packages' ``__all__``."""
    import analytics
    import assets

    def members(page: str, prefix: str) -> set[str]:
        text = (PAGES / "reference" / page).read_text()
        named = set(re.findall(rf"^::: {prefix}\.(\w+)$", text, re.M))
        listed = set(re.findall(r"^        - (\w+)$", text, re.M))
        return named | listed

    assert members("ops.md", "ops") - {"readers"} == set(sp.__all__)
    assert members("analytics.md", "analytics") == set(analytics.__all__)
    assert members("dagster.md", "assets") == set(assets.__all__)


@pytest.mark.parametrize("document", [document for document in documents() if blocks(document)])
def test_every_python_block_runs(document, spark, tmp_path, monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("LAKESTREAM_WAREHOUSE", raising=False)
    namespace: dict = {}
    try:
        for line, code in blocks(document):
            try:
                exec(compile(code, f"{document}, the block at line {line}", "exec"), namespace)
            except Exception as exc:
                pytest.fail(f"{document}, the Python block at line {line} fails: "
                            f"{type(exc).__name__}: {exc}")
    finally:
        if "kafka" in namespace:  # the Kafka block's broker, even when a block failed
            namespace["kafka"].stop()
    if document in CHECKS:
        CHECKS[document](spark, namespace, folder)
