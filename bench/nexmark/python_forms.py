"""The Nexmark queries lakestream's SQL cannot say but its Python API can: each a function
of a :class:`Stream` (the generated stream's folder and catalog, the warehouse, how many
commits a batch reads) returning the pipelines to run, in order; the last one's result is
the answer.

q5, the hot items: the bids per auction per hopping window (10 s, every 2 s) in SQL, a
``FINAL`` table, so each closed window's rows are written once and together, in one commit of
its changelog; a map over that changelog keyed by the window keeps its auctions with the most
bids (Flink's join of the counts with their ``MAX`` per window). Keyed, so that one call sees
all of a window's rows in either mode (a stateless map in distributed mode sees a partition's);
its state, the window's most so far, is only ever set once: no row of a closed window comes
later.

q19, the 10 highest bids of each auction: a map keyed by auction keeps the auction's top
bids as its state (price, then arrival, as Flink's ``ROW_NUMBER() OVER (PARTITION BY auction
ORDER BY price DESC)`` ranks them, ties in arrival order) and emits the ranks a batch changed;
``as_table("auction", "rank_number")`` makes them a table whose row per rank is replaced as
bids displace one another. An auction's ranks only grow in number, so no row ever leaves.

>>> state = _ranked([], _bids_of({"price": [5, 9], "event_id": [1, 2]}), top=10)
>>> [(bid["price"], bid["event_id"]) for bid in state]
[(9, 2), (5, 1)]
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import ops as sp
from bench.nexmark.streams import StreamPaths

TOP_BIDS = 10
HOT_WINDOW = "WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 2 SECONDS, GRACE PERIOD 0 SECONDS)"
_BID = ("auction", "bidder", "price", "channel", "url", "dateTime", "extra", "event_id")


@dataclass(frozen=True)
class Stream:
    """What a Python form builds on: the stream's ``folder`` and ``catalog`` of it, the
    ``warehouse`` it runs in, and how many commits a batch reads (``None``: all there are)."""

    folder: str
    catalog: sp.Catalog
    warehouse: str
    max_versions: int | None = None


def hot_items(stream: Stream) -> list[sp.Pipeline]:
    """q5: per closed hopping window, the auctions with the most bids (``auction``, ``num``,
    ``window_start``)."""
    counts = sp.sql(f"CREATE TABLE q5_counts AS SELECT auction, WINDOWSTART AS window_ms, "
                    f"COUNT(*) AS num FROM bid "
                    f"{HOT_WINDOW} GROUP BY auction EMIT FINAL", catalog=stream.catalog,
                    warehouse=stream.warehouse)
    closed = sp.read.from_delta(counts.layout(stream.warehouse).table("q5_counts_changelog"),
                                key="window_ms", name="q5_counts")  # a key is a number or text
    hottest = closed.map(_hottest, state=0, name="hottest").write.to_delta("q5").named("q5")
    return [counts, hottest]


def _hottest(op, md, data: pd.DataFrame) -> pd.DataFrame:
    """A closed window's counts: the rows at the window's most."""
    most = max(sp.get(op, md), int(data["num"].max()))
    sp.set(op, md, most)
    return data.loc[data["num"] >= most, ["auction", "num", "window_start"]]


def top_bids(stream: Stream) -> list[sp.Pipeline]:
    """q19: a table of each auction's ``TOP_BIDS`` highest bids, keyed by auction and rank."""
    bids = sp.read.from_delta(StreamPaths(stream.folder).delta("bid"), key="auction", name="bid",
                              order_by=("event_id",), max_versions=stream.max_versions)
    ranked = bids.map(_top_bids, state=[], name="top_bids").as_table("auction", "rank_number",
                                                                    name="ranks")
    return [ranked.write.to_table("q19").named("q19")]


def _top_bids(op, md, data: pd.DataFrame) -> pd.DataFrame:
    """One auction's batch of bids: its new top bids kept, the ranks that changed returned."""
    before = sp.get(op, md)
    after = _ranked(before, _bids_of(data), TOP_BIDS)
    sp.set(op, md, after)
    changed = [dict(bid, rank_number=rank) for rank, bid in enumerate(after, start=1)
               if rank > len(before) or before[rank - 1]["event_id"] != bid["event_id"]]
    out = pd.DataFrame(changed, columns=[*_BID, "rank_number"])
    return out.assign(dateTime=pd.to_datetime(out["dateTime"], unit="ms", utc=True))


def _bids_of(data) -> list[dict]:
    """A batch's bids as JSON-ready dicts (instants in epoch milliseconds)."""
    frame = pd.DataFrame(data)
    if "dateTime" in frame:
        frame = frame.assign(dateTime=frame["dateTime"].astype("datetime64[ms, UTC]").astype("int64"))
    return [{key: (value.item() if hasattr(value, "item") else value) for key, value in row.items()}
            for row in frame.to_dict("records")]


def _ranked(kept: list[dict], new: list[dict], top: int) -> list[dict]:
    """The ``top`` highest of ``kept`` and ``new`` by price, the earlier bid first on a tie."""
    return sorted(kept + new, key=lambda bid: (-bid["price"], bid["event_id"]))[:top]
