"""A Nexmark event generator written from the benchmark's published rules (the generator of
nexmark/nexmark, itself from Apache Beam's): persons, auctions and bids in the proportion
1 : 3 : 46, ids drawn from the recent people and the auctions still in flight, hot sellers,
hot auctions and hot bidders, prices log-uniform from $1 to $1M, event times at a fixed rate.

Vectorised with numpy and deterministic by seed: batch ``n`` of a stream is the events
``n * size`` to ``(n + 1) * size - 1`` and draws from a generator seeded by ``(seed, n)``, so
any batch can be made alone and twice the same. The values follow the published rules, not
the Java generator's random sequence (no two implementations share one): the same seed gives
the same stream here, not the Java tool's.

One deliberate difference: the Java generator adds ``FIRST_PERSON_ID`` to a bid's bidder
twice (its bidder ids are 1000 above the persons' ids); here once, so a bid's bidder is a
person a query can join to.

>>> events = generate(NexmarkConfig(seed=7), batch=0, size=500)
>>> [len(events.person), len(events.auction), len(events.bid)]
[10, 30, 460]
>>> auctions = events.auction
>>> bool((events.bid["price"] >= 100).all()) and bool((auctions["expires"] > auctions["dateTime"]).all())
True
>>> generate(NexmarkConfig(seed=7), batch=0, size=500).bid.equals(events.bid)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
CATEGORIES = 5
#: how far past the newest person and auction an id may point: a bid or auction for an id
#: whose event comes a little later, as if the two had been swapped in time
ID_LEAD = 10
#: a hot seller, auction or bidder is the first of each block of this many ids
HOT_BLOCK = 100
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS = 10_000
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
             "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")

PERSON_COLUMNS = ("id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra")
AUCTION_COLUMNS = ("id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires",
                   "seller", "category", "extra")
BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "dateTime", "extra")


@dataclass(frozen=True)
class NexmarkConfig:
    """The generator's knobs, with the benchmark's defaults."""

    seed: int = 0
    #: event time advances by 1/rate seconds per event (the Java tool's ``firstEventRate``)
    events_per_second: int = 10_000
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    #: sellers and bidders are drawn from the newest this many persons (plus the lead)
    active_people: int = 1000
    #: bids are drawn from the newest this many auctions (plus the lead)
    in_flight_auctions: int = 100
    #: 1 - 1/ratio of auctions go to a hot seller, of bids to a hot auction or hot bidder
    hot_sellers_ratio: int = 4
    hot_auctions_ratio: int = 2
    hot_bidders_ratio: int = 4
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100
    #: the first event's time, epoch milliseconds (2026-01-01T00:00:00Z)
    base_time_ms: int = 1_767_225_600_000

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def event_time_ms(self, event_ids: np.ndarray) -> np.ndarray:
        """Each event's time: the base time plus its number times the inter-event delay."""
        return self.base_time_ms + (event_ids * (1_000_000 / self.events_per_second)).astype(np.int64) // 1000


@dataclass(frozen=True)
class Events:
    """One batch of the stream, one frame per kind; ``dateTime`` (and an auction's
    ``expires``) are UTC timestamps in milliseconds; ``event_id`` orders all three."""

    person: pd.DataFrame
    auction: pd.DataFrame
    bid: pd.DataFrame


def generate(config: NexmarkConfig, batch: int, size: int) -> Events:
    """Events ``batch * size`` to ``(batch + 1) * size - 1`` of the stream ``config`` makes."""
    if size <= 0 or batch < 0:
        raise ValueError(f"generate: batch must be >= 0 and size > 0, got batch={batch}, size={size}")
    random = np.random.default_rng([config.seed, batch])
    ids = np.arange(batch * size, (batch + 1) * size, dtype=np.int64)
    offset = ids % config.total_proportion
    persons = offset < config.person_proportion
    auctions = ~persons & (offset < config.person_proportion + config.auction_proportion)
    bids = ~persons & ~auctions
    text = _Text(random)
    return Events(_persons(config, ids[persons], random, text),
                  _auctions(config, ids[auctions], random, text),
                  _bids(config, ids[bids], random, text))


def last_person(config: NexmarkConfig, event_ids: np.ndarray) -> np.ndarray:
    """The base-0 id of the newest person at each event (the event's own, for a person)."""
    epoch, offset = np.divmod(event_ids, config.total_proportion)
    return epoch * config.person_proportion + np.minimum(offset, config.person_proportion - 1)


def last_auction(config: NexmarkConfig, event_ids: np.ndarray) -> np.ndarray:
    """The base-0 id of the newest auction at each event (the event's own, for an auction);
    -1 before the first."""
    epoch, offset = np.divmod(event_ids, config.total_proportion)
    people, auctions = config.person_proportion, config.auction_proportion
    before = offset < people  # a person: the last auction of the epoch before
    epoch = np.where(before, epoch - 1, epoch)
    offset = np.where(before | (offset >= people + auctions), auctions - 1, offset - people)
    return epoch * auctions + offset


