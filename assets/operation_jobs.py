"""Operations jobs (``dagster job execute`` and the UI launchpad) and maintenance schedules."""


import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field

import ops
from ops import Migration, Pipeline
from ops.operating.migrate import apply as apply_migration

from .resources import SparkResource, WarehouseResource

ALL = "all"


class PipelineChoice(dg.Config):
    """Which pipeline an operation acts on."""

    pipeline: str = Field(description="Pipeline name ('all' where the job allows it)")


class CheckpointChoice(PipelineChoice):
    checkpoint_id: int = Field(description="Checkpoint to go back to (see the describe job)")


class VacuumChoice(PipelineChoice):
    retention_hours: float = Field(
        default=ops.DEFAULT_RETENTION_HOURS,
        description="Keep every file a version younger than this needs; older checkpoints stop "
                    "being readable with as_of")


class MigrationChoice(PipelineChoice):
    migration: str = Field(
        default="", description="A migration declared in code (make_operation_jobs(migrations="
                                "...)): re-keys and transforms are functions, declared there")
    rename: dict[str, str] = Field(
        default_factory=dict, description="Operator (or tracked variable) -> its new name")
    drop: list[str] = Field(
        default_factory=list, description="Operators, state names or tracked variables whose "
                                          "state goes")


class ExportChoice(PipelineChoice):
    path: str = Field(description="Folder to write the export to (a local path or s3a://…)")
    checkpoint_id: int | None = Field(default=None, description="Default: the latest")


class ImportChoice(PipelineChoice):
    path: str = Field(description="Folder of an export (export_state)")
    positions: str = Field(
        default="", description="JSON object of source positions to replace, e.g. "
                                "{\"events\": null} to read source events from its start; "
                                "empty: keep the exported ones")


class BootstrapChoice(PipelineChoice):
    operator: str = Field(description="The stateful operator whose state to build")
    table: str = Field(description="Delta table of the operator's key columns and a value column")
    value: str = Field(default="value", description="The column holding the values")


@contextmanager
def _failing_on_refusal() -> Iterator[None]:
    """A lakestream error ends the op as a Dagster failure with its message, which says what was
    refused and what to do, without a stack trace."""
    try:
        yield
    except ops.StreamError as exc:
        raise dg.Failure(str(exc)) from exc


def _chosen(pipelines: Sequence[Pipeline], name: str, allow_all: bool) -> list[Pipeline]:
    if allow_all and name == ALL:
        return list(pipelines)
    for pipeline in pipelines:
        if pipeline.name == name:
            return [pipeline]
    names = [p.name for p in pipelines] + ([ALL] if allow_all else [])
    raise dg.Failure(f"unknown pipeline {name!r}; choose one of {names}")


def make_operation_jobs(pipelines: Sequence[Pipeline],
                        migrations: Mapping[str, Migration] | None = None
                        ) -> list[dg.JobDefinition]:
    """``recover``, ``reset_to_checkpoint``, ``replay``, ``discard_plans``, ``migrate_state``,
    ``bootstrap_state``, ``export_state``, ``import_state``, ``compact``, ``vacuum`` and
    ``describe`` over ``pipelines``, each a one-op job with typed config. ``migrations``: the
    migrations ``migrate_state`` may apply by name, besides the renames and drops its config
    gives."""
    ops_ = (*_recovery_ops(pipelines), *_state_ops(pipelines, dict(migrations or {})),
            *_maintenance_ops(pipelines))
    return [_job(op) for op in ops_]


