"""Operations jobs (``dagster job execute`` and the UI launchpad) and maintenance schedules."""


import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


ChoiceT = TypeVar("ChoiceT", bound=PipelineChoice)


@dataclass(frozen=True)
class OperationCall:
    """What an operation's work is handed besides the pipeline and the config: the op's
    context (its log), the Spark resource and the warehouse root, and the migrations
    ``migrate_state`` may apply by name."""

    context: dg.OpExecutionContext
    spark: SparkResource
    warehouse: str
    migrations: Mapping[str, Migration]

    def log(self, message: str) -> None:
        self.context.log.info(message)


@dataclass(frozen=True)
class Operation(Generic[ChoiceT]):
    """One operations job: ``name`` (its one op is ``<name>_op``, since a job may not share its
    op's name), the ``description`` the UI shows of both, the ``config`` class the launchpad
    asks for, and the ``work`` done on each pipeline the config chooses.

    ``every_pipeline``: the config may say ``all`` (the work runs on each pipeline in turn).
    ``refusal_is_failure``: a lakestream error ends the op as a Dagster failure with its
    message (:func:`_failing_on_refusal`); the others let the error and its trace through.
    """

    name: str
    description: str
    config: type[ChoiceT]
    work: Callable[[OperationCall, Pipeline, ChoiceT], None]
    every_pipeline: bool = False
    refusal_is_failure: bool = False


def _recover(call: OperationCall, pipeline: Pipeline, config: PipelineChoice) -> None:
    report = ops.recover(call.spark.session(), pipeline, call.warehouse)
    call.log(f"{pipeline.name}: recovered at checkpoint {report.checkpoint_id}")


def _reset_to_checkpoint(call: OperationCall, pipeline: Pipeline, config: CheckpointChoice) -> None:
    report = ops.reset_to_checkpoint(call.spark.session(), pipeline, config.checkpoint_id,
                                     call.warehouse)
    call.log(f"{pipeline.name}: reset to checkpoint {config.checkpoint_id}; now at "
             f"checkpoint {report.checkpoint_id}, batch {report.last_batch_id}")


def _replay(call: OperationCall, pipeline: Pipeline, config: CheckpointChoice) -> None:
    report = ops.replay(call.spark.session(), pipeline, config.checkpoint_id, call.warehouse)
    call.log(f"{pipeline.name}: replayed {len(report.batches)} batch(es), "
             f"{report.rows_in} rows, now at checkpoint {report.checkpoint_id}")


def _discard_plans(call: OperationCall, pipeline: Pipeline, config: PipelineChoice) -> None:
    report = ops.discard_plans(call.spark.session(), pipeline, call.warehouse)
    call.log(f"{pipeline.name}: batch plans after batch {report.last_batch_id} "
             f"discarded; the next run plans from checkpoint {report.checkpoint_id}")


def _migrate_state(call: OperationCall, pipeline: Pipeline, config: MigrationChoice) -> None:
    migration = _migration(call.migrations, config)
    report = apply_migration(call.spark.session(), pipeline, migration, call.warehouse)
    if report.checkpoint_id is None:
        call.log(f"{pipeline.name}: the latest checkpoint already made {report.label!r}; "
                 "nothing to do")
        return
    call.log(f"{pipeline.name}: {report.label!r} committed as checkpoint "
             f"{report.checkpoint_id} (epoch {report.epoch}); keys written "
             f"{report.written or 'none'}, deleted {report.deleted or 'none'}")


def _bootstrap_state(call: OperationCall, pipeline: Pipeline, config: BootstrapChoice) -> None:
    ops.bootstrap_state(call.spark.session(), pipeline, {config.operator: config.table},
                        value=config.value, warehouse=call.warehouse)
    call.log(f"{pipeline.name}: {config.operator!r} bootstrapped from {config.table}")


def _export_state(call: OperationCall, pipeline: Pipeline, config: ExportChoice) -> None:
    done = ops.export_state(call.spark.session(), pipeline, config.path,
                            checkpoint_id=config.checkpoint_id, warehouse=call.warehouse)
    call.log(f"{pipeline.name}: checkpoint {done.checkpoint_id} exported to {config.path}")


def _import_state(call: OperationCall, pipeline: Pipeline, config: ImportChoice) -> None:
    done = ops.import_state(call.spark.session(), pipeline, config.path,
                            offsets=_positions(config), warehouse=call.warehouse)
    call.log(f"{pipeline.name}: imported {config.path} as checkpoint 1; source "
             f"positions {done.offsets}")


def _compact(call: OperationCall, pipeline: Pipeline, config: PipelineChoice) -> None:
    kept = ops.compact(call.spark.session(), pipeline, call.warehouse)
    call.log(f"{pipeline.name}: compacted state to {kept} rows")


