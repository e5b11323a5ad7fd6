"""Asset checks of a pipeline asset, each a definition of its own (``@dg.asset_check``): it runs
with the asset (a job that selects the asset runs its checks after it, in the same run) or alone
(the UI's *Checks* tab, ``dg.materialize(..., selection=AssetSelection.checks(...))``). Every
check reads what the warehouse holds, so a check run alone says the same as one run with the
asset: the checkpoint, the global tables, and the dead letters of the last run that read input.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

import ops
from ops import Pipeline
from state import PipelineLayout
from state.lake import tables

from .resources import SparkResource, WarehouseResource

CHECKPOINT_CHECK = "checkpoint_consistent"
GLOBAL_TABLE_CHECK = "global_tables_within_marker"
DEAD_LETTER_CHECK = "dead_letters_below_threshold"
# How many of the asset's latest materialisations the dead-letter check looks through for the
# last one that read input (runs that found nothing new come in between).
_LOOKBACK = 25
EAGER = dg.AutomationCondition.eager()


class DeadLetterCheckConfig(dg.Config):
    """Launchpad config of the dead-letter check."""

    max_dead_letter_ratio: float = Field(
        default=0.01, description="Dead letters / records read above which the check fails")


def make_pipeline_checks(pipeline: Pipeline, *,
                         dead_letter_severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.WARN,
                         automation_condition: dg.AutomationCondition | None = EAGER
                         ) -> list[dg.AssetChecksDefinition]:
    """The checks of ``pipeline``'s asset: :data:`CHECKPOINT_CHECK` (blocking: a failure stops
    the run's downstream assets, which would read output a broken checkpoint no longer vouches
    for), :data:`GLOBAL_TABLE_CHECK` and :data:`DEAD_LETTER_CHECK` (failing with
    ``dead_letter_severity``). They sit in the pipeline's pool, so a check never reads the
    tables while a run of the pipeline is writing them.

    A job that selects the asset runs its checks after it, in the same run. With
    ``automation_condition`` (default ``AutomationCondition.eager()``) the automation sensor
    runs them after a materialisation whose run left them out, and with the asset when it
    requests the asset itself (a run of a non-subsettable multi-asset requested by automation
    holds only the asset's keys, not its checks).

    >>> import ops as sp
    >>> prices = (sp.read.from_callback("ticks", schema={"sym": "string", "px": "double"})
    ...           .as_table("sym").write.to_table("latest")).named("prices")
    >>> sorted(key.name for checks in make_pipeline_checks(prices) for key in checks.check_keys)
    ['checkpoint_consistent', 'dead_letters_below_threshold', 'global_tables_within_marker']
    """
    return [_checkpoint_check(pipeline, automation_condition),
            _global_table_check(pipeline, automation_condition),
            _dead_letter_check(pipeline, dead_letter_severity, automation_condition)]


def _checkpoint_check(pipeline: Pipeline, condition: dg.AutomationCondition | None
                      ) -> dg.AssetChecksDefinition:
    return _problems_check(pipeline, condition, CHECKPOINT_CHECK, ops.checkpoint_problems,
                           "The last checkpoint is readable and consistent", blocking=True)


def _global_table_check(pipeline: Pipeline, condition: dg.AutomationCondition | None
                        ) -> dg.AssetChecksDefinition:
    return _problems_check(pipeline, condition, GLOBAL_TABLE_CHECK, ops.global_table_problems,
                           "No global-table row beyond its checkpoint marker")


def _problems_check(pipeline: Pipeline, condition: dg.AutomationCondition | None, name: str,
                    problems_of: Callable[[SparkSession, Pipeline, str], list[str]],
                    description: str, blocking: bool = False) -> dg.AssetChecksDefinition:
    """A check that passes when ``problems_of`` finds none in the warehouse."""
    @dg.asset_check(asset=dg.AssetKey(pipeline.id), name=name, blocking=blocking,
                    pool=f"lakestream_{pipeline.id}", automation_condition=condition,
                    description=description)
    def _check(spark: SparkResource, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        problems = problems_of(spark.lazy_session(), pipeline, warehouse.root)
        return dg.AssetCheckResult(passed=not problems,
                                   metadata={"problems": "; ".join(problems) or "none"})

    return _check


def _dead_letter_check(pipeline: Pipeline, severity: dg.AssetCheckSeverity,
                       condition: dg.AutomationCondition | None) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(pipeline.id)

    @dg.asset_check(asset=key, name=DEAD_LETTER_CHECK, pool=f"lakestream_{pipeline.id}",
                    automation_condition=condition,
                    description="Dead letters below the configured share of the records read by "
                                "the last run that read any")
    def _check(context: dg.AssetCheckExecutionContext, config: DeadLetterCheckConfig,
               spark: SparkResource, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        window = last_window(context.instance, key)
        if window is None:
            return dg.AssetCheckResult(passed=True, severity=severity, metadata={
                "window": "no materialisation has read any records yet"})
        dead = dead_letters_in(spark.lazy_session(), pipeline.layout(warehouse.root), window)
        ratio = dead / window.rows_in
        return dg.AssetCheckResult(
            passed=ratio <= config.max_dead_letter_ratio, severity=severity,
            metadata={"dead_letters": dead, "rows_in": window.rows_in, "ratio": round(ratio, 6),
                      "threshold": config.max_dead_letter_ratio, "batches": window.describe(),
                      "run_id": window.run_id})

    return _check


@dataclass(frozen=True)
class BatchWindow:
    """The batches one materialisation ran, ``first..last``, and the records they read."""

    first: int
    last: int
    rows_in: int
    run_id: str

    def describe(self) -> str:
        return f"{self.first}..{self.last}"


def last_window(instance: dg.DagsterInstance, key: dg.AssetKey) -> BatchWindow | None:
    """The batches of ``key``'s latest materialisation that read any records (``None``: none of
    the last few did). The tables hold each batch's dead letters but not how many records it
    read; the materialisation's metadata holds both ends and the count."""
    records = instance.fetch_materializations(key, limit=_LOOKBACK).records
    for record in records:
        materialisation = record.asset_materialization
        window = _window(materialisation.metadata if materialisation else {}, record.run_id)
        if window is not None:
            return window
    return None


def _window(metadata: Mapping[str, dg.MetadataValue], run_id: str) -> BatchWindow | None:
    values: dict[str, int] = {}
    for name in ("first_batch_id", "last_batch_id", "rows_in"):
        value = metadata[name].value if name in metadata else None
        if isinstance(value, int):
            values[name] = value
    if len(values) < 3 or not values["rows_in"]:
        return None  # read nothing, or recorded before first_batch_id was
    return BatchWindow(values["first_batch_id"], values["last_batch_id"], values["rows_in"], run_id)


def dead_letters_in(session: SparkSession, layout: PipelineLayout, window: BatchWindow) -> int:
    """How many records batches ``window.first..window.last`` sent to dead letters (from the
    statistics and values of ``batch_id``, without Spark where delta-rs serves the table)."""
    return tables.count_between(session, layout.dead_letters, "batch_id", window.first,
                                window.last)

