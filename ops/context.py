"""What sources, operators and sinks are handed while a pipeline runs.

:class:`RunContext` is one run of one pipeline (sources and sinks get it); :class:`BatchScope` is
one batch as an operator sees it. Both are plain values built by the runtime: nothing here does
I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession

from state import BatchPlan, PipelineLayout, StateStore


@dataclass(frozen=True)
class RunContext:
    """One run of one pipeline: the Spark session, the pipeline's tables and the current epoch.

    A source reading a batch's plan is handed the run's context for that plan
    (:meth:`reading`): ``sorted_rows`` when the plan was made by a release that numbered a
    Delta table's rows by sorting on every column, so that its replay numbers them alike.
    """

    spark: SparkSession
    layout: PipelineLayout
    epoch: int
    run_id: str
    sorted_rows: bool = False

    @property
    def pipeline(self) -> str:
        return self.layout.pipeline

    def reading(self, plan: BatchPlan) -> RunContext:
        """This context for a source reading ``plan``'s input."""
        return self if plan.sorted_rows == self.sorted_rows else replace(self, sorted_rows=plan.sorted_rows)

    def txn(self, writer: str, batch_id: int) -> tuple[str, int]:
        """Delta idempotent-write id for ``writer`` at ``batch_id`` in the current epoch."""
        return (f"{self.pipeline}/{writer}@{self.epoch}", batch_id)


@dataclass(frozen=True)
class BatchScope:
    """What an operator sees of the batch it runs in.

    ``pipeline`` and ``batch_id`` name it; ``key_fields`` are the stream's key columns (empty for
    an unkeyed stream); ``store`` holds the run's managed state (``store.operator(name,
    initial)`` is one operator's); ``inputs`` is the batch's recorded plan: source ranges and the
    versions of tables it looks up, so a replay sees what the first attempt saw.

    In distributed mode a task sees only some keys, so what spans them all comes from the
    runtime: ``stream_time`` (operator name -> stream time after the batch, epoch ms, for
    event-time operators, whose rows carry the time before each) and ``counts`` (what the
    operators report, such as late records, summed over tasks). Both empty on the driver.
    ``watermarks``: likewise, operator name -> watermark at the batch's start, for maps with
    event-time timers. ``batch_time`` is the batch's processing time (epoch ms, from its plan);
    ``operators`` the names of the pipeline's stateful operators (for errors).
    """

    pipeline: str
    batch_id: int
    key_fields: tuple[str, ...]
    store: StateStore
    inputs: Mapping[str, Any] = field(default_factory=dict)
    stream_time: Mapping[str, int | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    watermarks: Mapping[str, int | None] = field(default_factory=dict)
    batch_time: int = 0
    operators: tuple[str, ...] = ()

    @property
    def spark(self) -> SparkSession:
        """The run's Spark session (for operators that read tables, such as joins). Operators
        running on executors (distributed mode) have none."""
        spark = self.store.spark
        if spark is None:
            raise RuntimeError(f"pipeline {self.pipeline!r}: an operator asked for the Spark "
                               "session on an executor (distributed mode); run in driver mode")
        return spark

    def where(self, operator: str, key: Any = None) -> str:
        """``pipeline 'p', operator 'o', batch 3[, key 'k']``: the start of an error message."""
        place = f"pipeline {self.pipeline!r}, operator {operator!r}, batch {self.batch_id}"
        return place if key is None else f"{place}, key {key!r}"
