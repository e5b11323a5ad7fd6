"""What sources, operators and sinks are handed while a pipeline runs."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from state import PipelineLayout


@dataclass(frozen=True)
class RunContext:
    """One run of one pipeline: the Spark session, the pipeline's tables and the current epoch."""

    spark: SparkSession
    layout: PipelineLayout
    epoch: int
    run_id: str

    @property
    def pipeline(self) -> str:
        return self.layout.pipeline

    def txn(self, writer: str, batch_id: int) -> tuple[str, int]:
        """Delta idempotent-write id for ``writer`` at ``batch_id`` in the current epoch."""
        return (f"{self.pipeline}/{writer}@{self.epoch}", batch_id)
