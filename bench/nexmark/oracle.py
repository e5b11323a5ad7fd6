"""Each expressed Nexmark query answered by brute force in pandas over the whole generated
stream, for the engines' answers to be checked against (:func:`same_rows`).

An answer is what a query leaves when its input is exhausted: a stream query's rows, a table's
current rows. Session windows (q11) are those closed by the stream time the last bid reaches
(grace 0), as the engine's are.

>>> from bench.nexmark.generator import NexmarkConfig, generate
>>> events = [generate(NexmarkConfig(seed=3), batch, 500) for batch in range(2)]
>>> len(answer("q0", events)) == sum(len(e.bid) for e in events)
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from bench.nexmark.generator import Events
from bench.nexmark.queries import WINDOW_SECONDS
from bench.nexmark.streams import all_of, side_input

_Frames = dict[str, pd.DataFrame]
_HOT_CHANNELS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
_RANKS = {"rank1": (0, 10_000), "rank2": (10_000, 1_000_000), "rank3": (1_000_000, np.inf)}


def answer(name: str, batches: list[Events]) -> pd.DataFrame:
    """Query ``name``'s answer over every batch of the stream."""
    frames = {kind: all_of(batches, kind) for kind in ("person", "auction", "bid")}
    return _ANSWERS[name](frames)


