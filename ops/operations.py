"""Operating a pipeline from outside its runs: recover, reset, replay, vacuum, describe.

Each is what the Dagster operations jobs call; all are safe to repeat.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from delta.tables import DeltaTable
from pyspark.sql import SparkSession, functions as F

import state
from state import CHECKPOINT_OPERATOR, Checkpoint, CheckpointLog, tables

from ._context import RunContext
from .executor import RunReport, run_pipeline
from .file_source import FileSource
from .pipeline import Pipeline
from .sinks import DeltaSink
from .sources import CallbackSource
from .state_tables import TableSink

log = logging.getLogger(__name__)

DEFAULT_RETENTION_HOURS = 168  # Delta's own default: a week of time travel


def recover(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> RunReport:
    """Recovery only: restore from the last checkpoint, run ``on_recover`` hooks (truncating
    global tables), finish a pending reset; run no batch."""
    return run_pipeline(pipeline, spark, warehouse=warehouse, max_batches=0)


def reset_to_checkpoint(spark: SparkSession, pipeline: Pipeline, checkpoint_id: int,
                        warehouse: str | None = None) -> RunReport:
    """Roll state, tracked variables, global tables and Delta sinks back to ``checkpoint_id``.

    The rollback is a new checkpoint in a new epoch (older checkpoints stay readable); the
    recovery that follows removes the later batches' sink rows and global-table rows. The next
    run processes the input after ``checkpoint_id`` again.
    """
    layout = pipeline.layout(warehouse)
    reset = state.reset_checkpoint(spark, layout, checkpoint_id, run_id=uuid.uuid4().hex)
    log.info("%s: reset to checkpoint %d (batch %d) as checkpoint %d, epoch %d", pipeline.name,
             checkpoint_id, reset.batch_id, reset.checkpoint_id, reset.epoch)
    return recover(spark, pipeline, warehouse)


def replay(spark: SparkSession, pipeline: Pipeline, checkpoint_id: int,
           warehouse: str | None = None, max_batches: int | None = None) -> RunReport:
    """Reprocess everything after ``checkpoint_id``: reset to it, then run until drained."""
    reset_to_checkpoint(spark, pipeline, checkpoint_id, warehouse)
    return pipeline.run_once(spark, warehouse, max_batches=max_batches)


def pipeline_tables(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> list[str]:
    """Every Delta table the pipeline owns or writes (those that exist)."""
    layout = pipeline.layout(warehouse)
    paths = [layout.state, layout.batches, layout.dead_letters]
    for source in getattr(pipeline.source, "parts", (pipeline.source,)):
        if isinstance(source, CallbackSource):
            paths.append(layout.inbox(source.name))
        if isinstance(source, FileSource):
            paths.append(layout.manifest(source.name))
    for sink in pipeline.sinks:
        if isinstance(sink, (DeltaSink, TableSink)):
            paths.append(sink.location(layout))
        if isinstance(sink, TableSink):
            paths.append(sink.changelog(layout))
    paths += [layout.table(hook.name) for _, hook in pipeline.all_hooks()
              if isinstance(hook, state.GlobalTable)]
    return [path for path in paths if tables.exists(spark, path)]


def vacuum(spark: SparkSession, pipeline: Pipeline, retention_hours: float = DEFAULT_RETENTION_HOURS,
           warehouse: str | None = None) -> dict[str, int]:
    """Delete files no version younger than ``retention_hours`` needs, in every table of the
    pipeline. Checkpoints older than the retention stop being readable with ``as_of``; the
    latest state is never affected. Returns files removed per table."""
    if retention_hours < 0:
        raise ValueError(f"retention_hours must be >= 0, got {retention_hours}")
    removed = {}
    with _session_conf(spark, _vacuum_conf(spark, retention_hours)):
        for path in pipeline_tables(spark, pipeline, warehouse):
            before = _data_files(spark, path)
            DeltaTable.forPath(spark, path).vacuum(retention_hours)
            removed[path] = before - _data_files(spark, path)
    log.info("%s: vacuum (retain %.1f h) removed %d file(s)", pipeline.name, retention_hours,
             sum(removed.values()))
    return removed


# Delta lists a table's directories for vacuum with as many tasks as Spark's partition
# discovery parallelism, 10,000 by default: about a minute per small table on two cores, against
# two seconds with one task per core.
_LISTING_PARALLELISM = ("spark.sql.sources.parallelPartitionDiscovery.parallelism",
                        "spark.databricks.delta.vacuum.fileListing.parallelism")


def _vacuum_conf(spark: SparkSession, retention_hours: float) -> dict[str, str]:
    """Session settings for a vacuum: retentions under a week allowed (Delta refuses them unless
    told the caller means it; we were told), listing with one task per core unless the Spark
    configuration sets its own parallelism."""
    conf = {"spark.databricks.delta.retentionDurationCheck.enabled":
            str(retention_hours >= DEFAULT_RETENTION_HOURS).lower()}
    configured = spark.sparkContext.getConf()
    cores = str(max(1, spark.sparkContext.defaultParallelism))
    conf.update({key: cores for key in _LISTING_PARALLELISM if not configured.contains(key)})
    return conf


@contextmanager
def _session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session for the block; the values before it restored after."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def _data_files(spark: SparkSession, path: str) -> int:
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    files, count = fs.listFiles(root, True), 0
    while files.hasNext():
        status = files.next()
        count += "/_delta_log/" not in status.getPath().toString() and status.getPath().getName().endswith(".parquet")
    return count


@dataclass
class PipelineStatus:
    """What ``describe`` reports."""

    pipeline: str
    checkpoint_id: int | None = None
    batch_id: int | None = None
    epoch: int | None = None
    checkpointed_at: float | None = None
    source_lag: int | None = None
    state_keys: dict[str, int] = field(default_factory=dict)
    changelog_rows: int = 0
    sink_rows: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0

    def lines(self) -> list[str]:
        if self.checkpoint_id is None:
            return [f"{self.pipeline}: no checkpoint yet; source lag {self.source_lag}"]
        return [f"{self.pipeline}: checkpoint {self.checkpoint_id} (batch {self.batch_id}, "
                f"epoch {self.epoch}); source lag {self.source_lag}",
                f"  state keys {self.state_keys} in {self.changelog_rows} changelog rows",
                f"  sink rows {self.sink_rows}; dead letters {self.dead_letters}"]


def describe(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> PipelineStatus:
    """The pipeline's status: last checkpoint, how far its source is ahead, state size."""
    layout = pipeline.layout(warehouse)
    status = PipelineStatus(pipeline=pipeline.name)
    last = _last_checkpoint(spark, layout)
    status.source_lag = _lag(spark, pipeline, layout, last)
    if last is not None:
        status.checkpoint_id, status.batch_id = last.checkpoint_id, last.batch_id
        status.epoch, status.checkpointed_at = last.epoch, last.created_at
        changelog = tables.read(spark, layout.state)
        status.changelog_rows = changelog.count()
        live = (state.store.latest_per_key(changelog.where(F.col("operator") != CHECKPOINT_OPERATOR))
                .where(~F.col("deleted")).groupBy("operator").count().collect())
        status.state_keys = {row["operator"]: int(row["count"]) for row in live}
    for sink in pipeline.sinks:
        if isinstance(sink, (DeltaSink, TableSink)) and tables.exists(spark, sink.location(layout)):
            status.sink_rows[sink.name] = tables.read(spark, sink.location(layout)).count()
    if tables.exists(spark, layout.dead_letters):
        status.dead_letters = tables.read(spark, layout.dead_letters).count()
    return status


