"""The subscriptions a query manager serves, shared: identical requests (same analytic,
canonical parameters, target and user) hold one subscription, each through a client handle of
its own. Kept per subscription: its handles, the last batch it was given (its floor), and its
latest pushes, for clients that reconnect."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import AnalyticsError, quoted
from .registry import Subscription

#: Pushes kept in memory per subscription for clients that reconnect; older ones are read from
#: the stored deltas.
RECENT_PUSHES = 256


@dataclass
class RecentPushes:
    """A subscription's latest pushes; every push after batch ``floor`` is among them."""

    floor: int
    pushes: deque = field(default_factory=lambda: deque(maxlen=RECENT_PUSHES))

    def add(self, batch: int, rows: list[dict]) -> None:
        if len(self.pushes) == self.pushes.maxlen:
            self.floor = self.pushes[0][0]
        self.pushes.append((batch, rows))

    def after(self, batch: int) -> list[tuple[int, list[dict]]]:
        return [(b, rows) for b, rows in self.pushes if b > batch]


class SharedSubscriptions:
    """The live subscriptions by their request's key, the client handles on each, and what each
    was pushed. Not locked: its manager calls it under the manager's lock."""

    def __init__(self, stored: Iterable[Subscription] = ()):
        self._by_key: dict[tuple, Subscription] = {s.key: s for s in stored}
        self._clients: dict[str, Subscription] = {}
        self._floors: dict[str, int] = {}  # subscription id -> the last batch it was given
        self._recent: dict[str, RecentPushes] = {}
        self._ended: dict[str, str] = {}  # client -> why its subscription ended

    # -- subscriptions ------------------------------------------------------------------------
    def start(self, sub: Subscription, floor: int) -> None:
        """Serve ``sub`` (new, or stored) from after batch ``floor``."""
        self._by_key[sub.key] = sub
        self._floors[sub.id] = floor
        self._recent[sub.id] = RecentPushes(floor)

    def find(self, key: tuple) -> Subscription | None:
        """The subscription of request ``key`` (``Subscription.key``), if one is live."""
        return self._by_key.get(key)

    def remove(self, sub: Subscription) -> None:
        """Stop serving ``sub`` (its handles were released or ended first)."""
        self._by_key.pop(sub.key, None)
        self._floors.pop(sub.id, None)
        self._recent.pop(sub.id, None)

    def all(self) -> list[Subscription]:
        return list(self._by_key.values())

    def of_target(self, target: str) -> list[Subscription]:
        return [s for s in self._by_key.values() if s.target == target]

    def of_user(self, user: str) -> list[Subscription]:
        return [s for s in self._by_key.values() if s.user == user]

    def count(self) -> int:
        return len(self._by_key)

    # -- client handles -----------------------------------------------------------------------
    def attach(self, sub: Subscription) -> str:
        """A new client handle on ``sub``."""
        client = uuid.uuid4().hex
        self._clients[client] = sub
        return client

    def release(self, client: str, user: str) -> Subscription | None:
        """Release ``client``'s handle (``user``'s own only); its subscription when no handle
        holds it any more (the caller removes it), else ``None``."""
        sub = self._clients.get(client)
        if sub is None or sub.user != user:
            raise AnalyticsError(f"no subscription handle {quoted(client)} for this user")
        del self._clients[client]
        if any(other is sub for other in self._clients.values()):
            return None
        return sub

    def end(self, sub: Subscription, reason: str) -> None:
        """Take back every handle on ``sub``, their clients to be told ``reason``
        (:meth:`take_ended`)."""
        for client in [c for c, s in self._clients.items() if s is sub]:
            del self._clients[client]
            self._ended[client] = reason

    def take_ended(self) -> dict[str, str]:
        """The clients :meth:`end` took handles from since the last call, with the reason."""
        ended, self._ended = self._ended, {}
        return ended

    def holder(self, client: str) -> Subscription | None:
        """The subscription ``client`` holds (``None``: no such handle)."""
        return self._clients.get(client)

    def held(self, client: str) -> Subscription:
        """The subscription ``client`` holds; an ``AnalyticsError`` when there is no such handle."""
        sub = self._clients.get(client)
        if sub is None:
            raise AnalyticsError(f"no subscription handle {quoted(client)}")
        return sub

    def handles(self, user: str) -> list[tuple[str, Subscription]]:
        return [(c, s) for c, s in self._clients.items() if s.user == user]

    def clients_of(self, subscription_id: str) -> list[str]:
        return [c for c, s in self._clients.items() if s.id == subscription_id]

    # -- what each was pushed -----------------------------------------------------------------
    def floor(self, subscription_id: str) -> int:
        """The last batch the subscription was given."""
        return self._floors[subscription_id]

    def pushed(self, subscription_id: str, batch: int, rows: list[dict]) -> None:
        """The subscription was given ``batch``: ``rows`` (none: it only moves on)."""
        self._floors[subscription_id] = batch
        if rows:
            self._recent[subscription_id].add(batch, rows)

    def recent(self, subscription_id: str) -> RecentPushes:
        return self._recent[subscription_id]
