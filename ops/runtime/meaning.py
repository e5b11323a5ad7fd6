"""What a pipeline's state means, recorded with each checkpoint, and what a changed pipeline
would do to it.

Every checkpoint records, per state name (an ``operator`` partition of ``_state``), what the
values stored under it mean (:func:`describe`): the operator keeping them (its name and
class), whether and by which columns they are keyed, their codec and the shape of their
values (a map's initial value's type, an aggregate's functions, a window's size), or, for an
operator's timers and TTL deadlines, its clock. A run compares its pipeline with the latest
checkpoint before anything else (:func:`differences`):

- state the checkpoint holds that no operator keeps now (removed or renamed), or that would be
  read under other keys, with another codec, or as values of another shape, stops the run
  with :class:`state.PipelineChangedError` listing each difference and the ways forward
  (``sp.migrate``, see :mod:`ops.operating.migrate`);
- a new stateful operator, a changed clock setting (event-time column, delay, TTL) or any
  stateless change cannot misread what is stored: it passes, with an INFO line.

Tracked variables are checked by name the same way. Flink matches savepoint state to operators
by uid and refuses state left behind unless told (``--allowNonRestoredState``); this is that
check, with the meaning of the state besides its name.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from state import WATERMARK, StateTypes, expiry_state, timer_state

from ..operators import Operator, StateKind
from .storage import declared_state_types

VALUES, TIMERS, EXPIRY = "values", "timers", "expiry"  # the roles of an operator's state names
_CLOCK_FIELDS = ("event_time", "delay_ms", "ttl_ms")  # settings a run may change freely


class Remedy(enum.Enum):
    """What a difference needs before the pipeline may run on the state."""

    NONE = "none"            # nothing stored is read differently: the run goes on
    DROP_OR_RENAME = "drop"  # state no operator keeps: drop it, or rename it to its successor
    REKEY = "rekey"          # read under other keys: re-key it
    TRANSFORM = "transform"  # read as other values: transform them
    RECODE = "recode"        # stored with another codec: a migration re-encodes it
    STORAGE = "storage"      # stored as text, now typed (or back): a migration converts it


@dataclass(frozen=True)
class Difference:
    """One way the pipeline's state differs from what a checkpoint recorded."""

    name: str  # the state name (or tracked variable)
    what: str
    remedy: Remedy
    operator: str = ""  # the operator keeping it (the name, for a tracked variable)

    @property
    def blocking(self) -> bool:
        return self.remedy is not Remedy.NONE


def describe(operators: Iterable[Operator],
             storage: StateTypes | None = None) -> dict[str, dict[str, Any]]:
    """What each state name of ``operators`` means, as recorded in a checkpoint (JSON).
    ``storage``: the run's typed states (:func:`.storage.state_types`: declared or inferred);
    by default the declared ones.

    >>> from ops.operators import Map
    >>> described = describe([Map(fn=len, name="sum", state=0, keys=("k",))])
    >>> described["sum"]["keys"], described["sum"]["shape"], described["sum"].get("storage")
    (['k'], {'value': 'int'}, None)
    """
    operators = list(operators)
    if storage is None:
        storage = StateTypes(declared_state_types(operators))
    described: dict[str, dict[str, Any]] = {}
    for operator in operators:
        declared = operator.declares()
        if declared.kind is StateKind.STATELESS:
            continue
        owner = {"operator": operator.name, "kind": declared.kind.value, "keys": list(declared.keys)}
        clock = declared.clock
        clocked = clock.names if clock is not None else ()
        for name in declared.names:
            if name not in clocked:
                described[name] = {**owner, "role": VALUES, "class": type(operator).__name__,
                                   "codec": operator.codec, "shape": operator.state_shape(),
                                   "shared": list(declared.shared)}
                typed = storage.of(name)
                if typed is not None:
                    described[name]["storage"] = {"form": "typed", "type": typed.describe()}
        if clock is not None:
            described[timer_state(clock.operator)] = {
                **owner, "role": TIMERS, "event_time": clock.event_time,
                "delay_ms": clock.delay_ms, "shared": [WATERMARK]}
            if clock.ttl_ms is not None:
                described[expiry_state(clock.operator)] = {**owner, "role": EXPIRY,
                                                           "ttl_ms": clock.ttl_ms, "shared": []}
    # as a checkpoint's record gives it back (tuples as lists, keys as strings), so a shape
    # compares equal to its recorded self
    return dict(json.loads(json.dumps(described, default=str)))


