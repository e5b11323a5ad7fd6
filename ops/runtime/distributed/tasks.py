"""What an executor needs to run a stage for one batch, and which task runs which key groups."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from state import (
    StateTypes,
    decode_key,
    encode_key,
    key_groups,
)

from ...sinks import FileTarget
from ..instants import Instants
from .stages import Stage, is_event_time

KEY_COLUMN, BUCKET_COLUMN, PART_COLUMN = "__key", "__bucket", "__part"


@dataclass(frozen=True)
class TaskSpec:
    """What an executor needs to run a stage for one batch (shipped to it with the closure)."""

    pipeline: str
    batch_id: int
    key_fields: tuple[str, ...]
    inputs: dict[str, Any]
    key_groups: int
    buckets: int  # calls per keyed stage: each runs a contiguous range of key groups
    stage: Stage
    batch_time: int = 0  # the batch's processing time (epoch ms)
    operators: tuple[str, ...] = ()  # the pipeline's stateful operators (for errors)
    #: a clocked stage's operator -> stream time after the batch (see BatchScope.stream_time)
    stream_time: dict[str, int | None] = field(default_factory=dict)
    #: a timed map -> its watermark at the batch's start (see BatchScope.watermarks)
    watermarks: dict[str, int | None] = field(default_factory=dict)
    #: where a keyed stage's tasks read their keys' state themselves, as of which checkpoint,
    #: and how they reach it (see StateFiles); None: it is handed to them by a cogroup
    state_files: StateFiles | None = None
    #: the sinks whose files the (last) stage's tasks write themselves (see FileSink.file_target)
    sink_files: tuple[FileTarget, ...] = ()
    #: the stage's input columns that Spark's pandas conversion hands the tasks as naive times,
    #: which they turn back into the instants driver mode gives (see Instants)
    instants: Instants = Instants()
    #: the run's typed states (declared or inferred: ops.runtime.storage), which the tasks'
    #: stores read and write in typed columns
    state_types: StateTypes = StateTypes()

    @property
    def writes_state(self) -> bool:
        """Whether the tasks write their changed state's files (see StateFiles)."""
        return self.state_files is not None and self.state_files.checkpoint_id is not None

    def owning_bucket(self, encoded_keys: Any, groups: np.ndarray | None = None) -> np.ndarray:
        """The bucket of each stored state key: that of the key which owns it (a window's
        keys own each of their windows). ``groups``: the keys' own groups, if known."""
        operator = self.stage.operators[0]
        if is_event_time(operator):
            encoded_keys = [encode_key(operator.owner(decode_key(key))) for key in encoded_keys]
            groups = None  # the owners' groups, not the keys'
        if groups is None:
            groups = key_groups(encoded_keys, self.key_groups).astype("int64")
        return self.bucket(groups)

    def groups_of(self, bucket: int) -> tuple[int, int]:
        """The key groups ``first, end`` (``first <= group < end``) that bucket ``bucket`` (a
        :func:`partition_tags` value) runs: the inverse of :meth:`bucket`.

        >>> spec = TaskSpec("p", 1, (), {}, key_groups=10, buckets=4, stage=Stage((), ("k",)))
        >>> [spec.groups_of(tag) for tag in partition_tags(4)]
        [(0, 3), (3, 5), (5, 8), (8, 10)]
        """
        index = partition_tags(self.buckets).index(bucket)
        first = -(-index * self.key_groups // self.buckets)
        return first, -(-(index + 1) * self.key_groups // self.buckets)

    def bucket(self, group: Any) -> Any:
        """The bucket (one operator call) that runs key group ``group``: an int, a numpy array
        or a Spark column of them (one formula for rows, state and the check). A bucket's id
        is the :func:`partition_tags` value of its range of groups, so that each bucket has a
        shuffle partition, and a task, of its own."""
        tags = partition_tags(self.buckets)
        if isinstance(group, Column):
            index = F.floor(group * self.buckets / self.key_groups).cast("int")
            return F.element_at(F.array(*map(F.lit, tags)), index + 1)
        return np.asarray(tags)[group * self.buckets // self.key_groups]


@dataclass(frozen=True)
class StateFiles:
    """How a keyed stage's tasks read their keys' state from ``_state``'s files themselves
    (:meth:`StateStore.of_files`), skipping the Spark read of the state and its shuffle: the
    table, the checkpoint the batch starts from, and the object store's settings from the
    driver's environment (credentials, as Spark's own settings carry them to executors)."""

    path: str
    as_of: int | None  # None: the pipeline's first checkpoint is this batch's (nothing stored)
    storage: dict[str, str] = field(default_factory=dict, repr=False)  # credentials, maybe
    #: the checkpoint the batch's changed state goes into, when the tasks write it as
    #: ``_state`` files themselves (the driver commits them with the checkpoint's record, and
    #: no state row passes through Spark); ``None``: they return the rows
    checkpoint_id: int | None = None


@functools.cache
def partition_tags(partitions: int) -> tuple[int, ...]:
    """For each shuffle partition ``p``, the smallest int that Spark's hash partitioning
    (Murmur3, seed 42, of an int column) sends to ``p``. Bucket ids are these, so that
    ``repartition(n, bucket)`` gives every bucket its own task: plain ids 0…n-1 collide (8
    buckets filled 6 of 8 partitions), and the shuffle Spark plans for a cogroup by itself
    is coalesced by adaptive execution into one task when the batch is small.

    >>> partition_tags(4)
    (12, 6, 2, 0)
    """
    tags: dict[int, int] = {}
    candidate = 0
    while len(tags) < partitions:
        tags.setdefault(_murmur3_int(candidate) % partitions, candidate)
        candidate += 1
    return tuple(tags[p] for p in range(partitions))


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a 32-bit int (Murmur3 x86_32), as a signed int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotl((value * 0xCC9E2D51) & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h1 = ((h1 ^ (h1 >> shift)) * factor) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1

