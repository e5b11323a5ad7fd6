"""Analytics: named, parameterised views over a pipeline's state table that clients subscribe to.

An analytic declares its parameter schema and three functions:

- ``subscribe(subscription)``: set up what it needs (optional); called once per distinct
  subscription, however many clients share it;
- ``snapshot(subscription, table)``: the current rows for the subscription, from the target's
  state table (latest value per key, a pandas frame);
- ``delta(subscription, changes)``: of one micro-batch's table changes, the rows this
  subscription shows (e.g. rows whose ``sym`` is in the subscribed list);

plus ``unsubscribe(subscription)`` (optional) when its last client leaves, and when to publish:
on every micro-batch (the default) or, with ``every="1s"``, once per period with what changed in
it (see :mod:`analytics.periods`). Parameters are
validated against the schema and only ever handed to these functions as values: nothing in
them is spliced into SQL or code.

Analytics live in a :class:`Registry`. The module functions ``register``, ``registered`` and
``get`` act on one process-wide ``default_registry``; a :class:`~analytics.QueryManager` built
with ``registry=Registry()`` sees only the analytics registered there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .errors import AnalyticsError, quoted
from .periods import parse_every

_SCALARS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}
PARAM_TYPES = (*_SCALARS, *(f"list[{t}]" for t in _SCALARS))


@dataclass(frozen=True)
class Subscription:
    """One shared subscription: unique by (analytic, canonical params, target, user)."""

    id: str
    analytic: str
    params: Mapping[str, Any]
    target: str
    user: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.analytic, canonical(self.params), self.target, self.user)


@dataclass(frozen=True)
class Analytic:
    """A registered analytic: its parameter schema and functions (see the module docstring)."""

    name: str
    params: Mapping[str, str]
    snapshot: Callable[[Subscription, pd.DataFrame], pd.DataFrame]
    delta: Callable[[Subscription, pd.DataFrame], pd.DataFrame]
    subscribe: Callable[[Subscription], None] | None = None
    unsubscribe: Callable[[Subscription], None] | None = None
    #: seconds between pushes (``None``: one push per micro-batch)
    every: float | None = None

    def validate(self, params: Any) -> dict[str, Any]:
        """``params`` checked against the schema: every declared name present with its type,
        nothing else. The message names the parameter at fault."""
        if not isinstance(params, Mapping):
            raise AnalyticsError(f"{self.name}: parameters must be an object, not "
                                 f"{type(params).__name__}")
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise AnalyticsError(f"{self.name}: unknown parameter(s) {quoted(unknown)}; expected "
                                 f"{sorted(self.params)}")
        checked = {}
        for name, kind in self.params.items():
            if name not in params:
                raise AnalyticsError(f"{self.name}: parameter {name!r} ({kind}) is missing")
            checked[name] = _checked(self.name, name, kind, params[name])
        return checked


def _checked(analytic: str, name: str, kind: str, value: Any) -> Any:
    if kind.startswith("list["):
        inner = kind[5:-1]
        if not isinstance(value, list) or not all(_SCALARS[inner](v) for v in value):
            raise AnalyticsError(f"{analytic}: parameter {name!r} must be a list of {inner}, "
                                 f"got {quoted(value)}")
        return list(value)
    if not _SCALARS[kind](value):
        raise AnalyticsError(f"{analytic}: parameter {name!r} must be a {kind}, got "
                             f"{quoted(value)}")
    return value


def canonical(params: Mapping[str, Any]) -> str:
    """One text per distinct parameter set (keys sorted), so identical requests match."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class Registry:
    """A set of analytics by name. Each :class:`~analytics.QueryManager` looks analytics up in
    one (the default registry unless given another), so two managers in one process can serve
    different analytics under the same name.

    >>> registry = Registry()
    >>> cpu = registry.register("cpu", params={"syms": "list[string]"},
    ...                         snapshot=lambda sub, table: table, delta=lambda sub, rows: rows)
    >>> registry.get("cpu") is cpu
    True
    """

    def __init__(self) -> None:
        self._analytics: dict[str, Analytic] = {}

    def register(self, name: str, *, params: Mapping[str, str],
                 snapshot: Callable[[Subscription, pd.DataFrame], pd.DataFrame],
                 delta: Callable[[Subscription, pd.DataFrame], pd.DataFrame],
                 subscribe: Callable[[Subscription], None] | None = None,
                 unsubscribe: Callable[[Subscription], None] | None = None,
                 every: str | float | None = None) -> Analytic:
        """Register (or replace) analytic ``name``; ``params`` maps parameter names to
        ``string``/``long``/``double``/``boolean`` or ``list[...]`` of those. ``every``: publish
        once per period (``"500ms"``, ``"1s"``, ``"2m"``, or seconds) rather than per batch.

        >>> Registry().register("cpu", params={}, snapshot=lambda s, t: t, delta=lambda s, r: r,
        ...                     every="2s").every
        2.0
        """
        bad = {p: t for p, t in params.items() if t not in PARAM_TYPES}
        if bad:
            raise AnalyticsError(f"analytic {name!r}: unknown parameter type(s) {bad}; use {PARAM_TYPES}")
        analytic = Analytic(name, dict(params), snapshot, delta, subscribe, unsubscribe,
                            parse_every(name, every))
        self._analytics[name] = analytic
        return analytic

    def registered(self) -> dict[str, Analytic]:
        """Every registered analytic, by name (a copy)."""
        return dict(self._analytics)

    def get(self, name: str) -> Analytic:
        """Analytic ``name``; :class:`AnalyticsError` naming the registered ones if unknown."""
        if not isinstance(name, str) or name not in self._analytics:
            raise AnalyticsError(f"no analytic {quoted(name)}; registered: {sorted(self._analytics)}")
        return self._analytics[name]


#: The registry that :func:`register`, :func:`registered`, :func:`get` and managers built
#: without ``registry=`` use.
default_registry = Registry()


def register(name: str, *, params: Mapping[str, str],
             snapshot: Callable[[Subscription, pd.DataFrame], pd.DataFrame],
             delta: Callable[[Subscription, pd.DataFrame], pd.DataFrame],
             subscribe: Callable[[Subscription], None] | None = None,
             unsubscribe: Callable[[Subscription], None] | None = None,
             every: str | float | None = None) -> Analytic:
    """:meth:`Registry.register` on the default registry."""
    return default_registry.register(name, params=params, snapshot=snapshot, delta=delta,
                                     subscribe=subscribe, unsubscribe=unsubscribe, every=every)


def registered() -> dict[str, Analytic]:
    """:meth:`Registry.registered` of the default registry."""
    return default_registry.registered()


def get(name: str) -> Analytic:
    """:meth:`Registry.get` on the default registry."""
    return default_registry.get(name)