def names_of(described: dict[str, dict[str, Any]], operator: str) -> dict[str, str]:
    """The state names ``operator`` keeps in ``described``, by role.

    >>> from ops.operators import Map
    >>> names_of(describe([Map(fn=len, name="sum", state=0)]), "sum")
    {'values': 'sum'}
    """
    return {entry["role"]: name for name, entry in described.items()
            if entry["operator"] == operator}


def state_name(operator: str, role: str) -> str:
    """The state name ``operator`` keeps its state of ``role`` under."""
    return {VALUES: operator, TIMERS: timer_state(operator), EXPIRY: expiry_state(operator)}[role]


def differences(recorded: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]],
                tracked_then: Iterable[str] = (), tracked_now: Iterable[str] = ()
                ) -> list[Difference]:
    """How the state described by ``now`` differs from what a checkpoint ``recorded``, and the
    tracked variables likewise; blocking differences first."""
    found: list[Difference] = []
    for name, then in recorded.items():
        if name not in now:
            found.append(Difference(name, f"{_owner(then)}: no operator keeps it now "
                                          f"(removed or renamed{_successors(then, recorded, now)})",
                                    Remedy.DROP_OR_RENAME, then["operator"]))
        else:
            found += _changes(name, then, now[name])
    for name in sorted(set(now) - set(recorded)):
        found.append(Difference(name, f"{_owner(now[name])}: new, starts empty", Remedy.NONE,
                                now[name]["operator"]))
    found = _per_operator(found, recorded)
    kept = set(tracked_now)
    found += [Difference(name, f"tracked variable {name!r}: no longer tracked (removed or "
                               "renamed)", Remedy.DROP_OR_RENAME, name)
              for name in sorted(set(tracked_then) - kept)]
    found += [Difference(name, f"tracked variable {name!r}: new, starts at its initial value",
                         Remedy.NONE, name) for name in sorted(kept - set(tracked_then))]
    return sorted(found, key=lambda d: not d.blocking)


def _per_operator(found: list[Difference], recorded: dict[str, dict[str, Any]]) -> list[Difference]:
    """``found`` without the differences of an operator's timers and deadlines that its values
    already show (a migration of an operator takes all its state names along)."""
    shown = {(d.operator, d.remedy) for d in found
             if d.name in recorded and recorded[d.name]["role"] == VALUES}
    return [d for d in found if d.name not in recorded or recorded[d.name]["role"] == VALUES
            or (d.operator, d.remedy) not in shown]


def _changes(name: str, then: dict[str, Any], now: dict[str, Any]) -> list[Difference]:
    found: list[tuple[str, Remedy]] = []
    if (then["kind"], then["keys"]) != (now["kind"], now["keys"]):
        found.append((f"was {_keyed(then)}, now {_keyed(now)}", Remedy.REKEY))
    if then["role"] != now["role"] or then.get("class") != now.get("class"):
        found.append((f"now kept by {_owner(now)}", Remedy.TRANSFORM))
    elif then.get("shape") != now.get("shape"):
        found.append((f"its values were {_shape(then)}, now {_shape(now)}", Remedy.TRANSFORM))
    if then.get("storage") != now.get("storage"):
        found.append((f"stored {_storage(then)}, now declared {_storage(now)}", Remedy.STORAGE))
    if then.get("codec") != now.get("codec"):
        found.append((f"stored with the {then.get('codec')} codec, now read with "
                      f"{now.get('codec')}", Remedy.RECODE))
    clock = [f"{field} {then.get(field)!r} -> {now.get(field)!r}" for field in _CLOCK_FIELDS
             if then.get(field) != now.get(field)]
    if clock:
        found.append((f"{', '.join(clock)} (deadlines already set keep their times)", Remedy.NONE))
    return [Difference(name, f"{_owner(then)}: {what}", remedy, then["operator"])
            for what, remedy in found]