def _recovery_ops(pipelines: Sequence[Pipeline]) -> tuple[dg.OpDefinition, ...]:
    """``recover``, ``reset_to_checkpoint``, ``replay`` and ``discard_plans``."""

    @dg.op(name="recover_op",
           description="Recovery only: restore the last checkpoint, truncate global tables.")
    def recover(context: dg.OpExecutionContext, config: PipelineChoice, spark: SparkResource,
                warehouse: WarehouseResource) -> None:
        for pipeline in _chosen(pipelines, config.pipeline, allow_all=True):
            report = ops.recover(spark.session(), pipeline, warehouse.root)
            context.log.info(f"{pipeline.name}: recovered at checkpoint {report.checkpoint_id}")

    @dg.op(name="reset_to_checkpoint_op",
           description="Roll state, tracked variables, global tables and sinks back to a checkpoint.")
    def reset_to_checkpoint(context: dg.OpExecutionContext, config: CheckpointChoice,
                            spark: SparkResource, warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        report = ops.reset_to_checkpoint(spark.session(), pipeline, config.checkpoint_id,
                                         warehouse.root)
        context.log.info(f"{pipeline.name}: reset to checkpoint {config.checkpoint_id}; now at "
                         f"checkpoint {report.checkpoint_id}, batch {report.last_batch_id}")

    @dg.op(name="replay_op",
           description="Reset to a checkpoint, then reprocess everything after it.")
    def replay(context: dg.OpExecutionContext, config: CheckpointChoice, spark: SparkResource,
               warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        report = ops.replay(spark.session(), pipeline, config.checkpoint_id, warehouse.root)
        context.log.info(f"{pipeline.name}: replayed {len(report.batches)} batch(es), "
                         f"{report.rows_in} rows, now at checkpoint {report.checkpoint_id}")

    @dg.op(name="discard_plans_op",
           description="Discard the batch plans recorded after the last checkpoint (never "
                       "checkpointed: nothing is lost); the next run plans again from it.")
    def discard_plans(context: dg.OpExecutionContext, config: PipelineChoice, spark: SparkResource,
                      warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        with _failing_on_refusal():
            report = ops.discard_plans(spark.session(), pipeline, warehouse.root)
        context.log.info(f"{pipeline.name}: batch plans after batch {report.last_batch_id} "
                         f"discarded; the next run plans from checkpoint {report.checkpoint_id}")

    return recover, reset_to_checkpoint, replay, discard_plans


def _state_ops(pipelines: Sequence[Pipeline],
               declared: Mapping[str, Migration]) -> tuple[dg.OpDefinition, ...]:
    """``migrate_state``, ``bootstrap_state``, ``export_state`` and ``import_state``."""

    @dg.op(name="migrate_state_op",
           description="Migrate a changed pipeline's state: rename, drop, re-key, transform "
                       "(a new checkpoint; reset_to_checkpoint undoes it).")
    def migrate_state(context: dg.OpExecutionContext, config: MigrationChoice,
                      spark: SparkResource, warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        migration = _migration(declared, config)
        with _failing_on_refusal():
            report = apply_migration(spark.session(), pipeline, migration, warehouse.root)
        if report.checkpoint_id is None:
            context.log.info(f"{pipeline.name}: the latest checkpoint already made "
                             f"{report.label!r}; nothing to do")
            return
        context.log.info(f"{pipeline.name}: {report.label!r} committed as checkpoint "
                         f"{report.checkpoint_id} (epoch {report.epoch}); keys written "
                         f"{report.written or 'none'}, deleted {report.deleted or 'none'}")

    @dg.op(name="bootstrap_state_op",
           description="Build an operator's state from a Delta table before the pipeline's "
                       "first run.")
    def bootstrap_state(context: dg.OpExecutionContext, config: BootstrapChoice,
                        spark: SparkResource, warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        with _failing_on_refusal():
            ops.bootstrap_state(spark.session(), pipeline, {config.operator: config.table},
                                value=config.value, warehouse=warehouse.root)
        context.log.info(f"{pipeline.name}: {config.operator!r} bootstrapped from {config.table}")

    @dg.op(name="export_state_op",
           description="Write a checkpoint (state, tracked variables, global tables, source "
                       "positions) to a folder.")
    def export_state(context: dg.OpExecutionContext, config: ExportChoice,
                     spark: SparkResource, warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        with _failing_on_refusal():
            done = ops.export_state(spark.session(), pipeline, config.path,
                                    checkpoint_id=config.checkpoint_id, warehouse=warehouse.root)
        context.log.info(f"{pipeline.name}: checkpoint {done.checkpoint_id} exported to "
                         f"{config.path}")

    @dg.op(name="import_state_op",
           description="Make an export a pipeline's first checkpoint, its source positions "
                       "rewritten as told.")
    def import_state(context: dg.OpExecutionContext, config: ImportChoice,
                     spark: SparkResource, warehouse: WarehouseResource) -> None:
        (pipeline,) = _chosen(pipelines, config.pipeline, allow_all=False)
        with _failing_on_refusal():
            done = ops.import_state(spark.session(), pipeline, config.path,
                                    offsets=_positions(config), warehouse=warehouse.root)
        context.log.info(f"{pipeline.name}: imported {config.path} as checkpoint 1; source "
                         f"positions {done.offsets}")

    return migrate_state, bootstrap_state, export_state, import_state


def _maintenance_ops(pipelines: Sequence[Pipeline]) -> tuple[dg.OpDefinition, ...]:
    """``compact``, ``vacuum`` and ``describe``."""

    @dg.op(name="compact_op",
           description="Rewrite state changelogs to the latest value per key.")
    def compact(context: dg.OpExecutionContext, config: PipelineChoice, spark: SparkResource,
                warehouse: WarehouseResource) -> None:
        for pipeline in _chosen(pipelines, config.pipeline, allow_all=True):
            kept = ops.compact(spark.session(), pipeline, warehouse.root)
            context.log.info(f"{pipeline.name}: compacted state to {kept} rows")

    @dg.op(name="vacuum_op",
           description="Delete files older versions no longer need (respecting retention).")
    def vacuum(context: dg.OpExecutionContext, config: VacuumChoice, spark: SparkResource,
               warehouse: WarehouseResource) -> None:
        for pipeline in _chosen(pipelines, config.pipeline, allow_all=True):
            removed = ops.vacuum(spark.session(), pipeline, config.retention_hours, warehouse.root)
            context.log.info(f"{pipeline.name}: vacuum removed {sum(removed.values())} file(s) "
                             f"from {len(removed)} table(s)")

    @dg.op(name="describe_op",
           description="Print each pipeline's last checkpoint, source lag and state size.")
    def describe(context: dg.OpExecutionContext, config: PipelineChoice, spark: SparkResource,
                 warehouse: WarehouseResource) -> None:
        for pipeline in _chosen(pipelines, config.pipeline, allow_all=True):
            lines = ops.describe(spark.session(), pipeline, warehouse.root).lines()
            for line in lines:
                print(line, flush=True)
            context.log.info("\n".join(lines))

    return compact, vacuum, describe


def _positions(config: ImportChoice) -> Any:
    """The source positions an import's config rewrites (``None``: keep the export's)."""
    try:
        return json.loads(config.positions) if config.positions else None
    except json.JSONDecodeError as exc:
        raise dg.Failure(f"positions is not a JSON object: {exc}") from exc


def _migration(declared: Mapping[str, Migration], config: MigrationChoice) -> Migration:
    """The declared migration ``config`` names (if any), with its renames and drops added."""
    if config.migration and config.migration not in declared:
        raise dg.Failure(f"unknown migration {config.migration!r}; declared: {sorted(declared)}")
    base = declared.get(config.migration, Migration())
    if not (config.rename or config.drop):
        return base
    return Migration(rename={**base.rename, **config.rename}, drop=(*base.drop, *config.drop),
                     rekey=base.rekey, transform=base.transform, name=base.name)


def _job(op: dg.OpDefinition) -> dg.JobDefinition:
    name = op.name.removesuffix("_op")  # a job may not share its one op's name

    @dg.job(name=name, description=op.description, executor_def=dg.in_process_executor,
            tags={"lakestream/operation": name})
    def _one_op_job():
        op()

    return _one_op_job


def make_maintenance_schedules(jobs: Sequence[dg.JobDefinition], *,
                               compact_cron: str = "0 3 * * *", vacuum_cron: str = "0 4 * * 0",
                               retention_hours: float = ops.DEFAULT_RETENTION_HOURS
                               ) -> list[dg.ScheduleDefinition]:
    """Nightly compaction and weekly vacuum of every pipeline (stopped until turned on)."""
    by_name = {job.name: job for job in jobs}
    return [
        dg.ScheduleDefinition(
            name="compact_nightly", job=by_name["compact"], cron_schedule=compact_cron,
            run_config={"ops": {"compact_op": {"config": {"pipeline": ALL}}}},
            description="Compact every pipeline's state changelog."),
        dg.ScheduleDefinition(
            name="vacuum_weekly", job=by_name["vacuum"], cron_schedule=vacuum_cron,
            run_config={"ops": {"vacuum_op": {"config": {"pipeline": ALL,
                                                      "retention_hours": retention_hours}}}},
            description=f"Vacuum every pipeline's tables, keeping {retention_hours:g} h of history."),
    ]
