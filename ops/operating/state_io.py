"""A pipeline's state offline, as Flink's State Processor API does it: bootstrapped from data
before the pipeline's first run, exported from a checkpoint, imported into another warehouse or
path.

Each writes the target pipeline's *first* checkpoint, in one commit, so it is all or nothing, and
refuses a pipeline that already has one (changing a running pipeline's state is
:func:`ops.migrate`'s work). What the checkpoint records of its state's meaning is checked by
the pipeline's first run, as after any checkpoint.

An export is a folder of Delta tables: ``state`` holds the live state of every operator at the
checkpoint, plus its record (source positions, tracked variables, hook markers); and
``global/<name>`` holds each global table's rows up to the checkpoint's marker.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from state import (
    CHECKPOINT_OPERATOR,
    STATE_SCHEMA,
    Checkpoint,
    CheckpointLog,
    GlobalTable,
    MigrationError,
    StateTypes,
    StreamError,
    codec_named,
    encode_key,
)
from state.lake import tables
from state.offline import (
    CHECKPOINT_COLUMN,
    RUN_COLUMN,
    changelog_as_of,
    encode_value,
    key_columns,
    latest_per_key,
    value_columns,
)

from ..operators import Operator, StateKind
from ..operators.aggregates import to_python
from ..pipeline import Pipeline
from ..runtime.meaning import describe

log = logging.getLogger(__name__)

Rows: TypeAlias = pd.DataFrame | DataFrame | str  # pandas, Spark, or a Delta table's path
Offsets: TypeAlias = Mapping[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def bootstrap_state(spark: SparkSession, pipeline: Pipeline, data: Mapping[str, Rows], *,
              value: str = "value", warehouse: str | None = None) -> Checkpoint:
    """Build the state of the operators named in ``data`` before ``pipeline``'s first run: each
    maps to rows holding the operator's key columns and a ``value`` column (one row, no key
    columns, for unkeyed state). Every value must encode with the operator's codec and no key
    may repeat, or nothing is written. Returns the checkpoint made (batch 0: the first run
    reads its sources from the start)."""
    layout = pipeline.layout(warehouse)
    _check_first(spark, pipeline, layout)
    by_name = {op.name: op for op in pipeline.stream.operators
               if op.declares().kind is not StateKind.STATELESS}
    unknown = sorted(set(data) - set(by_name))
    if unknown:
        raise MigrationError(f"bootstrap of {pipeline.id!r}: no stateful operator {unknown}; "
                             f"it has {sorted(by_name)}. Nothing was written.")
    rows = pd.concat([_state_rows(by_name[name], _pandas(spark, rows), value)
                      for name, rows in data.items()], ignore_index=True)
    first = Checkpoint(checkpoint_id=1, batch_id=0, run_id=uuid.uuid4().hex,
                       created_at=time.time(), key_groups=pipeline.key_groups,
                       # recorded as written, as text: a declared type is converted to by
                       # sp.migrate, as the first run's refusal says (recorded typed, the
                       # run would read no typed rows: the bootstrapped state silently gone)
                       operators=describe(pipeline.stream.operators, StateTypes()),
                       migration=f"bootstrap {', '.join(sorted(data))}")
    CheckpointLog(spark, layout).commit(first, rows)
    log.info("%s: bootstrapped %s as checkpoint 1 (%d keys)", pipeline.id, sorted(data), len(rows))
    return first


def export_state(spark: SparkSession, pipeline: Pipeline, path: str, *,
                 checkpoint_id: int | None = None, warehouse: str | None = None) -> Checkpoint:
    """Write checkpoint ``checkpoint_id`` (default: the latest) of ``pipeline`` to the folder
    ``path``: its live state and record, and its global tables' rows up to its markers (see
    the module docstring). Overwrites an earlier export there. Returns the checkpoint."""
    layout = pipeline.layout(warehouse)
    changelog, upto = changelog_as_of(spark, layout, checkpoint_id)
    checkpoint = CheckpointLog(spark, layout).get(upto)
    assert checkpoint is not None  # changelog_as_of found it
    state_rows = latest_per_key(changelog.where((F.col("operator") != CHECKPOINT_OPERATOR)
                                                & (F.col("checkpoint_id") <= upto)))
    record = tables.to_frame(spark, pd.DataFrame([{
        "operator": CHECKPOINT_OPERATOR, "key": "", "value": checkpoint.to_json(),
        "deleted": False, "checkpoint_id": upto, "key_group": None}]).astype(
            {"key_group": "Int32"}), STATE_SCHEMA)
    # a key text's group is the importer's to work out; a typed state's row keeps its own
    live = (state_rows.where(~F.col("deleted"))
            .withColumn("key_group", F.when(F.col("key").isNull(), F.col("key_group")))
            .select(*changelog.columns))  # typed states' columns too
    _replace(live.unionByName(record, allowMissingColumns=True), _state_path(path))
    committed = (CheckpointLog(spark, layout).records()
                 .select(F.col("checkpoint_id").alias(CHECKPOINT_COLUMN),
                         F.get_json_object("value", "$.run_id").alias(RUN_COLUMN)))
    for table in _global_tables(pipeline):
        marker = checkpoint.markers.get(table.marker_key)
        source = layout.table(table.name)
        if tables.exists(spark, source):
            # up to the marker, and only a committed checkpoint's rows: a run that lost its
            # checkpoint may have left some that the next recovery would remove
            rows = (tables.read(spark, source)
                    .where(F.col(table.index) <= (-1 if marker is None else int(marker)))
                    .join(committed, [CHECKPOINT_COLUMN, RUN_COLUMN], "left_semi"))
            _replace(rows, _global_path(path, table.name))
    log.info("%s: checkpoint %d exported to %s", pipeline.id, upto, path)
    return checkpoint


def import_state(spark: SparkSession, pipeline: Pipeline, path: str, *,
                 offsets: Offsets | None = None, warehouse: str | None = None) -> Checkpoint:
    """Make the export at ``path`` ``pipeline``'s first checkpoint (in ``warehouse``): its
    state, tracked variables, hook markers and global tables, and its source positions, or
    those ``offsets`` gives: a mapping of source position keys to replace, or a function of the
    exported positions returning the new ones (a callback inbox in another warehouse starts
    empty, a Kafka topic keeps its offsets). Returns the checkpoint made."""
    layout = pipeline.layout(warehouse)
    _check_first(spark, pipeline, layout)
    if not tables.exists(spark, _state_path(path)):
        raise MigrationError(f"no export at {path} (no Delta table {_state_path(path)}). "
                             "Nothing was written.")
    exported: pd.DataFrame = tables.read(spark, _state_path(path)).toPandas()
    records = exported[exported["operator"] == CHECKPOINT_OPERATOR]
    was = Checkpoint.from_json(records["value"].iloc[0])
    state_rows = exported[exported["operator"] != CHECKPOINT_OPERATOR]
    if state_rows["key"].isna().any() and was.key_groups != pipeline.key_groups:
        raise MigrationError(  # a typed key's group is kept, not hashed again
            f"import into {pipeline.id!r}: the export holds typed state in {was.key_groups} key "
            f"groups and the pipeline has {pipeline.key_groups}; give the pipeline "
            f"key_groups={was.key_groups}. Nothing was written.")
    run_id = uuid.uuid4().hex
    for table in _global_tables(pipeline):  # before the commit: a crash here is redone
        source = _global_path(path, table.name)
        if tables.exists(spark, source):
            # the rows are the first checkpoint's now: recovery keeps only a committed one's
            _replace(tables.read(spark, source)
                     .withColumn(CHECKPOINT_COLUMN, F.lit(1).cast("long"))
                     .withColumn(RUN_COLUMN, F.lit(run_id)), layout.table(table.name))
    first = dataclasses.replace(
        was, checkpoint_id=1, epoch=0, run_id=run_id, created_at=time.time(),
        reset_to_batch=None, resumed_from=None, key_groups=pipeline.key_groups,
        offsets=_rewritten(was.offsets, offsets), migration=f"imported from {path}")
    typed = [*key_columns(state_rows.columns), *value_columns(state_rows.columns)]
    kept = ["operator", "key", "value", "deleted", *(["key_group", *typed] if typed else [])]
    CheckpointLog(spark, layout).commit(first, state_rows[kept])
    log.info("%s: imported checkpoint %d of %s as checkpoint 1 (%d keys; positions %s)",
             pipeline.id, was.checkpoint_id, path, len(state_rows), first.offsets)
    return first


def _check_first(spark: SparkSession, pipeline: Pipeline, layout: Any) -> None:
    latest = CheckpointLog(spark, layout).latest()
    if latest is not None:
        raise MigrationError(
            f"pipeline {pipeline.id!r} already has checkpoint {latest.checkpoint_id} at "
            f"{layout.state}: bootstrap and import make a pipeline's first checkpoint. Change "
            "its state with sp.migrate, or give the pipeline a new name. Nothing was written.")


def _pandas(spark: SparkSession, rows: Rows) -> pd.DataFrame:
    if isinstance(rows, str):
        return tables.read(spark, rows).toPandas()
    return rows.toPandas() if isinstance(rows, DataFrame) else rows


def _state_rows(operator: Operator, rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """``operator, key, value, deleted`` of ``rows``, encoded as ``operator`` stores them."""
    keys = operator.declares().keys
    missing = [column for column in (*keys, value) if column not in rows.columns]
    if missing:
        raise MigrationError(f"bootstrap of {operator.name!r}: the rows have no column(s) "
                             f"{missing} (its keys are {list(keys)}, its values in {value!r}). "
                             "Nothing was written.")
    if not keys and len(rows) != 1:
        raise MigrationError(f"bootstrap of {operator.name!r}: unkeyed state is one value, "
                             f"got {len(rows)} rows. Nothing was written.")
    codec = codec_named(operator.codec)
    encoded: dict[str, str] = {}
    for position, record in enumerate(rows[[*keys, value]].itertuples(index=False, name=None)):
        parts = tuple(to_python(part) for part in record[:-1])
        if any(part is None or part != part for part in parts):
            raise MigrationError(f"bootstrap of {operator.name!r}: row {position} has a null "
                                 f"key {parts}. Nothing was written.")
        key = operator.state_key(parts) if keys else None
        text = encode_key(key)
        if text in encoded:
            raise MigrationError(f"bootstrap of {operator.name!r}: key {key!r} repeats (row "
                                 f"{position}). Nothing was written.")
        try:
            encoded[text] = encode_value(codec, to_python(record[-1]), operator=operator.name,
                                         key=key)
        except StreamError as exc:
            raise MigrationError(f"bootstrap: {exc}. Nothing was written.") from exc
    return pd.DataFrame({"operator": operator.name, "key": list(encoded),
                         "value": list(encoded.values()), "deleted": False})


def _rewritten(positions: dict[str, Any], offsets: Offsets | None) -> dict[str, Any]:
    if offsets is None:
        return positions
    if callable(offsets):
        return dict(offsets(dict(positions)))
    return {**positions, **offsets}


def _global_tables(pipeline: Pipeline) -> list[GlobalTable]:
    return [hook for _, hook in pipeline.all_hooks() if isinstance(hook, GlobalTable)]


def _replace(rows: DataFrame, path: str) -> None:
    """Make ``rows`` the whole Delta table at ``path`` (created, or overwritten with their
    schema): an export or an import redone after a crash writes the same table again."""
    rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)


def _state_path(path: str) -> str:
    return f"{path.rstrip('/')}/state"


def _global_path(path: str, name: str) -> str:
    return f"{path.rstrip('/')}/global/{name}"
