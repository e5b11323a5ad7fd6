"""Looking at a pipeline from outside its runs: status, lag, state as of a checkpoint, and the
invariants the asset checks assert. Nothing here writes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import state
from state import CHECKPOINT_OPERATOR, Checkpoint, CheckpointLog, PipelineLayout
from state.lake import tables

from ..context import RunContext
from ..errors import PipelineDefinitionError
from ..operators import GLOBAL_STATE
from ..pipeline import Pipeline
from ..runtime.meaning import describe as describe_state
from ..runtime.meaning import differences
from ..runtime.storage import state_types
from ..sinks import StoredSink

log = logging.getLogger(__name__)


def _codec(pipeline: Pipeline, operator: str) -> str:
    """The codec of ``operator``'s state; an error naming the stateful operators there are when
    ``pipeline`` keeps no state under that name (rather than an empty frame)."""
    if operator == GLOBAL_STATE:  # global storage: JSON, whichever operators wrote it
        return "json"
    names: list[str] = []
    for op in pipeline.stream.operators:
        clock = op.declares().clock
        if clock is not None and operator in clock.names:
            return "json"  # deadlines are numbers, stored as JSON whatever the operator's codec
        if operator in op.declares().names:
            return op.codec
        names.extend(op.declares().names)
    raise PipelineDefinitionError(f"pipeline {pipeline.name!r} keeps no state under operator "
                                  f"{operator!r}; its stateful operators: {names} (and "
                                  f"{GLOBAL_STATE!r}, its global storage)")


def read_state(spark: SparkSession, pipeline: Pipeline, operator: str, as_of: int | None = None,
               warehouse: str | None = None) -> pd.DataFrame:
    """``key, value, checkpoint_id`` of ``operator``'s state as of checkpoint ``as_of``
    (default: the latest), decoded with the operator's codec:
    ``sp.read_state(spark, pipeline, "running_sum", as_of=3)``. A state of many rows per key
    (a StatefulProcessor's list or map variable, ``"<operator>.<variable>"``) gives a row
    per list element or map entry: ``key, entry, value, checkpoint_id`` (a list element's
    ``entry`` is its position, in list order; a map entry's value is ``(user key, value)``).
    """
    entries = {name: column for op in pipeline.stream.operators
               for name, column in op.declares().entries}
    return state.read_state(spark, pipeline.layout(warehouse), operator, as_of,
                            codec=_codec(pipeline, operator), entries=entries.get(operator))


def changed_keys(spark: SparkSession, pipeline: Pipeline, operator: str, after: int,
                 upto: int | None = None, warehouse: str | None = None) -> pd.DataFrame:
    """Keys of ``operator`` changed after checkpoint ``after`` up to ``upto`` (default: latest)."""
    return state.changed_keys(spark, pipeline.layout(warehouse), operator, after, upto,
                              codec=_codec(pipeline, operator))


@dataclass
class PipelineStatus:
    """What ``describe`` reports."""

    pipeline: str
    checkpoint_id: int | None = None
    batch_id: int | None = None
    epoch: int | None = None
    checkpointed_at: float | None = None
    source_lag: int | None = None
    lag_by_part: dict[str, int] = field(default_factory=dict)
    state_keys: dict[str, int] = field(default_factory=dict)
    changelog_rows: int = 0
    sink_rows: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    migration: str | None = None  # the migration that made the last checkpoint, if one did
    #: how the pipeline as defined now would misread or leave behind the checkpoint's state:
    #: a run would stop on these (docs: guides/changing-pipelines.md)
    state_changes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        parts = (f"  source lag by partition {self.lag_by_part}"
                 if len(self.lag_by_part) > 1 else None)
        if self.checkpoint_id is None:
            head = [f"{self.pipeline}: no checkpoint yet; source lag {self.source_lag}"]
            return head + ([parts] if parts else [])
        return [f"{self.pipeline}: checkpoint {self.checkpoint_id} (batch {self.batch_id}, "
                f"epoch {self.epoch}); source lag {self.source_lag}",
                *([parts] if parts else []),
                f"  state keys {self.state_keys} in {self.changelog_rows} changelog rows",
                f"  sink rows {self.sink_rows}; dead letters {self.dead_letters}",
                *([f"  made by migration {self.migration!r}"] if self.migration else []),
                *(["  the pipeline as defined now would stop: its state differs"]
                  + [f"    - {change}" for change in self.state_changes]
                  if self.state_changes else [])]


def describe(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> PipelineStatus:
    """The pipeline's status: last checkpoint, how far its source is ahead, state size."""
    layout = pipeline.layout(warehouse)
    status = PipelineStatus(pipeline=pipeline.id)
    last = _last_checkpoint(spark, layout)
    status.lag_by_part = _lag_by_part(spark, pipeline, layout, last)
    status.source_lag = sum(status.lag_by_part.values())
    if last is not None:
        status.checkpoint_id, status.batch_id = last.checkpoint_id, last.batch_id
        status.epoch, status.checkpointed_at = last.epoch, last.created_at
        status.migration = last.migration
        status.state_changes = _state_changes(pipeline, last, layout.state)
        changelog = tables.read(spark, layout.state)
        status.changelog_rows = changelog.count()
        live = (state.latest_per_key(changelog.where(F.col("operator") != CHECKPOINT_OPERATOR))
                .where(~F.col("deleted")).groupBy("operator").count().collect())
        status.state_keys = {row["operator"]: int(row["count"]) for row in live}
    for sink in pipeline.sinks:
        if isinstance(sink, StoredSink) and tables.exists(spark, sink.location(layout)):
            status.sink_rows[sink.name] = tables.read(spark, sink.location(layout)).count()
    if tables.exists(spark, layout.dead_letters):
        status.dead_letters = tables.read(spark, layout.dead_letters).count()
    return status


def _state_changes(pipeline: Pipeline, last: Checkpoint, state_path: str) -> list[str]:
    if last.operators is None:  # recorded from the next checkpoint on
        return []
    now = describe_state(pipeline.stream.operators, state_types(pipeline, state_path, last))
    found = differences(last.operators, now, last.tracked,
                        [variable.name for variable in pipeline.tracked])
    return [f"{d.name!r}: {d.what}" for d in found if d.blocking]


def describe_lag(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> int:
    """How far the pipeline's source is ahead of its last checkpoint (per partition of a Kafka
    source: :func:`describe_lag_by_part`)."""
    layout = pipeline.layout(warehouse)
    return _lag(spark, pipeline, layout, _last_checkpoint(spark, layout))


def describe_lag_by_part(spark: SparkSession, pipeline: Pipeline,
                         warehouse: str | None = None) -> dict[str, int]:
    """:func:`describe_lag` per part of the source: ``{"<topic>:<partition>": offsets}`` for
    Kafka, ``{source name: lag}`` for the others (empty when the input is missing)."""
    layout = pipeline.layout(warehouse)
    return _lag_by_part(spark, pipeline, layout, _last_checkpoint(spark, layout))


def _lag_by_part(spark: SparkSession, pipeline: Pipeline, layout: PipelineLayout,
                 last: Checkpoint | None) -> dict[str, int]:
    ctx = RunContext(spark, layout, last.epoch if last else 0, run_id="describe")
    source = pipeline.source
    try:
        lag = source.lag_by_part(ctx, (last.offsets if last else {}).get(source.name))
    except Exception as exc:  # the input is missing or unreachable: nothing to report
        log.debug("%s: no source lag (%s)", pipeline.name, exc)
        return {}
    return {part: max(0, n) for part, n in lag.items()}


def _last_checkpoint(spark: SparkSession, layout: PipelineLayout) -> Checkpoint | None:
    return CheckpointLog(spark, layout).latest() if tables.exists(spark, layout.state) else None


def _lag(spark: SparkSession, pipeline: Pipeline, layout: PipelineLayout,
         last: Checkpoint | None) -> int:
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
    must parse, ids must run 1..latest once each, and no state row may be newer than it. Read
    from the checkpoint records' ids and the statistics of ``checkpoint_id``, without Spark
    where delta-rs serves ``_state``."""
    layout = pipeline.layout(warehouse)
    if not tables.exists(spark, layout.state):
        return []
    checkpoints = CheckpointLog(spark, layout)
    try:
        last = checkpoints.latest()
    except Exception as exc:
        return [f"latest checkpoint record of {layout.state} is unreadable: {exc}"]
    if last is None:
        return []
    problems = []
    ids = checkpoints.ids()
    repeated = sorted({found for found in ids if ids.count(found) > 1})
    if repeated:
        problems.append(f"checkpoint id(s) recorded more than once: {repeated}")
    if len(set(ids)) != last.checkpoint_id:
        problems.append(f"{len(set(ids))} checkpoint records for ids 1..{last.checkpoint_id}")
    newer = tables.count_between(spark, layout.state, "checkpoint_id", last.checkpoint_id + 1)
    if newer:
        problems.append(f"{newer} state row(s) newer than checkpoint {last.checkpoint_id}")
    return problems


def global_table_problems(spark: SparkSession, pipeline: Pipeline,
                          warehouse: str | None = None) -> list[str]:
    """Global tables holding rows beyond the marker of the last checkpoint (should be none once
    a run ended: recovery and checkpoints keep them in step). Counted from the index column's
    statistics and values, without Spark where delta-rs serves the tables."""
    layout = pipeline.layout(warehouse)
    last = _last_checkpoint(spark, layout)
    problems = []
    for key, hook in pipeline.all_hooks():
        if not isinstance(hook, state.GlobalTable):
            continue
        marker = last.markers.get(key) if last else None
        bound = -1 if marker is None else int(marker)
        beyond = tables.count_between(spark, layout.table(hook.name), hook.index, bound + 1)
        if beyond:
            problems.append(f"global table {hook.name!r}: {beyond} row(s) beyond marker {bound}")
    return problems