def _some_person(config: NexmarkConfig, event_ids: np.ndarray, random: np.random.Generator) -> np.ndarray:
    """A base-0 person among the newest ``active_people``, or a few past the newest."""
    people = last_person(config, event_ids) + 1
    active = np.minimum(people, config.active_people)
    return people - active + random.integers(0, active + ID_LEAD)


def _some_auction(config: NexmarkConfig, event_ids: np.ndarray, random: np.random.Generator) -> np.ndarray:
    """A base-0 auction among those likely still open, or a few past the newest."""
    newest = np.maximum(last_auction(config, event_ids), 0)
    oldest = np.maximum(newest - config.in_flight_auctions, 0)
    return oldest + random.integers(0, newest - oldest + 1 + ID_LEAD)


def _hot(ratio: int, hot_ids: np.ndarray, other: np.ndarray, random: np.random.Generator) -> np.ndarray:
    """``hot_ids`` with probability 1 - 1/ratio, else ``other``."""
    return np.where(random.integers(0, ratio, len(hot_ids)) > 0, hot_ids, other)


def _prices(random: np.random.Generator, count: int) -> np.ndarray:
    """Cents, log-uniform from 100 ($1) to 100,000,000 ($1M)."""
    return np.round(10.0 ** (random.random(count) * 6.0) * 100.0).astype(np.int64)


def _times(config: NexmarkConfig, event_ids: np.ndarray) -> pd.Series:
    return pd.Series(pd.to_datetime(config.event_time_ms(event_ids), unit="ms", utc=True))


def _persons(config: NexmarkConfig, ids: np.ndarray, random: np.random.Generator,
             text: _Text) -> pd.DataFrame:
    count = len(ids)

    def pick(names: tuple[str, ...]) -> np.ndarray:
        return np.asarray(names, dtype=object)[random.integers(0, len(names), count)]

    name = pick(FIRST_NAMES) + " " + pick(LAST_NAMES)
    email = text.words(7, count) + "@" + text.words(5, count) + ".com"
    digits = random.integers(0, 10_000, (count, 4))
    card = np.array([" ".join(f"{d:04d}" for d in row) for row in digits], dtype=object)
    city, state = pick(US_CITIES), pick(US_STATES)
    used = 8 + np.array([sum(map(len, parts)) for parts in zip(name, email, card, city, state)])
    return pd.DataFrame({"event_id": ids, "id": last_person(config, ids) + FIRST_PERSON_ID,
                         "name": name, "emailAddress": email, "creditCard": card, "city": city,
                         "state": state, "dateTime": _times(config, ids),
                         "extra": text.extra(used, config.avg_person_bytes)})


def _auctions(config: NexmarkConfig, ids: np.ndarray, random: np.random.Generator,
              text: _Text) -> pd.DataFrame:
    count = len(ids)
    hot_seller = last_person(config, ids) // HOT_BLOCK * HOT_BLOCK
    seller = _hot(config.hot_sellers_ratio, hot_seller, _some_person(config, ids, random), random)
    initial = _prices(random, count)
    time_ms = config.event_time_ms(ids)
    # an auction lasts until about when the auction in_flight_auctions later is made, on average
    ahead = config.in_flight_auctions * config.total_proportion // config.auction_proportion
    horizon = config.event_time_ms(ids + ahead) - time_ms
    expires = time_ms + 1 + random.integers(0, np.maximum(horizon * 2, 1))
    name, description = text.words(20, count), text.words(100, count)
    used = 48 + np.array([len(a) + len(b) for a, b in zip(name, description)], dtype=np.int64)
    return pd.DataFrame({"event_id": ids, "id": last_auction(config, ids) + FIRST_AUCTION_ID,
                         "itemName": name, "description": description, "initialBid": initial,
                         "reserve": initial + _prices(random, count), "dateTime": _times(config, ids),
                         "expires": pd.Series(pd.to_datetime(expires, unit="ms", utc=True)),
                         "seller": seller + FIRST_PERSON_ID,
                         "category": FIRST_CATEGORY_ID + random.integers(0, CATEGORIES, count),
                         "extra": text.extra(used, config.avg_auction_bytes)})


