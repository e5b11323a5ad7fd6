"""Rolling a pipeline's state back to an older checkpoint, as a new checkpoint.

Nothing is rewritten in place: the rollback is one more checkpoint commit whose changelog rows
put every key back to its value at the target checkpoint, and whose record copies the target's
offsets, tracked variables and hook markers. It opens a new epoch, so the batches that follow
use idempotency ids the abandoned timeline never used, and it carries ``reset_to_batch`` until
the executor has removed the abandoned batches' sink rows (see ``ops.executor``).

Discarding the batch plans recorded after the latest checkpoint is a reset to that checkpoint:
the new epoch's runs read no plan of the old one and plan again from the checkpoint's position.
"""

from __future__ import annotations

import time
from functools import reduce
from operator import and_

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..commit.log import CheckpointLog
from ..commit.plans import BatchPlans
from ..commit.record import Checkpoint
from ..contract.schema import CHECKPOINT_OPERATOR
from ..contract.types import key_columns, value_columns
from ..errors import StateError
from ..layout import PipelineLayout
from ..read.latest import latest_per_key
from ..read.queries import changelog_as_of


def _live_state(changelog: DataFrame, upto: int, typed: StructType) -> DataFrame:
    """The live rows of ``changelog`` up to checkpoint ``upto``, with the ``typed`` columns
    (a table's, now: an older version of it may lack some, which are null then)."""
    for field in typed:
        if field.name not in changelog.columns:
            changelog = changelog.withColumn(field.name, F.lit(None).cast(field.dataType))
    rows = changelog.where((F.col("operator") != CHECKPOINT_OPERATOR) & (F.col("checkpoint_id") <= upto))
    return (latest_per_key(rows).where(~F.col("deleted"))
            .select("operator", "key", *key_columns(typed.names), "value", *value_columns(typed.names),
                    "key_group"))


def revert_rows(spark: SparkSession, layout: PipelineLayout, checkpoint_id: int) -> pd.DataFrame:
    """Changelog rows (without ``checkpoint_id``) that turn the latest state into the state at
    ``checkpoint_id``: the old value where it differs, a tombstone where the key did not exist.
    A key is ``key`` with the typed key columns, a value ``value`` with the typed value
    columns (see :func:`~state.read.latest.latest_per_key`); both compared with nulls equal."""
    then_log, _ = changelog_as_of(spark, layout, checkpoint_id)
    now_log, latest = changelog_as_of(spark, layout, None)
    typed = StructType([field for field in now_log.schema
                        if field.name in {*key_columns(now_log.columns), *value_columns(now_log.columns)}])
    then = _live_state(then_log, checkpoint_id, typed).alias("then")
    now = _live_state(now_log, latest, typed).alias("now")
    keys = ["operator", "key", *key_columns(then.columns)]
    values = ["value", *value_columns(then.columns)]
    same_key = [F.col(f"then.{c}").eqNullSafe(F.col(f"now.{c}")) for c in keys]
    same_value = [F.col(f"then.{c}").eqNullSafe(F.col(f"now.{c}")) for c in values]
    # a key only now: its columns come from "now", and a tombstone is written for it
    there = F.col("then.operator").isNotNull()
    differing = (then.join(now, reduce(and_, same_key), "full_outer")
                 .where(~reduce(and_, same_value))
                 .select(*(F.coalesce(F.col(f"then.{c}"), F.col(f"now.{c}")).alias(c) for c in keys),
                         *(F.when(there, F.col(f"then.{c}")).alias(c) for c in values),
                         (~there).alias("deleted"),
                         # a typed key's group, which it has no text to be hashed from again
                         F.coalesce(F.col("then.key_group"), F.col("now.key_group")).alias("key_group")))
    return differing.toPandas()


def reset_checkpoint(spark: SparkSession, layout: PipelineLayout, checkpoint_id: int,
                     run_id: str) -> Checkpoint:
    """Commit a checkpoint equal to ``checkpoint_id`` in a new epoch; return it."""
    log = CheckpointLog(spark, layout)
    latest = log.latest()
    if latest is None:
        raise StateError(f"pipeline {layout.pipeline!r} has no checkpoint to reset to")
    target = log.get(checkpoint_id)
    if target is None:
        raise StateError(f"pipeline {layout.pipeline!r} has checkpoints up to "
                         f"{latest.checkpoint_id}; checkpoint {checkpoint_id} is not retained")
    lineage = log.lineage(latest)
    if checkpoint_id not in lineage:
        raise StateError(
            f"pipeline {layout.pipeline!r}: checkpoint {checkpoint_id} was abandoned by an earlier "
            f"reset (its sink output is gone); reset to one of {sorted(lineage)}")
    # back to the latest itself (plans discarded): no state to put back, no need to compare
    rows = pd.DataFrame() if checkpoint_id == latest.checkpoint_id else revert_rows(
        spark, layout, checkpoint_id)
    reset = Checkpoint(checkpoint_id=latest.checkpoint_id + 1, batch_id=target.batch_id,
                       offsets=target.offsets, tracked=target.tracked, markers=target.markers,
                       epoch=latest.epoch + 1, run_id=run_id, created_at=time.time(),
                       reset_to_batch=target.batch_id, resumed_from=checkpoint_id,
                       key_groups=latest.key_groups, wake_at=target.wake_at,  # its timers are back
                       operators=target.operators)  # and what its state meant
    log.commit(reset, rows)
    return reset


def discard_plans(spark: SparkSession, layout: PipelineLayout, run_id: str,
                  key_groups: int) -> Checkpoint:
    """Abandon the batch plans recorded after the latest checkpoint (no checkpoint covers their
    batches, so nothing durable depends on them); return the checkpoint the next run starts from.

    With a checkpoint, this is a reset to it (:func:`reset_checkpoint`): a new epoch, whose runs
    read no plan of the old one and write under new idempotency ids, and whose recovery removes
    what the abandoned batches wrote to sinks. A pipeline that never checkpointed gets a first
    checkpoint that resets it to before its first batch (``key_groups`` as it would have fixed).
    A reset still to be finished is returned as it is: recovery finishes it. Raises
    :class:`StateError` when no plan is recorded after the latest checkpoint.
    """
    log = CheckpointLog(spark, layout)
    latest = log.latest()
    if latest is not None and latest.reset_to_batch is not None:
        return latest  # a reset (or an earlier discard) whose cleanup a crash interrupted
    batch_id, epoch = (latest.batch_id, latest.epoch) if latest else (0, 0)
    if not BatchPlans(spark, layout).after(batch_id, epoch):
        where = (f"after checkpoint {latest.checkpoint_id} (batch {batch_id}, epoch {epoch})"
                 if latest else "and it has no checkpoint")
        raise StateError(f"pipeline {layout.pipeline!r}: no batch plan is recorded {where}, so "
                         "there is nothing to discard: the next run plans from "
                         f"{'that checkpoint' if latest else 'the start'}")
    if latest is not None:
        return reset_checkpoint(spark, layout, latest.checkpoint_id, run_id)
    reset = Checkpoint(checkpoint_id=1, batch_id=0, epoch=1, run_id=run_id, created_at=time.time(),
                       reset_to_batch=0, key_groups=key_groups)
    log.commit(reset, pd.DataFrame())
    return reset