def _vacuum(call: OperationCall, pipeline: Pipeline, config: VacuumChoice) -> None:
    removed = ops.vacuum(call.spark.session(), pipeline, config.retention_hours, call.warehouse)
    call.log(f"{pipeline.name}: vacuum removed {sum(removed.values())} file(s) "
             f"from {len(removed)} table(s)")


def _describe(call: OperationCall, pipeline: Pipeline, config: PipelineChoice) -> None:
    lines = ops.describe(call.spark.session(), pipeline, call.warehouse).lines()
    for line in lines:  # on stdout too: what `dagster job execute -j describe` is run for
        print(line, flush=True)
    call.log("\n".join(lines))


#: Every operations job, in the order :func:`make_operation_jobs` returns them. Their names, op
#: names, descriptions and config fields are what the UI's launchpad, ``dagster job execute -j
#: <name>`` and the maintenance schedules' run configs name: renaming one breaks those.
OPERATIONS: tuple[Operation[Any], ...] = (
    Operation("recover", "Recovery only: restore the last checkpoint, truncate global tables.",
              PipelineChoice, _recover, every_pipeline=True),
    Operation("reset_to_checkpoint",
              "Roll state, tracked variables, global tables and sinks back to a checkpoint.",
              CheckpointChoice, _reset_to_checkpoint),
    Operation("replay", "Reset to a checkpoint, then reprocess everything after it.",
              CheckpointChoice, _replay),
    Operation("discard_plans",
              "Discard the batch plans recorded after the last checkpoint (never checkpointed: "
              "nothing is lost); the next run plans again from it.",
              PipelineChoice, _discard_plans, refusal_is_failure=True),
    Operation("migrate_state",
              "Migrate a changed pipeline's state: rename, drop, re-key, transform (a new "
              "checkpoint; reset_to_checkpoint undoes it).",
              MigrationChoice, _migrate_state, refusal_is_failure=True),
    Operation("bootstrap_state",
              "Build an operator's state from a Delta table before the pipeline's first run.",
              BootstrapChoice, _bootstrap_state, refusal_is_failure=True),
    Operation("export_state",
              "Write a checkpoint (state, tracked variables, global tables, source positions) "
              "to a folder.",
              ExportChoice, _export_state, refusal_is_failure=True),
    Operation("import_state",
              "Make an export a pipeline's first checkpoint, its source positions rewritten as "
              "told.",
              ImportChoice, _import_state, refusal_is_failure=True),
    Operation("compact", "Rewrite state changelogs to the latest value per key.",
              PipelineChoice, _compact, every_pipeline=True),
    Operation("vacuum", "Delete files older versions no longer need (respecting retention).",
              VacuumChoice, _vacuum, every_pipeline=True),
    Operation("describe", "Print each pipeline's last checkpoint, source lag and state size.",
              PipelineChoice, _describe, every_pipeline=True),
)


def make_operation_jobs(pipelines: Sequence[Pipeline],
                        migrations: Mapping[str, Migration] | None = None
                        ) -> list[dg.JobDefinition]:
    """``recover``, ``reset_to_checkpoint``, ``replay``, ``discard_plans``, ``migrate_state``,
    ``bootstrap_state``, ``export_state``, ``import_state``, ``compact``, ``vacuum`` and
    ``describe`` over ``pipelines`` (:data:`OPERATIONS`), each a one-op job with typed config.
    ``migrations``: the migrations ``migrate_state`` may apply by name, besides the renames and
    drops its config gives."""
    declared = dict(migrations or {})
    return [_job(_op(operation, pipelines, declared)) for operation in OPERATIONS]


def _op(operation: Operation[Any], pipelines: Sequence[Pipeline],
        migrations: Mapping[str, Migration]) -> dg.OpDefinition:
    """The op of ``operation``: its work on each pipeline its config chooses."""

    def _operation_op(context: dg.OpExecutionContext, config: PipelineChoice,
                      spark: SparkResource, warehouse: WarehouseResource) -> None:
        call = OperationCall(context, spark, warehouse.root, migrations)
        for pipeline in _chosen(pipelines, config.pipeline, operation.every_pipeline):
            with _failing_on_refusal() if operation.refusal_is_failure else nullcontext():
                operation.work(call, pipeline, config)

    # Dagster reads an op's config schema (the launchpad's form) off the annotation of its
    # `config` parameter: it must name the row's own class, not the base every row shares.
    _operation_op.__annotations__["config"] = operation.config
    return dg.op(name=f"{operation.name}_op", description=operation.description)(_operation_op)


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
