"""What a stream's methods are given, checked and turned into an operator's settings: a
duration, a map's timers and TTL, what it does with late rows, the type its state is stored as.
Each refusal names the operator and the argument.

>>> duration("sum", "ttl", "1h")
3600000
>>> drops_late("sum", "keep", None)
False
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import pandas as pd

from state import StateType, check_name, declared_state_type

from .errors import PipelineDefinitionError
from .operators import TimerDeclaration


def drops_late(map_name: str, late: str, event_time: str | None) -> bool:
    """Whether map ``map_name`` drops late rows (``late="drop"``) or keeps them (``"keep"``)."""
    if late not in ("keep", "drop") or (late == "drop" and event_time is None):
        raise PipelineDefinitionError(
            f"map {map_name!r}: late= is 'keep' or 'drop' (with event_time=), not {late!r}")
    return late == "drop"


def state_type(map_name: str, spec: Any) -> StateType | None:
    """Map ``map_name``'s ``state_type=`` as declared (``None``: not given, or ``"json"``)."""
    try:
        return declared_state_type(spec)
    except ValueError as error:
        raise PipelineDefinitionError(f"map {map_name!r}: {error}") from None


def map_clock(operator: str, timers: bool, ttl: Any, event_time: str | None,
              delay: Any) -> TimerDeclaration | None:
    """A map's timer declaration, or ``None`` when it asked for no timers, TTL or event time."""
    if not (timers or ttl is not None or event_time is not None):
        if delay is not None:
            raise PipelineDefinitionError(f"map {operator!r}: delay= goes with event_time=")
        return None
    return TimerDeclaration(operator, event_time, duration(operator, "delay", delay or 0),
                            None if ttl is None else duration(operator, "ttl", ttl))


def duration(operator: str, name: str, value: Any) -> int:
    """``value`` ("1h", a timedelta, or ms) in milliseconds; a clear error when it is none."""
    try:
        ms = value if isinstance(value, int) else int(pd.Timedelta(value) / pd.Timedelta("1ms"))
    except (ValueError, TypeError):
        raise PipelineDefinitionError(
            f"operator {operator!r}: {name}={value!r} is not a duration (use '30s', '1h', a "
            "timedelta or milliseconds)") from None
    if ms < 0 or (name == "ttl" and ms == 0):
        raise PipelineDefinitionError(f"operator {operator!r}: {name}={value!r} must be positive")
    return ms


def operator_name(taken: Collection[str], name: str | None, fn: Callable[..., Any] | str) -> str:
    """``name`` if given (checked, and not one of ``taken``), else one made from ``fn``'s name
    (or the text), numbered past the names ``taken``.

    >>> operator_name({"sum", "sum_2"}, None, "sum")
    'sum_3'
    """
    if name is not None:
        check_name("operator", name)
        if name in taken:
            raise PipelineDefinitionError(f"operator name {name!r} is used twice")
        return name
    base = fn if isinstance(fn, str) else getattr(fn, "__name__", "op")
    base = base if base.isidentifier() and not base.startswith("_") else "op"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}_{n}"
    return candidate
