"""Helpers for testing your own pipelines: run one on a few records in a temporary warehouse and
get back what it wrote, the state it keeps and what it rejected, in one call.

>>> import ops as sp
>>> from ops.testing import run_records
>>> def running_sum(op, md, data):
...     total = sp.get(op, md) + data["x"].cumsum()
...     sp.set(op, md, int(total.iloc[-1]))
...     return data.assign(total=total)
>>> pipeline = (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
...             .map(running_sum, state=0).write.to_delta("sums")).named("sums")
>>> result = run_records(pipeline, [{"k": "a", "x": 1}, {"k": "a", "x": 2}, {"k": "b", "x": "?"}],
...                      spark=spark)
>>> result.outputs["sums"]["total"].tolist()
[1, 3]
>>> result.state["running_sum"].set_index("key")["value"].to_dict()
{'a': 3}
>>> result.dead_letters["reason"].tolist()
["field 'x' '?' is not an integer; expected long"]

``crash_at="after_sink_write"`` stops the first run at that protocol step and runs the pipeline
again, which recovers from the last checkpoint and finishes: the result must be the same as
without the crash.

Processing-time timers are tested with a :class:`ManualClock` (as Spark's own tests use one):
``run_records(..., clock=clock)`` runs on it, and ``clock.advance("10min")`` between runs makes
a timer due without waiting for it.

A Spark ``StatefulProcessor`` is tested without Spark by :class:`ProcessorTester`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from state import Expiring, StateStore, decode_key, value_json
from state.faults import InjectedCrash, crash_at
from state.lake import tables

from .arguments import duration
from .clock import SYSTEM_CLOCK, Clock
from .context import BatchScope
from .errors import PipelineDefinitionError
from .operating.inspection import read_state
from .operators.processor_handle import TIMERS, VALUE_ENTRY, user_key
from .operators.spark_processor import TransformWithState
from .operators.timing import timers_of
from .pipeline import Pipeline
from .runtime import DEAD_LETTER_SCHEMA, RunReport
from .sinks import StoredSink
from .sources import CallbackSource
from .spark import spark_session

__all__ = ["PROTOCOL_STEPS", "ManualClock", "ProcessorTester", "TestRun", "run_records"]

#: Where ``crash_at_step`` can stop a run, in protocol order. The ``hook_*`` steps come right
#: after the hooks of that name ran (with or without hooks); the global-table ones around an
#: append to a ``sp.global_table``; ``table_changelog_written`` between a state table's
#: changelog append and its upsert; ``state_columns_added`` between the commit that adds a
#: typed state's columns to ``_state`` and the checkpoint's own.
PROTOCOL_STEPS = ("hook_on_setup", "hook_on_recover", "hook_on_start", "after_plan",
                  "before_global_append", "after_global_append", "table_changelog_written",
                  "after_sink_write", "hook_on_checkpoint", "before_checkpoint_commit",
                  "state_columns_added", "after_checkpoint_commit", "hook_on_post_checkpoint")


@dataclass(frozen=True)
class TestRun:
    """What a test run left behind.

    ``outputs``: every stored sink's rows, by sink name (a state table's current rows);
    ``state``: every stateful operator's ``key, value, checkpoint_id`` as of the last
    checkpoint, decoded; ``dead_letters``: rejected records with their reasons; ``reports``:
    the report of each run (two when a crash was injected); ``warehouse``: where it all is.
    """

    __test__ = False  # not a pytest test class, despite its name

    outputs: dict[str, pd.DataFrame]
    state: dict[str, pd.DataFrame]
    dead_letters: pd.DataFrame
    reports: list[RunReport]
    warehouse: str
    crashed_at: str | None = None


class ManualClock:
    """Processing time that moves only when a test moves it (a :class:`~ops.clock.Clock`).

    >>> clock = ManualClock("2026-01-01T00:00:00Z")
    >>> clock.advance("10min"); pd.Timestamp(clock.now(), unit="s")
    Timestamp('2026-01-01 00:10:00')
    >>> clock.advance(-1)
    Traceback (most recent call last):
    ...
    ValueError: a clock moves forward only; advance by -1 was asked
    """

    def __init__(self, start: float | str | pd.Timestamp = 0.0):
        self._now = _seconds(start)

    def now(self) -> float:
        return self._now

    def advance(self, by: float | str | timedelta) -> None:
        """Move the clock forward by ``by``: seconds, or a duration (``"30s"``, ``"10min"``)."""
        step = by if isinstance(by, (int, float)) else pd.Timedelta(by).total_seconds()
        if step < 0:
            raise ValueError(f"a clock moves forward only; advance by {by!r} was asked")
        self._now += step


def _seconds(at: float | str | pd.Timestamp) -> float:
    """``at`` as seconds since the epoch: a number as it is, a timestamp (naive ones UTC)."""
    if isinstance(at, (int, float)):
        return float(at)
    stamp = pd.Timestamp(at)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
    return stamp.value / 1e9


def run_records(pipeline: Pipeline, *batches: Sequence[Any] | Mapping[str, Sequence[Any]],
                spark: SparkSession | None = None, warehouse: str | None = None,
                crash_at_step: str | None = None, crash: int = 1, clock: Clock = SYSTEM_CLOCK) -> TestRun:
    """Publish each of ``batches`` (a list of records each, one publish each) to the pipeline's
    callback source (for a pipeline merging several callbacks, a batch is a mapping of callback
    name to its records), run the pipeline until drained, and collect what it left.

    ``warehouse`` defaults to a new temporary folder, ``spark`` to :func:`ops.spark_session`.
    With ``crash_at_step`` (one of :data:`PROTOCOL_STEPS`) the first run stops at the
    ``crash``-th arrival at that step, and a second run recovers and drains. ``clock`` gives
    the runs their processing time (a :class:`ManualClock` to test timers); pass the same
    ``warehouse`` again to run on after moving it.
    """
    source = _callback_source(pipeline)
    spark = spark or spark_session()
    warehouse = warehouse or tempfile.mkdtemp(prefix="lakestream-test-")
    for records in batches:
        by_source = records if isinstance(records, Mapping) else {source.name: records}
        for name, part in by_source.items():
            pipeline.publish(spark, list(part), warehouse, source=name)
    reports = []
    if crash_at_step is not None:
        _check_step(crash_at_step)
        try:
            with crash_at(crash_at_step, crash):
                reports.append(pipeline.run_once(spark, warehouse, clock=clock))
        except InjectedCrash:
            pass  # what a crash leaves is what the next run must recover from
    reports.append(pipeline.run_once(spark, warehouse, clock=clock))
    return TestRun(outputs=_outputs(spark, pipeline, warehouse),
                   state=_state(spark, pipeline, warehouse),
                   dead_letters=_dead_letters(spark, pipeline, warehouse), reports=reports,
                   warehouse=warehouse, crashed_at=crash_at_step)


def _callback_source(pipeline: Pipeline) -> CallbackSource:
    callbacks = [part for part in pipeline.source.parts if isinstance(part, CallbackSource)]
    if not callbacks:
        raise PipelineDefinitionError(
            f"pipeline {pipeline.name!r}: run_records publishes records, so the pipeline must "
            "read sp.read.from_callback(...)")
    return callbacks[0]


def _check_step(step: str) -> None:
    if step not in PROTOCOL_STEPS:
        raise PipelineDefinitionError(f"crash_at_step {step!r} is not a protocol step; use one "
                                      f"of {list(PROTOCOL_STEPS)}")


def _outputs(spark: SparkSession, pipeline: Pipeline, warehouse: str) -> dict[str, pd.DataFrame]:
    return {sink.name: sink.read(spark, pipeline.layout(warehouse)) for sink in pipeline.sinks
            if isinstance(sink, StoredSink)}


def _state(spark: SparkSession, pipeline: Pipeline, warehouse: str) -> dict[str, pd.DataFrame]:
    if not tables.exists(spark, pipeline.layout(warehouse).state):
        return {}
    names = [name for op in pipeline.stream.operators for name in op.declares().names]
    return {name: read_state(spark, pipeline, name, warehouse=warehouse) for name in names}


def _dead_letters(spark: SparkSession, pipeline: Pipeline, warehouse: str) -> pd.DataFrame:
    path = pipeline.layout(warehouse).dead_letters
    if not tables.exists(spark, path):
        return pd.DataFrame(columns=DEAD_LETTER_SCHEMA.names)
    return tables.read(spark, path).orderBy("batch_id", "position").toPandas()


class ProcessorTester:
    """A Spark ``StatefulProcessor`` driven batch by batch as ``transform_with_state`` runs it,
    with no Spark session and no warehouse: each :meth:`test` is a batch of a run of its own,
    whose state comes back from the encoded rows the batch before checkpointed (what a restart
    reads), so a value that does not survive storage shows here; ``initial_state`` is handed
    to ``handleInitialState`` in the first. Like pyspark's ``TwsTester``, on lakestream's own
    handle and operator.

    Time as the pipeline has it: with ``time_mode="processing_time"`` a batch's time is
    ``clock``'s (a :class:`ManualClock`; move it between batches and a timer or TTL falls
    due); with ``time_mode="event_time"``, ``watermark=("ts", "2s")`` is the stream's
    ``with_watermark``: the watermark follows the rows' event times (:attr:`watermark`), rows
    at or below it are dropped, and ``test([])`` is a batch with no input that fires what is
    due, as the runtime runs one.

    >>> import pandas as pd
    >>> from pyspark.sql.streaming import StatefulProcessor
    >>> class Count(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.n = handle.getValueState("n", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         total = (self.n.get()[0] if self.n.exists() else 0) + sum(map(len, rows))
    ...         self.n.update((total,))
    ...         yield pd.DataFrame({"k": [key[0]], "total": [total]})
    >>> tester = ProcessorTester(Count(), "k string, total long", keys=["k"])
    >>> tester.test([{"k": "a"}, {"k": "b"}, {"k": "a"}])["total"].tolist()
    [2, 1]
    >>> tester.test([{"k": "a"}])["total"].tolist(), sorted(tester.state().items())
    ([3], [('a', {'n': (3,)}), ('b', {'n': (1,)})])
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, processor: Any, output_schema: Any, keys: Sequence[str],
                 form: str = "pandas", initial_state: Any = None, time_mode: str = "none",
                 watermark: tuple[str, Any] | None = None, clock: ManualClock | None = None,
                 ) -> None:
        marked = None if watermark is None else (
            watermark[0], duration("processor_tester", "delay", watermark[1]))
        self._operator = TransformWithState.of(
            type(processor).__name__, tuple(keys), processor, output_schema, "append", time_mode,
            form, initial_state, marked)
        self._clock = clock or ManualClock()
        #: (state, encoded key, entry or None) -> encoded value: what the last batch left stored
        self._stored: dict[tuple[str, str, str | None], str] = {}
        self._batches = 0

    def test(self, rows: pd.DataFrame | Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
        """The processor's output for one batch of ``rows`` (a frame, or records; none: a
        batch with no input, which fires the timers due)."""
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        store = self._store()
        self._batches += 1
        scope = BatchScope(pipeline="processor_tester", batch_id=self._batches,
                           key_fields=self._operator.keys, store=store,
                           batch_time=int(self._clock.now() * 1000))
        output = self._operator.apply(scope, frame)
        store.encode_changes()
        changes = store.changes()
        declared = dict(self._operator.declares().entries)
        changed = [changes.rows[["operator", "key", "value", "deleted"]].assign(entry=None), *(
            pd.DataFrame({"operator": rows["operator"].to_pylist(), "key": rows["key"].to_pylist(),
                          "entry": rows[columns.entry].to_pylist(),
                          "value": value_json(rows, columns), "deleted": rows["deleted"].to_pylist()})
            for rows in changes.entries if (columns := declared[rows["operator"][0].as_py()]))]
        for part in changed:
            for name, key, value, deleted, entry in part[
                    ["operator", "key", "value", "deleted", "entry"]].itertuples(index=False):
                if deleted:
                    self._stored.pop((name, key, entry), None)
                else:
                    self._stored[name, key, entry] = value
        return output

    @property
    def watermark(self) -> int | None:
        """The event-time watermark the next batch starts with (epoch ms; ``None`` before any
        event)."""
        clock = self._operator.clock
        return None if clock is None else timers_of(clock, self._store()).watermark

    def state(self) -> dict[Any, dict[str, Any]]:
        """Each key's variables as the last batch left them (read back from storage): a value
        variable's tuple, a list's tuples, a map's dict of user key to value tuples; keys in
        no particular order."""
        operator, store = self._operator, self._store()
        keys = list(dict.fromkeys(decode_key(key) for _, key, _ in self._stored))
        records = store.operator(operator.name, None, operator.codec).get_values(keys)
        held: dict[Any, dict[str, Any]] = {key: {name: _live(value) for name, value in
                                                  (record or {}).items() if name != TIMERS}
                                            for key, record in zip(keys, records)}
        for variable, kind, columns in operator.variables:
            entries = store.entries(operator.variable_state(variable), columns)
            for key in keys:
                stored = entries.entries(key)
                if stored and kind == "list":  # positions: numbers, in order
                    held[key][variable] = [_live(stored[entry]) for entry in sorted(stored, key=int)]
                elif stored and kind == "map":
                    held[key][variable] = {user_key(entry): _live(value)
                                           for entry, value in sorted(stored.items())}
                elif stored:
                    held[key][variable] = _live(stored[VALUE_ENTRY])
        return {key: variables for key, variables in held.items() if variables}

    def _store(self) -> StateStore:
        stored = list(self._stored)
        return StateStore.of_rows(pd.DataFrame({
            "operator": [name for name, _, _ in stored], "key": [key for _, key, _ in stored],
            "entry": [entry for _, _, entry in stored], "value": list(self._stored.values())}))


def _live(stored: Any) -> Any:
    """A stored value as the processor reads it (a TTL's stamp set aside)."""
    return stored.value if isinstance(stored, Expiring) else stored
