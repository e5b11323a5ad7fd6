"""The Nexmark queries q0–q22 in lakestream: each one's statements (``sp.sql``, chained where
one reads the table or stream another makes), or, where neither SQL nor the Python API can say
it, what is missing.

The Flink text of each query is in nexmark/nexmark (``nexmark-flink/src/main/resources/
queries``); each form here says what it changed and why. Three rewrites recur:

- Flink's regular join of two unbounded streams is a stream–stream join ``WITHIN 1 DAY``: the
  same rows for any input spanning less than a day (a generated run spans seconds), and state
  that expires where Flink's grows without end;
- ``DATE_FORMAT(t, 'yyyy-MM-dd')`` is DuckDB's ``STRFTIME(t, '%Y-%m-%d')``, Flink's
  ``SPLIT_INDEX`` (0-based) is ``SPLIT_PART`` (1-based), the ``count_char`` UDF is
  ``LENGTH(x) - LENGTH(REPLACE(x, 'c', ''))``;
- a window that Flink closes at the end of a bounded input closes here when stream time passes
  its end (``GRACE PERIOD 0``): the windows still open after the last event are not emitted
  (the oracle says the same).

>>> expressed = [query.name for query in QUERIES if query.expressed]
>>> len(QUERIES), len(expressed)
(23, 21)
>>> [query.name for query in QUERIES if not query.expressed]
['q6', 'q12']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ops as sp
from bench.nexmark.python_forms import Stream, hot_items, top_bids

#: the gap of q11's sessions and the size of q7's, q8's windows, as Nexmark sets them
WINDOW_SECONDS = 10


@dataclass(frozen=True)
class Query:
    """One Nexmark query: ``statements`` run in order, the last one's result is the answer
    (``result`` names it: a stream's rows, or a table's current rows); ``form`` says how it is
    expressed; ``missing`` what lakestream lacks when it is not (``statements`` empty)."""

    name: str
    what: str
    statements: tuple[str, ...] = ()
    form: str = "sql"
    missing: str = ""
    #: the Python API's form, where SQL has none: the pipelines to run, in order
    #: (``bench/nexmark/python_forms.py``)
    python: Callable[[Stream], list[sp.Pipeline]] | None = None

    @property
    def expressed(self) -> bool:
        """Whether lakestream can run the query, in SQL or in Python."""
        return bool(self.statements) or self.python is not None

    @property
    def result(self) -> str:
        """The name of the stream or table the last statement (or pipeline) creates."""
        return self.statements[-1].split()[2] if self.statements else self.name


def _within(left: str, right: str, on: str, select: str, where: str, name: str) -> str:
    """A stream–stream join standing for Flink's regular join (see the module's docstring)."""
    return (f"CREATE STREAM {name} AS SELECT {select} FROM {left} JOIN {right} WITHIN 1 DAY "
            f"ON {on} WHERE {where}")


_Q4_BIDS = _within("auction a", "bid b", "a.id = b.auction",
                   "a.id AS id, a.category AS category, b.price AS price",
                   "b.dateTime BETWEEN a.dateTime AND a.expires", "q4_bids")
_Q9_BIDS = _within("auction a", "bid b", "a.id = b.auction",
                   "a.id AS id, a.seller AS seller, a.category AS category, b.bidder AS bidder, "
                   "b.price AS price, b.dateTime AS bid_dateTime",
                   "b.dateTime BETWEEN a.dateTime AND a.expires", "q9_bids")
_RANKS = {"rank1": "price < 10000", "rank2": "price >= 10000 AND price < 1000000",
          "rank3": "price >= 1000000"}
_DAY = "STRFTIME(dateTime, '%Y-%m-%d')"


def _ranked(what: str, counted: str) -> str:
    """q16's and q17's per-rank counts: ``COUNT(counted) FILTER (WHERE <rank>)`` for each."""
    return ", ".join(f"{counted} FILTER (WHERE {rule}) AS {rank}_{what}"
                     for rank, rule in _RANKS.items())


QUERIES: tuple[Query, ...] = (
    Query("q0", "pass-through: every bid", (
        "CREATE STREAM q0 AS SELECT auction, bidder, price, dateTime, extra FROM bid",)),
    Query("q1", "currency conversion: each bid's price in euros", (
        "CREATE STREAM q1 AS SELECT auction, bidder, 0.908 * price AS price, dateTime, extra "
        "FROM bid",)),
    Query("q2", "selection: the bids on a few auctions", (
        "CREATE STREAM q2 AS SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",)),
    Query("q3", "local item suggestion: sellers in OR, ID or CA of category-10 auctions", (
        _within("auction a", "person p", "a.seller = p.id",
                "p.name AS name, p.city AS city, p.state AS state, a.id AS id",
                "a.category = 10 AND p.state IN ('OR', 'ID', 'CA')", "q3"),)),
    Query("q4", "average closing price per category", (
        _Q4_BIDS,
        "CREATE TABLE q4_final AS SELECT id, category, MAX(price) AS final FROM q4_bids "
        "GROUP BY id, category",
        "CREATE TABLE q4 AS SELECT category, AVG(final) AS avg_final FROM q4_final "
        "GROUP BY category"), form="chained sql"),
    Query("q5", "hot items: the auctions with the most bids per hopping window",
          form="sql + python", python=hot_items,
          missing="in SQL: MAX over a table (the per-window counts; ksqlDB refuses it, as it "
                  "cannot take a row back), though a FINAL window's rows never change: a "
                  "Python map over the FINAL table's changelog picks each window's most"),
    Query("q6", "average selling price of each seller's last 10 closed auctions",
          missing="OVER (PARTITION BY … ROWS BETWEEN 10 PRECEDING AND CURRENT ROW), and the "
                  "top-1 per auction it reads"),
    Query("q7", "the highest bid of each 10-second window", (
        "CREATE STREAM q7_bids AS SELECT auction, bidder, price, dateTime, extra, 0 AS whole "
        "FROM bid",
        "CREATE TABLE q7 AS SELECT whole, MAX(price) AS price, MAX_BY(auction, price) AS auction, "
        "MAX_BY(bidder, price) AS bidder, MAX_BY(dateTime, price) AS dateTime, "
        "MAX_BY(extra, price) AS extra FROM q7_bids WINDOW TUMBLING (SIZE "
        f"{WINDOW_SECONDS} SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY whole EMIT FINAL"),
          form="chained sql"),
    Query("q8", "new users who opened an auction in the 10 seconds they registered in", (
        _within("auction a", "person p", "a.seller = p.id",
                f"p.id AS id, p.name AS name, EPOCH_MS(p.dateTime) / {WINDOW_SECONDS * 1000} "
                f"* {WINDOW_SECONDS * 1000} AS stime",
                f"EPOCH_MS(p.dateTime) / {WINDOW_SECONDS * 1000} = "
                f"EPOCH_MS(a.dateTime) / {WINDOW_SECONDS * 1000}", "q8_pairs"),
        "CREATE TABLE q8 AS SELECT id, name, stime, COUNT(*) AS auctions FROM q8_pairs "
        "GROUP BY id, name, stime"), form="chained sql"),
    Query("q9", "winning bids: each auction's highest bid while it was open", (
        _Q9_BIDS,
        "CREATE TABLE q9 AS SELECT id, MAX(price) AS price, MAX_BY(bidder, price) AS bidder, "
        "MAX_BY(bid_dateTime, price) AS bid_dateTime FROM q9_bids GROUP BY id"),
          form="chained sql"),
    Query("q10", "log to a file system: each bid with its day and minute", (
        "CREATE STREAM q10 AS SELECT auction, bidder, price, dateTime, extra, "
        f"{_DAY} AS day, STRFTIME(dateTime, '%H:%M') AS minute FROM bid",)),
    Query("q11", "user sessions: bids per bidder per session of 10 seconds' inactivity", (
        f"CREATE TABLE q11 AS SELECT bidder, COUNT(*) AS bid_count FROM bid WINDOW SESSION "
        f"({WINDOW_SECONDS} SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY bidder EMIT FINAL",)),
    Query("q12", "bids per bidder per 10 seconds of processing time",
          missing="processing-time windows (Flink's PROCTIME()): windows here are on event "
                  "time; a run's wall clock is no column of its rows"),
    Query("q13", "bounded side-input join: each bid with a value from a static table", (
        "CREATE STREAM q13_bids AS SELECT auction, bidder, price, dateTime, "
        "MOD(auction, 10000) AS side_key FROM bid",
        "CREATE STREAM q13 AS SELECT b.auction AS auction, b.bidder AS bidder, b.price AS price, "
        "b.dateTime AS dateTime, s.value AS value FROM q13_bids b JOIN side_input s "
        "ON b.side_key = s.key"), form="chained sql"),
    Query("q14", "calculation: price in euros, time of day and a character count, filtered", (
        "CREATE STREAM q14 AS SELECT auction, bidder, 0.908 * price AS price, CASE "
        "WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime' "
        "WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime' "
        "ELSE 'otherTime' END AS bidTimeType, dateTime, extra, "
        "LENGTH(extra) - LENGTH(REPLACE(extra, 'c', '')) AS c_counts FROM bid "
        "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",)),
    Query("q15", "bidding statistics per day: bids and bidders by price rank", (
        f"CREATE TABLE q15 AS SELECT {_DAY} AS day, COUNT(*) AS total_bids, "
        f"{_ranked('bids', 'COUNT(*)')}, COUNT(DISTINCT bidder) AS total_bidders, "
        f"{_ranked('bidders', 'COUNT(DISTINCT bidder)')}, "
        f"COUNT(DISTINCT auction) AS total_auctions, "
        f"{_ranked('auctions', 'COUNT(DISTINCT auction)')} FROM bid GROUP BY {_DAY}",)),
    Query("q16", "channel statistics per day: q15 per channel, with the latest minute", (
        f"CREATE TABLE q16 AS SELECT channel, {_DAY} AS day, "
        f"MAX(STRFTIME(dateTime, '%H:%M')) AS minute, COUNT(*) AS total_bids, "
        f"{_ranked('bids', 'COUNT(*)')}, COUNT(DISTINCT bidder) AS total_bidders, "
        f"{_ranked('bidders', 'COUNT(DISTINCT bidder)')}, "
        f"COUNT(DISTINCT auction) AS total_auctions, "
        f"{_ranked('auctions', 'COUNT(DISTINCT auction)')} FROM bid GROUP BY channel, {_DAY}",)),
    Query("q17", "auction statistics per day", (
        f"CREATE TABLE q17 AS SELECT auction, {_DAY} AS day, COUNT(*) AS total_bids, "
        f"{_ranked('bids', 'COUNT(*)')}, MIN(price) AS min_price, MAX(price) AS max_price, "
        f"AVG(price) AS avg_price, SUM(price) AS sum_price FROM bid GROUP BY auction, {_DAY}",)),
    Query("q18", "each bidder's last bid on each auction (deduplication)", (
        "CREATE TABLE q18 AS SELECT auction, bidder, LATEST_BY_OFFSET(price) AS price, "
        "LATEST_BY_OFFSET(channel) AS channel, LATEST_BY_OFFSET(url) AS url, "
        "LATEST_BY_OFFSET(dateTime) AS dateTime, LATEST_BY_OFFSET(extra) AS extra FROM bid "
        "GROUP BY auction, bidder",)),
    Query("q19", "the 10 highest bids of each auction, ranked", form="python",
          python=top_bids, missing="in SQL: a top-N (ROW_NUMBER() OVER (PARTITION BY … ORDER BY "
                                   "…) <= N); the Python API's keyed map keeps it instead"),
    Query("q20", "each bid with its auction, for category-10 auctions", (
        _within("bid b", "auction a", "b.auction = a.id",
                "b.auction AS auction, b.bidder AS bidder, b.price AS price, "
                "b.channel AS channel, b.url AS url, b.dateTime AS bid_dateTime, "
                "b.extra AS bid_extra, a.itemName AS itemName, a.description AS description, "
                "a.initialBid AS initialBid, a.reserve AS reserve, "
                "a.dateTime AS auction_dateTime, a.expires AS expires, a.seller AS seller, "
                "a.category AS category, a.extra AS auction_extra", "a.category = 10", "q20"),)),
    Query("q21", "each bid's channel id, from its channel or its URL", (
        "CREATE STREAM q21 AS SELECT auction, bidder, price, channel, CASE "
        "WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' "
        "WHEN LOWER(channel) = 'facebook' THEN '2' WHEN LOWER(channel) = 'baidu' THEN '3' "
        "ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id FROM bid "
        "WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL "
        "OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')",)),
    Query("q22", "each bid's URL split into its first three directories", (
        "CREATE STREAM q22 AS SELECT auction, bidder, price, channel, "
        "SPLIT_PART(url, '/', 4) AS dir1, SPLIT_PART(url, '/', 5) AS dir2, "
        "SPLIT_PART(url, '/', 6) AS dir3 FROM bid",)),
)


def query(name: str) -> Query:
    """The query called ``name`` (``"q0"`` … ``"q22"``)."""
    for candidate in QUERIES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no Nexmark query {name!r}: {[q.name for q in QUERIES]}")
