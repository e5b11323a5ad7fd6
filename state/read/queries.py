"""Reading state from outside a pipeline: a state as of a checkpoint, the keys changed since
one, the changelog."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..commit.log import CheckpointLog
from ..contract.codecs import codec_named, decode_key, decode_value
from ..contract.entries import EntryColumns
from ..contract.types import KEY_PREFIX, VALUE_PREFIX
from ..errors import StateError
from ..lake import tables
from ..layout import PipelineLayout
from .latest import latest_per_key

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
               as_of: int | None = None, codec: str = "json",
               entries: EntryColumns | None = None) -> pd.DataFrame:
    """``key, value, checkpoint_id`` of every key of ``operator`` as of checkpoint ``as_of``;
    for a state of many rows per key kept in ``entries``' columns
    (:class:`~state.run.entries.EntryState`), ``key, entry, value, checkpoint_id`` of every
    entry (a typed value as the tuple of its fields; a TTL's stamp aside).

    ``as_of`` may be any retained checkpoint (default: the latest); older checkpoints are read
    through Delta time travel, so they stay readable after compaction until vacuum.
    """
    changelog, upto = changelog_as_of(spark, layout, as_of)
    rows = changelog.where((F.col("operator") == operator) & (F.col("checkpoint_id") <= upto))
    latest = latest_per_key(rows).where(~F.col("deleted"))
    if entries is not None:
        return _entries(latest, codec, operator, entries)
    return _decoded_state(latest, codec, operator).drop(columns="deleted")


def _entries(latest: DataFrame, codec: str, operator: str, columns: EntryColumns) -> pd.DataFrame:
    """An entry state's latest rows decoded, by key and then entry (a list's positions in
    order): a typed value as the tuple of its fields (through Arrow: times stay UTC)."""
    if columns.entry not in latest.columns:  # no entry was ever committed
        return pd.DataFrame(columns=["key", "entry", "value", "checkpoint_id"])
    values = [column for _, column, _ in columns.fields] or ["value"]
    stored = latest.where(F.col(columns.entry).isNotNull()).select(
        "key", F.col(columns.entry).alias("entry"), *values, "checkpoint_id").toArrow()
    position = pd.to_numeric(pd.Series(stored["entry"].to_pylist(), dtype=object),
                             errors="coerce")  # a list's; none for a map's entries
    rows = pd.DataFrame({"key": stored["key"].to_pylist(), "entry": stored["entry"].to_pylist(),
                         "position": position, "checkpoint_id": stored["checkpoint_id"].to_pylist()})
    if columns.fields:
        decoded_values = list(zip(*(stored[column].to_pylist() for column in values)))
    else:
        decoded_values = stored["value"].to_pylist()
    rows["stored"] = decoded_values
    rows = rows.sort_values(["key", "position", "entry"], kind="stable").reset_index(drop=True)
    keys = [decode_key(key) for key in rows["key"]]
    if not columns.fields:
        chosen = codec_named(codec)
        rows["stored"] = [decode_value(chosen, text, operator=operator, key=key)
                          for key, text in zip(keys, rows["stored"])]
    return pd.DataFrame({"key": keys, "entry": rows["entry"].tolist(), "value": rows["stored"].tolist(),
                         "checkpoint_id": rows["checkpoint_id"].tolist()})


def changed_keys(spark: SparkSession, layout: PipelineLayout, operator: str, after: int,
                 upto: int | None = None, codec: str = "json") -> pd.DataFrame:
    """Keys of ``operator`` changed by checkpoints ``after+1 .. upto``, with their value at
    ``upto`` (``deleted`` marks keys removed)."""
    changelog, upto = changelog_as_of(spark, layout, upto)
    rows = changelog.where((F.col("operator") == operator) & (F.col("checkpoint_id") <= upto)
                           & (F.col("checkpoint_id") > after))
    return _decoded_state(latest_per_key(rows), codec, operator)



