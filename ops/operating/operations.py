"""Operating a pipeline from outside its runs: recover, reset, replay, discard plans, compact,
vacuum.

Each is what the Dagster operations jobs call; all are safe to repeat. Reading a pipeline's
status and state is in :mod:`ops.operating.inspection`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

import state
from state import offline
from state.lake import tables

from ..pipeline import Pipeline
from ..runtime import RunReport, run_pipeline
from ..sinks import StoredSink

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
    reset = offline.reset_checkpoint(spark, layout, checkpoint_id, run_id=uuid.uuid4().hex)
    log.info("%s: reset to checkpoint %d (batch %d) as checkpoint %d, epoch %d", pipeline.name,
             checkpoint_id, reset.batch_id, reset.checkpoint_id, reset.epoch)
    return recover(spark, pipeline, warehouse)


def replay(spark: SparkSession, pipeline: Pipeline, checkpoint_id: int,
           warehouse: str | None = None, max_batches: int | None = None) -> RunReport:
    """Reprocess everything after ``checkpoint_id``: reset to it, then run until drained."""
    reset_to_checkpoint(spark, pipeline, checkpoint_id, warehouse)
    return pipeline.run_once(spark, warehouse, max_batches=max_batches)


def discard_plans(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> RunReport:
    """Discard the batch plans recorded after the last checkpoint: the next run plans again from
    the checkpoint's position, with the source as it is then.

    For a plan that can never be read (recorded before sources checked their plans: a Delta
    table's change data feed turned on too late). Those batches were never checkpointed, so
    nothing is lost: it is a reset to the last checkpoint (a new epoch; see
    :func:`reset_to_checkpoint`), and the recovery that follows removes whatever the discarded
    batches wrote to sinks. Safe to repeat: with no plan to discard it raises
    :class:`state.StateError` saying so; after a crash midway it finishes the discard.
    """
    layout = pipeline.layout(warehouse)
    reset = offline.discard_plans(spark, layout, run_id=uuid.uuid4().hex,
                                key_groups=pipeline.key_groups)
    log.info("%s: batch plans after batch %d discarded (checkpoint %d, epoch %d)", pipeline.name,
             reset.batch_id, reset.checkpoint_id, reset.epoch)
    return recover(spark, pipeline, warehouse)


def compact(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> int:
    """Rewrite the pipeline's state changelog to latest-per-key; returns the rows kept."""
    return offline.compact(spark, pipeline.layout(warehouse))


def pipeline_tables(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> list[str]:
    """Every Delta table the pipeline owns or writes (those that exist)."""
    layout = pipeline.layout(warehouse)
    paths = [layout.state, layout.batches, layout.dead_letters, layout.failures,
             *pipeline.source.tables(layout)]
    for sink in pipeline.sinks:
        if isinstance(sink, StoredSink):
            paths += sink.tables(layout)
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
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def _data_files(spark: SparkSession, path: str) -> int:
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session always has one
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    files, count = fs.listFiles(root, True), 0
    while files.hasNext():
        status = files.next()
        name = status.getPath().toString()
        count += "/_delta_log/" not in name and name.endswith(".parquet")
    return count