def same_rows(got: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    """``None`` when ``got`` holds ``expected``'s rows (its columns, in any order, doubles to 6
    places, instants as UTC); else what differs."""
    missing = [c for c in expected.columns if c not in got.columns]
    if missing:
        return f"columns {missing} missing from {list(got.columns)}"
    left, right = _normal(got[list(expected.columns)]), _normal(expected)
    if len(left) != len(right):
        return f"{len(left)} rows, expected {len(right)}"
    unequal = (left != right) & ~(left.isna() & right.isna())
    if unequal.to_numpy().any():
        row = int(np.flatnonzero(unequal.any(axis=1).to_numpy())[0])
        return f"row {row} differs:\n{left.iloc[row].to_dict()}\nexpected\n{right.iloc[row].to_dict()}"
    return None


def _normal(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows sortable and comparable across engines: instants as UTC nanoseconds, doubles
    rounded, every value as a Python object; sorted by every column."""
    out = pd.DataFrame(index=range(len(frame)))
    for column in frame.columns:
        values = frame[column].reset_index(drop=True)
        if pd.api.types.is_datetime64_any_dtype(values.dtype):
            values = (values.dt.tz_convert("UTC").dt.tz_localize(None)
                      if values.dt.tz is not None else values)
            values = values.astype("datetime64[ns]").astype("int64")
        elif pd.api.types.is_float_dtype(values.dtype) or values.map(type).eq(float).any():
            values = values.astype("float64").round(6)
        out[column] = values.astype(object).where(values.notna(), None)
    return out.sort_values(list(out.columns), na_position="first", key=_sortable).reset_index(
        drop=True)


def _sortable(column: pd.Series) -> pd.Series:
    return column.map(lambda value: (value is not None, str(type(value)), value))


def _bid_columns(bid: pd.DataFrame, *columns: str) -> pd.DataFrame:
    return bid[list(columns)].reset_index(drop=True)


def _joined_open_bids(frames: _Frames) -> pd.DataFrame:
    """Each bid with its auction, for the bids made while the auction was open (q4, q9)."""
    joined = frames["bid"].merge(frames["auction"], left_on="auction", right_on="id",
                                 suffixes=("", "_a"))
    return joined[joined["dateTime"].between(joined["dateTime_a"], joined["expires"])]


def _day(times: pd.Series) -> pd.Series:
    return times.dt.strftime("%Y-%m-%d")


def _ranked(bid: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """q15's and q16's counts per group ``keys``: bids, distinct bidders and auctions, overall
    and per price rank."""
    groups = bid.groupby(keys)
    out = pd.DataFrame({"total_bids": groups.size(), "total_bidders": groups["bidder"].nunique(),
                        "total_auctions": groups["auction"].nunique()})
    for rank, (low, high) in _RANKS.items():
        ranked = bid[(bid["price"] >= low) & (bid["price"] < high)].groupby(keys)
        out[f"{rank}_bids"] = ranked.size()
        out[f"{rank}_bidders"] = ranked["bidder"].nunique()
        out[f"{rank}_auctions"] = ranked["auction"].nunique()
    return out.fillna(0).astype("int64").reset_index()


def _q3(frames: _Frames) -> pd.DataFrame:
    auction, person = frames["auction"], frames["person"]
    joined = auction[auction["category"] == 10].merge(
        person[person["state"].isin(["OR", "ID", "CA"])], left_on="seller", right_on="id",
        suffixes=("", "_p"))
    return joined[["name", "city", "state", "id"]]


def _q4(frames: _Frames) -> pd.DataFrame:
    final = _joined_open_bids(frames).groupby(["id", "category"])["price"].max().reset_index()
    return final.groupby("category")["price"].mean().rename("avg_final").reset_index()


def _q5(frames: _Frames, every_window: bool = False) -> pd.DataFrame:
    """Per hopping window (10 s every 2 s), the auctions with the most bids: the windows stream
    time closed (``window_end <= `` the last bid's time), or, ``every_window``, all of them
    (Flink's end of input closes every one)."""
    bid = frames["bid"]
    ms = bid["dateTime"].astype("datetime64[ms, UTC]").astype("int64").to_numpy()
    size, advance = 10_000, 2_000
    starts = [ms // advance * advance - k * advance for k in range(size // advance)]
    windows = pd.DataFrame({"auction": np.tile(bid["auction"].to_numpy(), len(starts)),
                            "window_start": np.concatenate(starts)})
    counts = windows.groupby(["window_start", "auction"]).size().rename("num").reset_index()
    if not every_window:
        counts = counts[counts["window_start"] + size <= ms.max()]
    most = counts.groupby("window_start")["num"].transform("max")
    hot = counts[counts["num"] >= most]
    return hot.assign(window_start=pd.to_datetime(hot["window_start"], unit="ms", utc=True))[
        ["auction", "num", "window_start"]]


def every_window(name: str, batches: list[Events]) -> pd.DataFrame:
    """Windowed query ``name``'s answer (q5, q7) with every window closed, as Flink's end of
    input closes them."""
    frames = {kind: all_of(batches, kind) for kind in ("person", "auction", "bid")}
    return {"q5": _q5, "q7": _q7}[name](frames, True)


def _q7(frames: _Frames, every_window: bool = False) -> pd.DataFrame:
    """Per tumbling 10-second window, its bids at the window's highest price: the windows
    stream time closed, or ``every_window`` (Flink's end of input)."""
    bid = frames["bid"]
    size = WINDOW_SECONDS * 1000
    ms = bid["dateTime"].astype("datetime64[ms, UTC]").astype("int64")
    window = ms // size
    top = bid[bid["price"] == bid.groupby(window)["price"].transform("max")]
    if not every_window:
        top = top[(window[top.index] + 1) * size <= ms.max()]
    return top[["auction", "bidder", "price", "dateTime", "extra"]]


def _q8(frames: _Frames) -> pd.DataFrame:
    size = WINDOW_SECONDS * 1000
    person, auction = frames["person"].copy(), frames["auction"].copy()
    for frame in (person, auction):
        frame["window"] = frame["dateTime"].astype("datetime64[ms, UTC]").astype("int64") // size
    joined = auction.merge(person, left_on=["seller", "window"], right_on=["id", "window"],
                           suffixes=("_a", ""))
    joined["stime"] = joined["window"] * size
    return joined.groupby(["id", "name", "stime"]).size().rename("auctions").reset_index()


def _q9(frames: _Frames) -> pd.DataFrame:
    bids = _joined_open_bids(frames).sort_values(["price", "event_id"], ascending=[False, True])
    best = bids.drop_duplicates("id")
    return best.rename(columns={"dateTime": "bid_dateTime"})[["id", "price", "bidder",
                                                              "bid_dateTime"]]


def _q11(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"].sort_values(["bidder", "event_id"])
    gap = pd.Timedelta(seconds=WINDOW_SECONDS)
    new_session = bid.groupby("bidder")["dateTime"].diff().gt(gap) | ~bid["bidder"].duplicated()
    sessions = bid.assign(session=new_session.cumsum()).groupby(["bidder", "session"])
    out = pd.DataFrame({"window_start": sessions["dateTime"].min(),
                        "window_end": sessions["dateTime"].max(),
                        "bid_count": sessions.size()}).reset_index()
    stream_time = frames["bid"]["dateTime"].max()
    closed = out["window_end"] + gap < stream_time
    return out[closed].drop(columns="session")


def _q13(frames: _Frames) -> pd.DataFrame:
    bid = _bid_columns(frames["bid"], "auction", "bidder", "price", "dateTime")
    values = side_input().set_index("key")["value"]
    return bid.assign(value=(bid["auction"] % 10_000).map(values))


def _q14(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"]
    price = 0.908 * bid["price"]
    kept = bid[(price > 1_000_000) & (price < 50_000_000)]
    hour = kept["dateTime"].dt.hour
    kind = np.where((hour >= 8) & (hour <= 18), "dayTime",
                    np.where((hour <= 6) | (hour >= 20), "nightTime", "otherTime"))
    return pd.DataFrame({"auction": kept["auction"], "bidder": kept["bidder"],
                         "price": 0.908 * kept["price"], "bidTimeType": kind,
                         "dateTime": kept["dateTime"], "extra": kept["extra"],
                         "c_counts": kept["extra"].str.count("c")})


def _q16(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"].assign(day=_day(frames["bid"]["dateTime"]),
                               minute=frames["bid"]["dateTime"].dt.strftime("%H:%M"))
    minutes = bid.groupby(["channel", "day"])["minute"].max().reset_index()
    return _ranked(bid, ["channel", "day"]).merge(minutes, on=["channel", "day"])


def _q17(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"].assign(day=_day(frames["bid"]["dateTime"]))
    groups = bid.groupby(["auction", "day"])
    out = pd.DataFrame({"total_bids": groups.size(), "min_price": groups["price"].min(),
                        "max_price": groups["price"].max(), "avg_price": groups["price"].mean(),
                        "sum_price": groups["price"].sum()})
    for rank, (low, high) in _RANKS.items():
        out[f"{rank}_bids"] = bid[(bid["price"] >= low) & (bid["price"] < high)].groupby(
            ["auction", "day"]).size()
    return out.fillna({f"{rank}_bids": 0 for rank in _RANKS}).reset_index()


def _q19(frames: _Frames) -> pd.DataFrame:
    bids = frames["bid"].sort_values(["price", "event_id"], ascending=[False, True])
    top = bids.assign(rank_number=bids.groupby("auction").cumcount() + 1)
    return top[top["rank_number"] <= 10][["auction", "bidder", "price", "channel", "url",
                                          "dateTime", "extra", "rank_number"]]


def _q20(frames: _Frames) -> pd.DataFrame:
    auction = frames["auction"][frames["auction"]["category"] == 10]
    joined = frames["bid"].merge(auction, left_on="auction", right_on="id",
                                 suffixes=("", "_auction"))
    return joined.rename(columns={"dateTime": "bid_dateTime", "extra": "bid_extra",
                                  "dateTime_auction": "auction_dateTime",
                                  "extra_auction": "auction_extra"})[
        ["auction", "bidder", "price", "channel", "url", "bid_dateTime", "bid_extra", "itemName",
         "description", "initialBid", "reserve", "auction_dateTime", "expires", "seller",
         "category", "auction_extra"]]


def _q21(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"]
    from_url = bid["url"].str.extract(r"(?:&|^)channel_id=([^&]*)", expand=False)
    hot = bid["channel"].str.lower().map(_HOT_CHANNELS)
    out = _bid_columns(bid, "auction", "bidder", "price", "channel").assign(
        channel_id=hot.fillna(from_url).to_numpy())
    return out[(from_url.notna() | hot.notna()).to_numpy()]


def _q22(frames: _Frames) -> pd.DataFrame:
    bid = frames["bid"]
    parts = bid["url"].str.split("/", expand=True).reindex(columns=range(6))
    return _bid_columns(bid, "auction", "bidder", "price", "channel").assign(
        dir1=parts[3].fillna("").to_numpy(), dir2=parts[4].fillna("").to_numpy(),
        dir3=parts[5].fillna("").to_numpy())


_ANSWERS: dict[str, Callable[[_Frames], pd.DataFrame]] = {
    "q0": lambda f: _bid_columns(f["bid"], "auction", "bidder", "price", "dateTime", "extra"),
    "q1": lambda f: _bid_columns(f["bid"], "auction", "bidder", "dateTime", "extra").assign(
        price=0.908 * f["bid"]["price"].to_numpy()),
    "q2": lambda f: _bid_columns(f["bid"][f["bid"]["auction"] % 123 == 0], "auction", "price"),
    "q3": _q3, "q4": _q4, "q5": _q5, "q7": _q7, "q8": _q8, "q9": _q9,
    "q10": lambda f: _bid_columns(f["bid"], "auction", "bidder", "price", "dateTime",
                                  "extra").assign(day=_day(f["bid"]["dateTime"]).to_numpy(),
                                                  minute=f["bid"]["dateTime"].dt.strftime(
                                                      "%H:%M").to_numpy()),
    "q11": _q11, "q13": _q13, "q14": _q14,
    "q15": lambda f: _ranked(f["bid"].assign(day=_day(f["bid"]["dateTime"])), ["day"]),
    "q16": _q16, "q17": _q17,
    "q18": lambda f: f["bid"].drop_duplicates(["auction", "bidder"], keep="last")[
        ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]],
    "q19": _q19, "q20": _q20, "q21": _q21, "q22": _q22,
}
