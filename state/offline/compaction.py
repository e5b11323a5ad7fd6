"""Compacting the ``_state`` changelog: each key's newest row kept, in one overwrite commit."""

from __future__ import annotations

import json
import logging

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..commit.log import CheckpointLog
from ..contract.keygroups import key_group_column
from ..contract.schema import CHECKPOINT_OPERATOR
from ..errors import CheckpointConflict
from ..lake import tables
from ..layout import PipelineLayout
from ..read.latest import latest_per_key

log = logging.getLogger(__name__)


# Rows per file that compaction writes. Files hold contiguous ranges of key groups, so a reader of
# some groups opens only the files of their ranges: with 1M keys in 10 checkpoint files, a task
# reading an eighth of the groups opened all 10 files in 0.67 s, and 4.5 of 32 range files in
# 0.40 s (bench/keygroups.py; a folder per key group cost 10x on every checkpoint append).
ROWS_PER_FILE = 250_000


def compact(spark: SparkSession, layout: PipelineLayout, rows_per_file: int = ROWS_PER_FILE) -> int:
    """Rewrite ``_state`` to the latest row per key (tombstones dropped) and every checkpoint
    record, in one overwrite commit, in files of at most about ``rows_per_file`` rows that each
    hold a contiguous range of key groups. Readers of the latest checkpoint see no difference;
    older checkpoints stay readable by time travel until vacuum. Returns the rows kept.
    """
    last = CheckpointLog(spark, layout).latest()
    if last is None:
        return 0
    changelog = tables.read(spark, layout.state).where(F.col("checkpoint_id") <= last.checkpoint_id)
    # every kept row gets its key group, rows from before key groups existed included (a typed
    # state's rows have no key text to hash: they were always written with their group)
    state_rows = (latest_per_key(changelog.where(F.col("operator") != CHECKPOINT_OPERATOR))
                  .where(~F.col("deleted"))
                  .withColumn("key_group", F.coalesce(key_group_column(F.col("key"), last.key_groups),
                                                      F.col("key_group"))))
    records = (changelog.where(F.col("operator") == CHECKPOINT_OPERATOR)
               .withColumn("key_group", F.lit(None).cast("int")))
    columns = changelog.columns  # the table's: typed states' columns too
    compacted = (state_rows.select(*columns).unionByName(records.select(*columns)).localCheckpoint())
    kept = compacted.count()
    files = max(1, -(-kept // rows_per_file))
    by_group = (compacted.repartitionByRange(files, "operator", "key_group")
                .sortWithinPartitions("operator", "key_group", "key"))
    try:
        (by_group.write.format("delta").mode("overwrite").partitionBy("operator")
         .option("mergeSchema", "true")
         .option("userMetadata", json.dumps({"compacted_through": last.checkpoint_id}))
         .save(layout.state))
    except Exception as exc:
        if "Concurrent" in type(exc).__name__ or "Concurrent" in str(exc)[:200]:
            raise CheckpointConflict(
                f"compaction of {layout.state} raced a checkpoint commit and was abandoned; "
                "nothing changed. Run it again (or when the pipeline is idle).") from exc
        raise
    log.info("compacted %s through checkpoint %d: %d rows", layout.state, last.checkpoint_id, kept)
    return kept
