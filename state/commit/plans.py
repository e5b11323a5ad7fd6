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

from .. import delta_io
from ..errors import CorruptStateError
from ..lake import tables
from ..lake.direct import Outcome
from ..layout import PipelineLayout

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
    #: Planned by a release that numbered a Delta table's rows by sorting on every column, not
    #: in the table's own order: a replay numbers them as the first attempt did (state and the
    #: sinks it wrote agree).
    sorted_rows: bool = False

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
                              "ranges": _encode(plan),
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


#: In a plan's ``ranges`` (besides sources' ranges and pinned tables' versions): how its rows
#: are numbered. Plans without it were made before rows kept a Delta table's own order.
_ROW_ORDER = "order:rows"


def _encode(plan: BatchPlan) -> str:
    """A plan's ``ranges`` column: its ranges, and (since rows keep a table's order) that order."""
    return json.dumps({**plan.ranges, **({} if plan.sorted_rows else {_ROW_ORDER: "source"})})


def _decode(batch_id: int, text: str, planned_at: float) -> BatchPlan:
    """The plan a ``ranges`` column holds (:func:`_encode`).

    >>> _decode(3, '{"events": [0, 5], "order:rows": "source"}', 0.0).sorted_rows
    False
    >>> _decode(3, '{"events": [0, 5]}', 0.0)  # recorded by an earlier release
    BatchPlan(batch_id=3, ranges={'events': (0, 5)}, planned_at=0.0, sorted_rows=True)
    """
    found = json.loads(text)
    order = found.pop(_ROW_ORDER, None)
    ranges = {source: tuple(bounds) for source, bounds in found.items()}
    return BatchPlan(batch_id=batch_id, ranges=ranges, planned_at=planned_at, sorted_rows=order is None)
