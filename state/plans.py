"""Batch plans: the exact source slice of each micro-batch, recorded before the batch runs.

A replayed batch reuses its recorded plan, so its input never changes once planned; when two
runs race to plan the same batch, the first plan written wins and both use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from . import delta_io, tables
from .direct import Outcome
from .errors import CorruptStateError
from .layout import PipelineLayout

PLAN_SCHEMA = StructType([
    StructField("batch_id", LongType(), False),
    StructField("epoch", LongType(), False),
    StructField("ranges", StringType(), False),
    StructField("planned_at", DoubleType(), False),
])


@dataclass(frozen=True)
class BatchPlan:
    """Batch ``batch_id`` reads, per source, positions after ``start`` up to and including ``end``.

    ``planned_at`` (epoch seconds) is the batch's processing time: recorded with the plan, so a
    replay fires the same processing-time timers as the first attempt. A source with no range
    reads nothing (a batch run for its timers alone).
    """

    batch_id: int
    ranges: dict[str, tuple[Any, Any]]
    planned_at: float = 0.0

    @property
    def time_ms(self) -> int:
        """The batch's processing time in epoch milliseconds."""
        return int(self.planned_at * 1000)

    def end_positions(self) -> dict[str, Any]:
        return {source: end for source, (_, end) in self.ranges.items()}


class BatchPlans:
    """The ``_batches`` table of one pipeline."""

    def __init__(self, spark: SparkSession, layout: PipelineLayout):
        self._spark = spark
        self._layout = layout

    def after(self, batch_id: int, epoch: int) -> dict[int, BatchPlan]:
        """Plans recorded for batches after ``batch_id`` in ``epoch`` (left by a run that died)."""
        if not tables.exists(self._spark, self._layout.batches):  # the first plan creates it
            return {}
        found = delta_io.rows_at_least(self._layout.batches, "batch_id", batch_id + 1)
        if found is not None:  # without Spark: only the files of later batches are read
            rows = found.filter(pc.equal(found["epoch"], epoch)).to_pylist() if found.num_rows else []
        else:
            rows = [row.asDict() for row in tables.read(self._spark, self._layout.batches)
                    .where((F.col("batch_id") > batch_id) & (F.col("epoch") == epoch))
                    .select("batch_id", "ranges", "planned_at").collect()]
        plans: dict[int, BatchPlan] = {}
        for row in rows:
            if row["batch_id"] in plans:
                raise CorruptStateError(
                    f"{self._layout.batches} holds two plans for batch {row['batch_id']}")
            plans[row["batch_id"]] = _decode(row["batch_id"], row["ranges"], row["planned_at"])
        return plans

    def record(self, plans: list[BatchPlan], epoch: int, run_id: str) -> dict[int, BatchPlan]:
        """Record consecutive ``plans`` in one commit unless plans from the first one's batch on
        exist already; return the plans that stand, by batch id (first plan wins)."""
        first = plans[0].batch_id
        rows = pd.DataFrame([{"batch_id": plan.batch_id, "epoch": epoch,
                              "ranges": json.dumps(plan.ranges),
                              "planned_at": plan.planned_at}
                             for plan in plans])
        stamp = json.dumps({"batch_id": first, "run_id": run_id})
        done = tables.append_rows(self._spark, rows, self._layout.batches, schema=PLAN_SCHEMA,
                                  txn=(f"{self._layout.pipeline}/plans@{epoch}", first),
                                  user_metadata=stamp, again_soon=False)  # many batches per plan
        if done is Outcome.COMMITTED or (
                done is None and stamp in tables.recent_metadata(self._spark, self._layout.batches)):
            return {plan.batch_id: plan for plan in plans}
        stored = self.after(first - 1, epoch)  # another run's plans won
        if first not in stored:
            raise CorruptStateError(
                f"plan of batch {first} is missing from {self._layout.batches} right after it "
                "was written")
        return stored


def _decode(batch_id: int, text: str, planned_at: float) -> BatchPlan:
    ranges = {source: tuple(bounds) for source, bounds in json.loads(text).items()}
    return BatchPlan(batch_id=batch_id, ranges=ranges, planned_at=planned_at)
