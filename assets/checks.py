"""Asset checks of a pipeline asset: its checkpoint, its global tables and its dead-letter ratio,
evaluated after every materialisation."""


from collections.abc import Iterator

import dagster as dg
from pyspark.sql import SparkSession

import ops
from ops import Pipeline, RunReport

CHECKPOINT_CHECK = "checkpoint_consistent"
GLOBAL_TABLE_CHECK = "global_tables_within_marker"
DEAD_LETTER_CHECK = "dead_letters_below_threshold"


def check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    """The checks of the pipeline asset ``key``. Only the checkpoint check blocks (a failure
    stops the run's downstream assets): they would read output a broken checkpoint no longer
    vouches for."""
    return [
        dg.AssetCheckSpec(CHECKPOINT_CHECK, asset=key, blocking=True,
                          description="The last checkpoint is readable and consistent"),
        dg.AssetCheckSpec(GLOBAL_TABLE_CHECK, asset=key,
                          description="No global-table row beyond its checkpoint marker"),
        dg.AssetCheckSpec(DEAD_LETTER_CHECK, asset=key,
                          description="Dead letters below the configured share of records"),
    ]


def check_results(session: SparkSession, pipeline: Pipeline, report: RunReport, warehouse: str,
                  max_dead_letter_ratio: float, severity: dg.AssetCheckSeverity
                  ) -> Iterator[dg.AssetCheckResult]:
    """The result of each check in :func:`check_specs` after the run ``report`` describes; the
    dead-letter check fails with ``severity`` above ``max_dead_letter_ratio``."""
    problems = ops.checkpoint_problems(session, pipeline, warehouse)
    key = dg.AssetKey(pipeline.id)
    yield dg.AssetCheckResult(asset_key=key, check_name=CHECKPOINT_CHECK, passed=not problems,
                              metadata={"problems": "; ".join(problems) or "none",
                                        "checkpoint_id": report.checkpoint_id or -1})
    problems = ops.global_table_problems(session, pipeline, warehouse)
    yield dg.AssetCheckResult(asset_key=key, check_name=GLOBAL_TABLE_CHECK, passed=not problems,
                              metadata={"problems": "; ".join(problems) or "none"})
    ratio = report.dead_letters / report.rows_in if report.rows_in else 0.0
    yield dg.AssetCheckResult(
        asset_key=key, check_name=DEAD_LETTER_CHECK, passed=ratio <= max_dead_letter_ratio,
        severity=severity,
        metadata={"dead_letters": report.dead_letters, "rows_in": report.rows_in,
                  "ratio": round(ratio, 6), "threshold": max_dead_letter_ratio})
