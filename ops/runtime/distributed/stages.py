"""A batch's operators cut into stages, and what a stage's operators need of the driver."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeGuard

from ...operators import Operator, StateKind, TimerDeclaration
from ...operators.event_time import (
    EventTimeAggregate,
)


def is_event_time(operator: Operator) -> TypeGuard[EventTimeAggregate]:
    """Whether ``operator`` is an event-time aggregate (windows, sessions): its keys own
    windows, and whether a record is late depends on the stream time before it, across keys."""
    return isinstance(operator, EventTimeAggregate)


@dataclass(frozen=True)
class Stage:
    """Operators run together in one pass: a stateful one (if any) and the stateless ones after
    it. ``keys``: the key columns of a keyed stage; ``None`` for a whole-stream stage; ``()``
    for a narrow (stateless) stage. ``clocked``: a keyed stage whose operator needs the stream
    time measured over the whole batch first (see :func:`is_event_time`)."""

    operators: tuple[Operator, ...]
    keys: tuple[str, ...] | None
    clocked: bool = False

    @property
    def names(self) -> list[str]:
        return [name for op in self.operators for name in op.declares().names]


def stages_of(operators: tuple[Operator, ...]) -> list[Stage]:
    """The stages that run ``operators`` (see the package docstring).

    >>> from ops.operators.basic import Filter, Map
    >>> ops = (Filter(bool, "f"), Map(len, "m", state=0, keys=("k",)), Filter(bool, "g"))
    >>> [(len(s.operators), s.keys) for s in stages_of(ops)]
    [(1, ()), (2, ('k',))]
    """
    stages: list[Stage] = [] if operators else [Stage((), ())]  # no operators: rows pass through
    for op in operators:
        declared = op.declares()
        if declared.kind is StateKind.STATELESS and stages:
            stages[-1] = replace(stages[-1], operators=stages[-1].operators + (op,))
        elif declared.kind is StateKind.STATELESS:
            stages.append(Stage((op,), ()))
        elif declared.kind is StateKind.KEYED and not declared.shared:
            stages.append(Stage((op,), declared.keys))
        elif declared.kind is StateKind.KEYED and is_event_time(op):
            stages.append(Stage((op,), declared.keys, clocked=True))
        else:
            stages.append(Stage((op,), None))
    return stages



def writes_state_files(stages: list[Stage]) -> bool:
    """Whether the tasks of ``stages`` may write their changed state as ``_state`` files
    themselves (see StateFiles): when every state row the batch changes is a task's (a clocked
    stage's clock and a timed map's watermark are rows the driver makes, and a timed map's
    next deadline is read from its changed rows)."""
    return not any(stage.clocked or timers_of(stage) is not None for stage in stages)


def timers_of(stage: Stage) -> TimerDeclaration | None:
    """The timers and TTL of a keyed stage's operator, if it has any."""
    if not stage.keys or not stage.operators:
        return None
    return stage.operators[0].declares().clock