def _bids(config: NexmarkConfig, ids: np.ndarray, random: np.random.Generator, text: _Text) -> pd.DataFrame:
    count = len(ids)
    hot_auction = last_auction(config, ids) // HOT_BLOCK * HOT_BLOCK
    auction = _hot(config.hot_auctions_ratio, hot_auction, _some_auction(config, ids, random), random)
    # the second person of a block, so hot bidders and hot sellers differ
    hot_bidder = last_person(config, ids) // HOT_BLOCK * HOT_BLOCK + 1
    bidder = _hot(config.hot_bidders_ratio, hot_bidder, _some_person(config, ids, random), random)
    price = _prices(random, count)
    channel, url = _channels(random, count)
    return pd.DataFrame({"event_id": ids, "auction": auction + FIRST_AUCTION_ID,
                         "bidder": bidder + FIRST_PERSON_ID, "price": price, "channel": channel,
                         "url": url, "dateTime": _times(config, ids),
                         "extra": text.extra(np.full(count, 32), config.avg_bid_bytes)})


def _channels(random: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Half the bids from one of four hot channels, the others from 10,000 channels, 90% of
    whose URLs carry a ``channel_id`` (the Java tool's: its number's bits reversed)."""
    names, urls = channel_table()
    hot = random.integers(0, 2, count) > 0
    chosen = np.where(hot, random.integers(0, len(HOT_CHANNELS), count),
                      len(HOT_CHANNELS) + random.integers(0, CHANNELS, count))
    return names[chosen], urls[chosen]


@cache
def channel_table() -> tuple[np.ndarray, np.ndarray]:
    """The hot channels then ``channel-0`` ... ``channel-9999``, and each one's URL: fixed for
    every seed (the Java tool draws them once per process)."""
    random = np.random.default_rng(20_260_101)
    text = _Text(random)
    total = len(HOT_CHANNELS) + CHANNELS
    paths = [text.words(5, total, special="_") for _ in range(3)]
    urls = ("https://www.nexmark.com/" + paths[0] + "/" + paths[1] + "/" + paths[2]
            + "/item.htm?query=1")
    numbers = np.arange(CHANNELS, dtype=np.uint32)
    reversed_bits = np.zeros(CHANNELS, dtype=np.uint32)
    for bit in range(32):
        reversed_bits |= ((numbers >> bit) & 1) << (31 - bit)
    channel_id = np.abs(reversed_bits.view(np.int32).astype(np.int64))
    tagged = random.integers(0, 10, CHANNELS) > 0
    urls[len(HOT_CHANNELS):] = np.where(tagged, urls[len(HOT_CHANNELS):] + "&channel_id="
                                        + channel_id.astype(str).astype(object), urls[len(HOT_CHANNELS):])
    names = np.array([*HOT_CHANNELS, *(f"channel-{n}" for n in range(CHANNELS))], dtype=object)
    return names, urls


class _Text:
    """Random lowercase text, cut from one pool of letters per batch (as the Java tool cuts
    ``extra`` from one reusable string): fast enough for a million events a second."""

    POOL = 1 << 20

    def __init__(self, random: np.random.Generator):
        self.random = random
        letters = random.integers(ord("a"), ord("z") + 1, self.POOL, dtype=np.uint8)
        self.pool = letters.tobytes().decode("ascii")

    def words(self, longest: int, count: int, special: str = " ") -> np.ndarray:
        """Strings of 3 to ``longest - 1`` characters, about one in 13 of them ``special``
        (spaces trimmed from the ends, as the Java tool does)."""
        lengths = self.random.integers(3, longest, count)
        cut = self._cut(lengths)
        if special == " ":
            return np.array([s.strip() for s in _with_specials(cut, self.random, special)], dtype=object)
        return np.array(_with_specials(cut, self.random, special), dtype=object)

    def extra(self, used: np.ndarray, average: int) -> np.ndarray:
        """Padding that brings each event to about ``average`` bytes (±20%)."""
        wanted = np.maximum(average - np.asarray(used, dtype=np.int64), 0)
        delta = np.round(wanted * 0.2).astype(np.int64)
        lengths = wanted - delta + np.where(delta > 0, self.random.integers(0, np.maximum(2 * delta, 1)), 0)
        return np.array(self._cut(lengths), dtype=object)

    def _cut(self, lengths: np.ndarray) -> list[str]:
        starts = self.random.integers(0, self.POOL - int(lengths.max(initial=0)) - 1, len(lengths))
        pool = self.pool
        return [pool[start:start + length] for start, length in zip(starts.tolist(), lengths.tolist())]


def _with_specials(strings: list[str], random: np.random.Generator, special: str) -> list[str]:
    """Each string with its character at one random place in 13 replaced by ``special``."""
    if not strings:
        return []
    out = []
    marks = random.integers(0, 13, sum(map(len, strings)))
    at = 0
    for text in strings:
        picked = marks[at:at + len(text)]
        at += len(text)
        if (picked == 0).any():
            chars = list(text)
            for place in np.flatnonzero(picked == 0):
                chars[place] = special
            text = "".join(chars)
        out.append(text)
    return out
