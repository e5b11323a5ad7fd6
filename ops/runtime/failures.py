"""A batch that fails the same way twice: the second failure says how to get past it.

A failing batch commits nothing, and the next run replays it from its recorded plan: the same
rows, so an operator that fails on them (a bug, data it cannot take) fails again, run after
run. Each failure of an operator is therefore recorded in the pipeline's ``_failures`` table
(batch id, epoch, operator, error, time, run). When the same batch of the same epoch fails in
the same operator again, the error raised is one that names the operator, shows the first
input rows that reached it and the ways forward (fix and rerun, reset, discard the batch's
plan), with the original error as its cause, and keeps the original's type where it can.

The record is an append of its own, outside the protocol: nothing reads it back but this
module, so it cannot change what a batch writes or what recovery restores (exactly-once holds
as before). A reset or ``discard_plans`` starts a new epoch, which counts afresh. Writing it
never hides the batch's own error: a failed record is logged and the error raised as it was.
"""

from __future__ import annotations

import logging
import time
from typing import NoReturn

import pandas as pd
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from state import StreamError, delta_io
from state.lake import tables

from ..context import RunContext
from ..errors import OperatorError

log = logging.getLogger(__name__)

FAILURE_SCHEMA = StructType([
    StructField("batch_id", LongType(), False),
    StructField("epoch", LongType(), False),
    StructField("operator", StringType(), False),
    StructField("error", StringType(), True),
    StructField("failed_at", DoubleType(), False),
    StructField("run_id", StringType(), True),
])

SHOWN_ROWS = 3  # input rows an error shows
_SHOWN_CHARACTERS = 1500  # of them at most: wide rows are cut


class OperatorFailure(OperatorError):
    """An operator's error as distributed mode's driver raises it: the operator, and the first
    rows that reached it on the task that failed (as text), for :func:`failed`."""

    def __init__(self, message: str, operator: str, rows: str | None = None):
        super().__init__(message)
        self.operator = operator
        self.rows = rows


def first_rows(frame: pd.DataFrame) -> str:
    """The first :data:`SHOWN_ROWS` rows of ``frame`` as text (cut when wide)."""
    if frame.empty:
        return "(no rows: a batch run for due timers)" if not len(frame.columns) else "(no rows)"
    text = frame.head(SHOWN_ROWS).to_string(max_colwidth=60)
    more = f"\n... ({len(frame)} rows in all)" if len(frame) > SHOWN_ROWS else ""
    return (text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS] + " ...") + more


def failed(ctx: RunContext, batch_id: int, operator: str, rows: pd.DataFrame | str | None,
           error: Exception) -> NoReturn:
    """Record that ``operator`` failed batch ``batch_id`` with ``error``, then raise: ``error``
    itself the first time, else an error that says the batch failed this way before and how
    to get past it (see the module docstring). ``rows``: what reached the operator."""
    path = ctx.layout.failures
    try:
        before = _failures_before(ctx, batch_id, operator)
        tables.append_rows(ctx.spark, pd.DataFrame([{
            "batch_id": batch_id, "epoch": ctx.epoch, "operator": operator,
            "error": f"{type(error).__name__}: {error}"[:2000], "failed_at": time.time(),
            "run_id": ctx.run_id}]), path, schema=FAILURE_SCHEMA, again_soon=False)
    except Exception:  # the batch's own error is what the run must raise
        log.warning("%s: recording batch %d's failure in %s failed", ctx.pipeline, batch_id,
                    path, exc_info=True)
        raise error from None
    if not before:
        raise error
    shown = first_rows(rows) if isinstance(rows, pd.DataFrame) else rows or "(not known)"
    raise _again(error, _advice(ctx, batch_id, operator, before, shown)) from error


def _failures_before(ctx: RunContext, batch_id: int, operator: str) -> int:
    """How many times ``operator`` failed batch ``batch_id`` of this epoch before."""
    path = ctx.layout.failures
    if not tables.exists(ctx.spark, path):
        return 0
    found = delta_io.rows_at_least(path, "batch_id", batch_id)
    if found is not None:  # without Spark, where delta-rs reads the table
        same = pc.and_(pc.and_(pc.equal(found["batch_id"], batch_id),
                               pc.equal(found["epoch"], ctx.epoch)),
                       pc.equal(found["operator"], operator))
        return int(pc.sum(same.cast("int64")).as_py() or 0)
    return tables.read(ctx.spark, path).where(
        (F.col("batch_id") == batch_id) & (F.col("epoch") == ctx.epoch)
        & (F.col("operator") == operator)).count()


def _advice(ctx: RunContext, batch_id: int, operator: str, before: int, rows: str) -> str:
    name = ctx.pipeline
    return (
        f"pipeline {name!r}, batch {batch_id} failed in operator {operator!r} again "
        f"({before + 1} times in all, recorded in {ctx.layout.failures}): a rerun replays the "
        "same rows, so it fails the same way until something changes. The first rows that "
        f"reached {operator!r}:\n{rows}\n"
        "Ways forward (docs: guides/pipelines.md, 'A batch that keeps failing'):\n"
        f"  1. fix {operator!r} (its code, or what it expects of these rows) and run again: "
        "the batch replays with the fixed pipeline;\n"
        f"  2. sp.reset_to_checkpoint(spark, pipeline, <checkpoint id>): back to an earlier "
        "checkpoint (a new epoch), the batches after it are processed again;\n"
        "  3. sp.discard_plans(spark, pipeline): drop the plans of the batches after the last "
        "checkpoint, so the next run plans them again (after changing the source's limits or "
        "the data it reads).\n"
        "The error:")


def _again(error: Exception, advice: str) -> Exception:
    """``error``'s message after ``advice``, as an error of ``error``'s type where that type
    takes a message (lakestream's do), else an :class:`OperatorError`."""
    message = f"{advice} {type(error).__name__}: {error}"
    if isinstance(error, StreamError):
        try:
            return type(error)(message)
        except TypeError:
            pass
    return OperatorError(message)
