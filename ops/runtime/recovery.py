"""Recovery: what a run starts from, read from the pipeline's last checkpoint and plans.

:meth:`Recovery.recover` returns a :class:`Recovered` value. On the way it checks that the
pipeline still hashes keys into the checkpoint's key groups and still reads its state as the
checkpoint recorded it (:mod:`.meaning`), drops state no operator keeps now when allowed, and
finishes a reset to an older checkpoint that a run had not finished. How the run stores each
state (text or typed columns, :mod:`.storage`) is settled here, once, from the latest
checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state import (
    DEFAULT_KEY_GROUPS,
    BatchPlan,
    BatchPlans,
    Checkpoint,
    CheckpointLog,
    ConfigError,
    PipelineChangedError,
    StateStore,
    StateTypes,
    delta_io,
    fault_point,
    restore_all,
)
from state.lake import TransactionWarmer, tables
from state.offline import dropped, migrate_state

from ..context import RunContext
from .hooks import RunHooks
from .meaning import Remedy, describe, differences, refusal
from .storage import state_types

if TYPE_CHECKING:
    from state import PipelineLayout

    from .protocol import RunnablePipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    """What a run starts from: the last checkpoint (``None`` for a new pipeline), the run's
    context and state store as of it, and the batches planned after it by a run that died
    (``replaying``: the next batch is one of them); how it stores each state (``storage``) and
    what its state means (``meaning``, recorded with each checkpoint)."""

    last: Checkpoint | None
    ctx: RunContext
    store: StateStore
    batch_id: int
    offsets: dict[str, Any]
    pending_plans: dict[int, BatchPlan]
    replaying: bool
    storage: StateTypes
    meaning: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Recovery:
    """The parts of a run that recovery reads and writes."""

    pipeline: RunnablePipeline
    spark: SparkSession
    layout: PipelineLayout
    checkpoints: CheckpointLog
    plans: BatchPlans
    hooks: RunHooks
    warmer: TransactionWarmer
    allow_dropped_state: bool = False

    def recover(self) -> Recovered:
        """Read the last checkpoint; restore tracked variables; let hooks truncate global state.

        A pipeline's own tables are created by their first commit, not here: the state table by
        the first checkpoint, the plans table by the first plan, dead letters by the first
        rejected record. Creating them empty first cost a fresh pipeline a second or two (an
        empty commit each, then a full reading of each new snapshot before its first
        idempotent append)."""
        tables.clear_staging(self.layout.staging)
        latest = self.checkpoints.latest()
        storage = state_types(self.pipeline, self.layout.state, latest)  # once per run
        meaning = describe(self.pipeline.stream.operators, storage)
        last = self.checked(latest, meaning)
        epoch = last.epoch if last else 0
        ctx = RunContext(self.spark, self.layout, epoch, run_id=self.hooks.ctx.run_id)
        self.pipeline.source.setup(ctx)
        if last and last.reset_to_batch is not None:
            last = self.finish_reset(ctx, last, last.reset_to_batch)
        recovered = self.recovered(last, ctx, storage, meaning)
        restore_all(self.pipeline.tracked, last.tracked if last else {})
        self.hooks.ctx.checkpoint_id = last.checkpoint_id if last else None
        self.hooks.ctx.batch_id = recovered.batch_id
        self.hooks.recover(last.markers if last else {})
        if last and not delta_io.serves(self.layout.state):
            # the next checkpoint commit is near, and Spark makes it (delta-rs commits where it
            # serves _state: warming Spark's snapshot there took a cold run's cores, 2.9 s
            # instead of 1.5 s for a batch of 1M events)
            self.warmer.note(self.layout.state)
            log.info("%s: recovered checkpoint %d (batch %d); %d planned batch(es) to replay",
                     self.pipeline.name, last.checkpoint_id, last.batch_id,
                     len(recovered.pending_plans))
        return recovered

    def recovered(self, last: Checkpoint | None, ctx: RunContext, storage: StateTypes,
                  meaning: dict[str, dict[str, Any]]) -> Recovered:
        """The run's start as of ``last``: its state store, position and plans left to replay."""
        store = StateStore(self.spark, self.layout, last.checkpoint_id if last else None,
                           key_groups=last.key_groups if last else DEFAULT_KEY_GROUPS,
                           state_types=storage)
        batch_id = last.batch_id if last else 0
        pending = self.plans.after(batch_id, ctx.epoch)
        return Recovered(last, ctx, store, batch_id, dict(last.offsets) if last else {},
                         pending, replaying=bool(pending),  # plans left by a run that died
                         storage=storage, meaning=meaning)

    def checked(self, last: Checkpoint | None,
                meaning: dict[str, dict[str, Any]]) -> Checkpoint | None:
        """``last``, once its key groups and ``meaning`` (what the pipeline's state means now)
        are checked (maybe a migration after it)."""
        if last is None:
            return None
        self.check_key_groups(last)
        return self.check_meaning(last, meaning)

    def check_key_groups(self, last: Checkpoint) -> None:
        """The pipeline must hash keys into the key groups its first checkpoint fixed."""
        if last.key_groups != self.pipeline.key_groups:
            raise ConfigError(
                f"pipeline {self.pipeline.name!r} was created with {last.key_groups} key groups "
                f"and is now defined with {self.pipeline.key_groups}; the number is fixed at "
                f"creation (keys would change groups): use .with_key_groups({last.key_groups})")

    def check_meaning(self, last: Checkpoint, meaning: dict[str, dict[str, Any]]) -> Checkpoint:
        """The pipeline must read its state as ``last`` recorded it (:mod:`.meaning`): a
        difference that would misread or leave state behind stops the run, listing each and the
        ways forward; others are logged. With ``allow_dropped_state``, state no operator keeps
        now is dropped first, by a migration (a new checkpoint, returned). Only a declared type
        is refused here: an inferred one follows what is stored (:mod:`.storage`)."""
        typed = sorted(name for name, entry in meaning.items() if entry.get("storage"))
        if last.operators is None and typed:  # whatever is stored of them is text, if any
            raise PipelineChangedError(
                f"pipeline {self.pipeline.id!r}: checkpoint {last.checkpoint_id} was written "
                "before checkpoints recorded how their state is stored, and state "
                f"{typed} is now declared typed (state_type=), so nothing ran. Run the pipeline "
                "once as it was (its next checkpoint records its state), then sp.migrate(spark, "
                "pipeline) converts that state to typed columns.")
        if last.operators is None:
            log.info("%s: checkpoint %d was written before checkpoints recorded what their state "
                     "means; the next checkpoint records it", self.pipeline.name, last.checkpoint_id)
            return last
        tracked = [variable.name for variable in self.pipeline.tracked]
        found = differences(last.operators, meaning, last.tracked, tracked)
        for difference in found:
            if not difference.blocking:
                log.info("%s: state %r: %s", self.pipeline.name, difference.name, difference.what)
        blocking = [d for d in found if d.blocking]
        if not blocking:
            return last
        if not (self.allow_dropped_state
                and all(d.remedy is Remedy.DROP_OR_RENAME for d in blocking)):
            raise PipelineChangedError(refusal(self.pipeline.id, last.checkpoint_id, found))
        return self.drop_left_behind(last, tracked, meaning)

    def drop_left_behind(self, last: Checkpoint, tracked: list[str],
                         meaning: dict[str, dict[str, Any]]) -> Checkpoint:
        """Drop the state of ``last`` that no operator (or tracked variable) of the pipeline
        keeps now, as a migration; return its checkpoint."""
        assert last.operators is not None
        names = sorted(set(last.operators) - set(meaning))
        migrated = migrate_state(
            self.spark, self.layout, dropped(names), operators=meaning,
            tracked={name: value for name, value in last.tracked.items() if name in tracked},
            label=f"allow_dropped_state: dropped {', '.join(names) or 'tracked variables'}",
            run_id=self.hooks.ctx.run_id)
        log.warning("%s: allow_dropped_state: dropped the state no operator keeps now (%s; "
                    "%d key(s)) as checkpoint %d; reset_to_checkpoint(%d) brings it back",
                    self.pipeline.name, ", ".join(names + sorted(set(last.tracked) - set(tracked))),
                    sum(migrated.deleted.values()), migrated.checkpoint.checkpoint_id,
                    last.checkpoint_id)
        return migrated.checkpoint

    def finish_reset(self, ctx: RunContext, reset: Checkpoint, after: int) -> Checkpoint:
        """After a reset to an older checkpoint (``reset``, back to batch ``after``): remove what
        the abandoned batches wrote to sinks and dead letters, then commit a plain copy of the
        reset checkpoint to say it is done, and return it. Until then no batch runs, so every
        row past the reset point is the abandoned timeline's and the cleanup can safely be
        redone after a crash."""
        for sink in self.pipeline.sinks:
            sink.discard_after(ctx, after)
        tables.delete_where(self.spark, self.layout.dead_letters, F.col("batch_id") > after)
        fault_point("reset_cleanup")
        done = dataclasses.replace(reset, checkpoint_id=reset.checkpoint_id + 1,
                                   reset_to_batch=None, resumed_from=None, run_id=ctx.run_id,
                                   created_at=time.time())
        self.checkpoints.commit(done, pd.DataFrame())
        log.info("%s: reset to batch %d finished; sinks hold no later batch", self.pipeline.name,
                 after)
        return done