def _owner(entry: dict[str, Any]) -> str:
    if entry["role"] == VALUES:
        return f"{entry['class']} {entry['operator']!r}"
    return f"the {entry['role']} of {entry['operator']!r}"


def _storage(entry: dict[str, Any]) -> str:
    storage = entry.get("storage")
    return "as text (json)" if storage is None else f"typed {storage['type']!r}"


def _keyed(entry: dict[str, Any]) -> str:
    return f"keyed by ({', '.join(entry['keys'])})" if entry["kind"] == "keyed" else "unkeyed"


def _shape(entry: dict[str, Any]) -> str:
    shape = entry.get("shape") or {}
    if set(shape) == {"value"}:  # a map's: the type of its values
        return str(shape["value"])
    return "; ".join(f"{key} {value}" for key, value in sorted(shape.items())) or "unspecified"


def _successors(then: dict[str, Any], recorded: dict[str, dict[str, Any]],
                now: dict[str, dict[str, Any]]) -> str:
    """``: 'x' is new`` for the new names of the same role and class (likely renames)."""
    alike = [name for name, entry in now.items() if name not in recorded
             and entry["role"] == then["role"] and entry.get("class") == then.get("class")]
    return f"; new now: {', '.join(map(repr, alike))}" if alike else ""


def refusal(pipeline: str, checkpoint_id: int, found: Sequence[Difference]) -> str:
    """The message of the error that stops a run whose pipeline ``found`` these differences
    with its checkpoint: each blocking difference, then the ways forward that apply."""
    blocking = [d for d in found if d.blocking]
    remedies = {d.remedy for d in blocking}
    lines = [f"pipeline {pipeline!r} no longer matches what checkpoint {checkpoint_id} recorded "
             "of its state, so nothing ran:"]
    lines += [f"  - {d.name!r}: {d.what}" for d in blocking]
    lines.append("Ways forward (each a new checkpoint; reset_to_checkpoint undoes it):")
    names = [d.name for d in blocking if d.remedy is Remedy.DROP_OR_RENAME]
    renamable = [d.operator for d in blocking
                 if d.remedy is Remedy.DROP_OR_RENAME and d.name == d.operator]
    if renamable:
        lines.append(f"  - renamed: sp.migrate(spark, pipeline, rename={{{renamable[0]!r}: "
                     "<new name>})")
    if names:
        lines.append(f"  - no longer wanted: sp.migrate(spark, pipeline, drop={names!r}), or run "
                     "with allow_dropped_state=True")
    rekey = [d.name for d in blocking if d.remedy is Remedy.REKEY]
    if rekey:
        lines.append(f"  - other keys: sp.migrate(spark, pipeline, rekey={{{rekey[0]!r}: "
                     "<new key of an old key>})")
    values = [d.name for d in blocking if d.remedy is Remedy.TRANSFORM]
    if values:
        lines.append(f"  - other values: sp.migrate(spark, pipeline, transform={{{values[0]!r}: "
                     "<new value of an old value>})")
    if Remedy.STORAGE in remedies:
        lines.append("  - another storage (state_type= added or removed): sp.migrate(spark, "
                     "pipeline) converts it between JSON text and typed columns")
    if Remedy.RECODE in remedies:
        lines.append("  - another codec: a migration re-encodes the values (sp.migrate(spark, "
                     "pipeline) when nothing else differs)")
    lines.append("  - or run the pipeline as it was, or give it a new name to start without state. "
                 "The Dagster job migrate_state does the same; see the docs' \"Changing a "
                 "running pipeline\" (docs/pages/guides/changing-pipelines.md).")
    return "\n".join(lines)