def describe_lag(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> int:
    """How far the pipeline's source is ahead of its last checkpoint."""
    layout = pipeline.layout(warehouse)
    return _lag(spark, pipeline, layout, _last_checkpoint(spark, layout))


def _last_checkpoint(spark: SparkSession, layout) -> Checkpoint | None:
    return CheckpointLog(spark, layout).latest() if tables.exists(spark, layout.state) else None


def _lag(spark: SparkSession, pipeline: Pipeline, layout, last: Checkpoint | None) -> int:
    ctx = RunContext(spark, layout, last.epoch if last else 0, run_id="describe")
    return source_lag(ctx, pipeline, last.offsets if last else {})


def source_lag(ctx: RunContext, pipeline: Pipeline, offsets: dict[str, Any]) -> int:
    """How far the pipeline's source is ahead of ``offsets`` (0 when its input is missing)."""
    source = pipeline.source
    try:
        return max(0, source.lag(ctx, offsets.get(source.name)))
    except Exception as exc:  # a source not created yet has no lag to report
        log.debug("%s: no source lag (%s)", pipeline.name, exc)
        return 0


def checkpoint_problems(spark: SparkSession, pipeline: Pipeline,
                        warehouse: str | None = None) -> list[str]:
    """What is wrong with the pipeline's checkpoints (empty when all is well): the latest record
    must parse, ids must run 1..latest once each, and no state row may be newer than it."""
    layout = pipeline.layout(warehouse)
    if not tables.exists(spark, layout.state):
        return []
    try:
        last = CheckpointLog(spark, layout).latest()
    except Exception as exc:
        return [f"latest checkpoint record of {layout.state} is unreadable: {exc}"]
    if last is None:
        return []
    problems = []
    ids = [row[0] for row in CheckpointLog(spark, layout).records()
           .groupBy("checkpoint_id").count().where("count > 1").select("checkpoint_id").collect()]
    if ids:
        problems.append(f"checkpoint id(s) recorded more than once: {sorted(ids)}")
    count = CheckpointLog(spark, layout).records().select("checkpoint_id").distinct().count()
    if count != last.checkpoint_id:
        problems.append(f"{count} checkpoint records for ids 1..{last.checkpoint_id}")
    newer = tables.read(spark, layout.state).where(F.col("checkpoint_id") > last.checkpoint_id).count()
    if newer:
        problems.append(f"{newer} state row(s) newer than checkpoint {last.checkpoint_id}")
    return problems


def global_table_problems(spark: SparkSession, pipeline: Pipeline,
                          warehouse: str | None = None) -> list[str]:
    """Global tables holding rows beyond the marker of the last checkpoint (should be none once
    a run ended: recovery and checkpoints keep them in step)."""
    layout = pipeline.layout(warehouse)
    last = _last_checkpoint(spark, layout)
    problems = []
    for key, hook in pipeline.all_hooks():
        if not isinstance(hook, state.GlobalTable) or not tables.exists(spark, layout.table(hook.name)):
            continue
        marker = last.markers.get(key) if last else None
        bound = -1 if marker is None else int(marker)
        beyond = tables.read(spark, layout.table(hook.name)).where(F.col(hook.index) > bound).count()
        if beyond:
            problems.append(f"global table {hook.name!r}: {beyond} row(s) beyond marker {bound}")
    return problems
