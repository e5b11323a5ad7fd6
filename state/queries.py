"""Reading state from outside a pipeline, and compacting the changelog."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import tables
from .checkpoint import CHECKPOINT_OPERATOR, CheckpointLog
from .codecs import codec_named, decode_key, decode_value
from .errors import CheckpointConflict, StateError
from .keygroups import key_group_column
from .layout import PipelineLayout
from .store import latest_per_key
from .types import KEY_PREFIX, VALUE_PREFIX

log = logging.getLogger(__name__)


def _checkpoint_version(spark: SparkSession, layout: PipelineLayout, checkpoint_id: int) -> int:
    """The Delta version of ``_state`` at which checkpoint ``checkpoint_id`` was committed."""
    history = DeltaTable.forPath(spark, layout.state).history().select("version", "userMetadata")
    for row in history.collect():
        meta = json.loads(row["userMetadata"]) if row["userMetadata"] else {}
        if meta.get("checkpoint_id") == checkpoint_id:
            return int(row["version"])
    raise StateError(f"checkpoint {checkpoint_id} of pipeline {layout.pipeline!r} is not retained "
                     "(never committed, or its Delta version was vacuumed)")


def changelog_as_of(spark: SparkSession, layout: PipelineLayout,
                     checkpoint_id: int | None) -> tuple[DataFrame, int]:
    """The changelog as it stood when ``checkpoint_id`` (default: the latest) was committed."""
    if not tables.exists(spark, layout.state):
        raise StateError(f"pipeline {layout.pipeline!r} has no state at {layout.state}")
    latest = CheckpointLog(spark, layout).latest()
    if latest is None:
        raise StateError(f"pipeline {layout.pipeline!r} has not checkpointed yet")
    if checkpoint_id is None or checkpoint_id == latest.checkpoint_id:
        return tables.read(spark, layout.state), latest.checkpoint_id
    if checkpoint_id > latest.checkpoint_id or checkpoint_id < 1:
        raise StateError(f"pipeline {layout.pipeline!r} has checkpoints 1..{latest.checkpoint_id}, "
                         f"not {checkpoint_id}")
    version = _checkpoint_version(spark, layout, checkpoint_id)
    frame = spark.read.format("delta").option("versionAsOf", version).load(layout.state)
    return frame, checkpoint_id


def _decoded(rows: pd.DataFrame, codec: str, operator: str) -> pd.DataFrame:
    chosen = codec_named(codec)
    rows = rows.sort_values("key", kind="stable").reset_index(drop=True)
    keys = [decode_key(k) for k in rows["key"]]
    return pd.DataFrame({
        "key": keys,
        "value": [None if v is None else decode_value(chosen, v, operator=operator, key=k)
                  for k, v in zip(keys, rows["value"])],
        **({"deleted": rows["deleted"].tolist()} if "deleted" in rows else {}),
        "checkpoint_id": rows["checkpoint_id"].tolist()})


def _typed(latest: DataFrame, operator: str) -> pd.DataFrame:
    """A typed state's latest rows (``latest_per_key``'s) as ``key, value, deleted,
    checkpoint_id``: the key and value as stored (a record's fields as a dict), read through
    Arrow so that times stay UTC instants."""
    key, value = KEY_PREFIX + operator, VALUE_PREFIX + operator
    fields = [column for column in latest.columns if column.startswith(value + "__")]
    rows = (latest.where(F.col(key).isNotNull())
            .select(key, *(fields or [value]), "deleted", "checkpoint_id").toArrow())
    if fields:  # a record: one dict per key, of every field
        values = pa.Table.from_arrays(rows.select(fields).columns,
                                      names=[name[len(value) + 2:] for name in fields]).to_pylist()
    else:
        values = rows[value].to_pylist()
    return pd.DataFrame({"key": rows[key].to_pylist(), "value": values,
                         "deleted": rows["deleted"].to_pylist(),
                         "checkpoint_id": rows["checkpoint_id"].to_pylist()})


def _decoded_state(latest: DataFrame, codec: str, operator: str) -> pd.DataFrame:
    """``latest`` (``latest_per_key``'s rows of ``operator``) decoded: its text rows, and a
    typed state's rows."""
    if KEY_PREFIX + operator not in latest.columns:
        return _decoded(latest.toPandas(), codec, operator)
    latest = latest.localCheckpoint()  # read twice: its text rows, then its typed ones
    decoded = _decoded(latest.where(F.col("key").isNotNull()).toPandas(), codec, operator)
    typed = _typed(latest, operator)
    if decoded.empty:
        return typed.sort_values("key", kind="stable").reset_index(drop=True)
    return pd.concat([decoded, typed], ignore_index=True)


def read_state(spark: SparkSession, layout: PipelineLayout, operator: str,
               as_of: int | None = None, codec: str = "json") -> pd.DataFrame:
    """``key, value, checkpoint_id`` of every key of ``operator`` as of checkpoint ``as_of``.

    ``as_of`` may be any retained checkpoint (default: the latest); older checkpoints are read
    through Delta time travel, so they stay readable after compaction until vacuum.
    """
    changelog, upto = changelog_as_of(spark, layout, as_of)
    rows = changelog.where((F.col("operator") == operator) & (F.col("checkpoint_id") <= upto))
    latest = latest_per_key(rows).where(~F.col("deleted"))
    return _decoded_state(latest, codec, operator).drop(columns="deleted")


def changed_keys(spark: SparkSession, layout: PipelineLayout, operator: str, after: int,
                 upto: int | None = None, codec: str = "json") -> pd.DataFrame:
    """Keys of ``operator`` changed by checkpoints ``after+1 .. upto``, with their value at
    ``upto`` (``deleted`` marks keys removed)."""
    changelog, upto = changelog_as_of(spark, layout, upto)
    rows = changelog.where((F.col("operator") == operator) & (F.col("checkpoint_id") <= upto)
                           & (F.col("checkpoint_id") > after))
    return _decoded_state(latest_per_key(rows), codec, operator)


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
