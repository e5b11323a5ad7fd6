"""The checkpoint record: what a pipeline needs to resume, stored as the value of one row of
each checkpoint's commit (``operator='__checkpoint__'``)."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..contract.keygroups import DEFAULT_KEY_GROUPS


def next_checkpoint_id(previous: Checkpoint | None) -> int:
    """The id of the checkpoint after ``previous`` (1 for a pipeline's first).

    >>> next_checkpoint_id(None)
    1
    """
    return previous.checkpoint_id + 1 if previous else 1


@dataclass(frozen=True)
class Checkpoint:
    """What a pipeline needs to resume: the last batch included and everything saved with it.

    ``epoch`` changes when an operator rewinds the pipeline (reset to an older checkpoint), so the
    idempotency keys of later writes never collide with those of the abandoned timeline.
    """

    checkpoint_id: int
    batch_id: int
    offsets: dict[str, Any] = field(default_factory=dict)
    tracked: dict[str, str] = field(default_factory=dict)
    markers: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    run_id: str = ""
    created_at: float = 0.0
    # Set by a reset to an older checkpoint until sinks hold no batch after this one again.
    reset_to_batch: int | None = None
    # The checkpoint a reset went back to: this one's predecessor in the pipeline's history.
    resumed_from: int | None = None
    # How many key groups the pipeline's keys hash into; fixed by its first checkpoint (records
    # written before key groups existed read as the default, which their keys then take).
    key_groups: int = DEFAULT_KEY_GROUPS
    # When the earliest timer held then falls due (epoch ms: the ms after its deadline, as a
    # timer fires strictly after it; now, when an event-time timer is due under the
    # watermark): a run started at or after it fires timers even with no new input.
    wake_at: int | None = None
    # What the state means: per state name, the operator keeping it, its keys, codec and value
    # shape (``ops.runtime.meaning``). ``None`` in records written before it was recorded.
    operators: dict[str, Any] | None = None
    # The migration this checkpoint made (``ops.operating.migrate``), ``None`` for a batch's.
    migration: str | None = None

    @property
    def predecessor(self) -> int | None:
        if self.resumed_from is not None:
            return self.resumed_from
        return self.checkpoint_id - 1 if self.checkpoint_id > 1 else None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """The record ``text`` holds; fields a later release added are left out, so a pipeline
        can go back to this release after running a newer one."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in json.loads(text).items() if name in known})


def new_checkpoint(previous: Checkpoint | None, *, batch_id: int, offsets: dict[str, Any],
                   tracked: dict[str, str], markers: dict[str, Any], run_id: str,
                   key_groups: int = DEFAULT_KEY_GROUPS, wake_at: int | None = None,
                   operators: dict[str, Any] | None = None) -> Checkpoint:
    """The checkpoint that follows ``previous`` (or the first one, with ``key_groups``: later
    ones keep the first one's); ``operators``: what its state means."""
    return Checkpoint(
        checkpoint_id=next_checkpoint_id(previous),
        batch_id=batch_id, offsets=offsets, tracked=tracked, markers=markers,
        epoch=previous.epoch if previous else 0, run_id=run_id, created_at=time.time(),
        key_groups=previous.key_groups if previous else key_groups, wake_at=wake_at,
        operators=operators)
