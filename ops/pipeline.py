"""The pipeline builder: ``sp.read.from_callback(...).map(...).write.to_console().named(...)``.

Definition only: every step returns a new, immutable object (so a partial pipeline can be reused
safely) and checks its arguments at once; nothing here reads or writes data until ``run_once``
hands the pipeline to the runtime. The steps after a stream have modules of their own:
:mod:`ops.group_by` (``group_by(...).agg(...)``) and :mod:`ops.writer` (``.write.to_*(...)``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from state import (
    DEFAULT_KEY_GROUPS,
    Hooks,
    PipelineLayout,
    Tracked,
    check_key_groups,
    check_name,
    default_warehouses,
    resolve_warehouse,
)
from state.lake import tables

from . import arguments
from .clock import SYSTEM_CLOCK, Clock
from .errors import ConfigError, PipelineDefinitionError
from .group_by import GroupedStream
from .operators import (
    STATELESS,
    Agg,
    ChangesAsRows,
    EventTimeWatermark,
    Filter,
    JoinSide,
    KeptTableJoin,
    LatestByKey,
    Map,
    Operator,
    StateKind,
    StreamStreamJoin,
    TableJoin,
    TableTableJoin,
)
from .runtime import (
    BatchReport,
    CheckpointPolicy,
    CheckpointReport,
    Continuous,
    RunMetrics,
    RunReport,
    StopSignal,
    Trigger,
    check_mode,
    run_pipeline,
)
from .sinks import Sink, StoredSink, TableSink
from .sources import CallbackSource, MergedSource, PublishReport, Source
from .writer import Writer

#: How often a pipeline's sensor looks for new input unless it says (``with_poll_interval``).
DEFAULT_POLL_SECONDS = 30


@dataclass(frozen=True)
class Stream:
    """A source and the operators applied to it, so far."""

    source: Source
    operators: tuple[Operator, ...] = ()

    def map(self, fn: Callable[..., Any], *, state: Any = STATELESS, name: str | None = None,
            vectorized: bool = False, codec: str = "json", hooks: Hooks | None = None,
            timers: bool = False, ttl: Any = None, event_time: str | None = None,
            delay: Any = None, late: str = "keep", data: str = "frame",
            state_type: Any = None) -> Stream:
        """Apply ``fn`` to each batch.

        Without ``state``: ``fn(data) -> DataFrame``. With ``state`` (the initial state of every
        key): ``fn(op, md, data)`` may call ``sp.get(op, md)`` and ``sp.set(op, md, value)``.
        Give ``name`` to keep state stable if you later reorder operators. ``vectorized=True``
        calls ``fn`` once per batch with every key (``get`` returns a Series indexed by key);
        ``codec="pickle"`` stores arbitrary objects; ``hooks`` are this operator's lifecycle hooks.
        State is kept per value of the stream's key (``key=`` of the reader), or unkeyed.
        ``data="arrays"`` (per-key calls) hands ``fn`` its key's rows as ``{column: NumPy
        array}`` instead of a DataFrame, and ``fn`` returns such a dict (or a DataFrame, or
        None): NumPy on a few values costs microseconds where pandas costs a hundred. Results
        with a row per input row keep the input's order; others follow the batch's rows.

        Keyed maps may have time act on their keys (:mod:`ops.operators.timing` states the
        rules): ``timers=True`` lets ``fn`` call ``sp.set_timer(op, md, at=…)``, and a due timer
        calls ``fn`` for its key even with no data; ``ttl="1h"`` deletes a key's state once no
        rows came for it that long. Deadlines are processing time, or event time with
        ``event_time`` (a column) and ``delay`` (how far the watermark trails the largest event
        time seen). ``late``: what becomes of a row whose event time is at or below the
        watermark the batch starts with: ``"keep"`` (the default: ``fn`` sees it and decides,
        as a KX or Flink process function does) or ``"drop"`` (Spark's rule for a stateful
        function with event-time timeouts: dropped before ``fn``, counted in the log).

        ``state_type`` stores a keyed state in typed columns of ``_state`` rather than as JSON
        text: ``int``, ``float``, ``bool``, ``str``, ``pd.Timestamp``, or a flat record of these
        (``{"n": int, "mean": float}``), for keys of one int or string column. Any engine then
        reads the values with their types, and a checkpoint neither encodes nor parses text. A
        value that does not fit stops the batch before anything of it is written. Without
        ``state_type``, a keyed map's state is typed as its ``state`` value is (``state=0``:
        int, ``state={"n": 0}``: a record; ``None``, lists and nested dicts stay JSON), unless
        it has timers or TTL, the pickle codec, keys not declared as one ``long`` or
        ``string`` field, windows, sessions or timers beside it, or state already stored as
        text (docs/pages/concepts/state-engine.md); ``state_type="json"`` keeps it JSON text.

        >>> import ops as sp
        >>> stream = sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
        >>> def running_sum(op, md, data):
        ...     total = sp.get(op, md) + int(data["x"].sum())
        ...     sp.set(op, md, total)
        ...     return data.assign(total=total)
        >>> stream.map(running_sum, state=0).operators[-1].declares().keys
        ('k',)
        """
        if not callable(fn):
            raise PipelineDefinitionError(f"map needs a function, got {type(fn).__name__}")
        named = self._name_for(name, fn)
        clock = arguments.map_clock(named, timers, ttl, event_time, delay)
        op = Map(fn=fn, name=named, state=state, vectorized=vectorized, codec=codec, hooks=hooks,
                 keys=self.source.schema.key_fields, clock=clock, timers=timers, data=data,
                 drop_late=arguments.drops_late(named, late, event_time),
                 state_type=arguments.state_type(named, state_type),
                 infer_state_type=state_type is None)  # "json" says no
        return dataclasses.replace(self, operators=self.operators + (op,))

    def filter(self, fn: Callable[..., Any], *, name: str | None = None) -> Stream:
        """Keep rows where ``fn(data)`` is True."""
        op = Filter(fn=fn, name=self._name_for(name, fn))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def via(self, operator: Operator) -> Stream:
        """Apply a user-defined operator (a subclass of ``sp.Operator``).

        Its ``apply(scope, frame)`` may keep managed state through
        ``scope.store.operator(self.name, initial)``, which checkpoints and recovers like ``map``.
        """
        if not isinstance(operator, Operator):
            raise PipelineDefinitionError(f"via() takes an sp.Operator, got {type(operator).__name__}")
        if operator.name in {op.name for op in self.operators}:
            raise PipelineDefinitionError(f"operator name {operator.name!r} is used twice")
        check_name("operator", operator.name)
        return dataclasses.replace(self, operators=self.operators + (operator,))

    def merge(self, *others: Stream) -> Stream:
        """One stream of this source's records and ``others``' (merge before any operator);
        rows carry their source's name in ``_source``."""
        streams = (self, *others)
        if any(stream.operators for stream in streams):
            raise PipelineDefinitionError("merge streams straight from their readers, before map, "
                                          "filter or any other operator")
        parts = tuple(part for stream in streams for part in stream.source.parts)
        return Stream(source=MergedSource(parts))

    def join_table(self, path: str, on: str | tuple[str, ...], *, columns: tuple[str, ...] | None = None,
                   how: str = "left", name: str | None = None) -> Stream:
        """Enrich each event with the Delta table at ``path``'s row for the same ``on`` key (a
        state table, say), as of the batch's planning; ``how="inner"`` drops events without one.

        ``sales.join_table(tickets.table_path("movie_tickets_sold"), on="title")`` joins another
        pipeline's state table.
        """
        keys = (on,) if isinstance(on, str) else tuple(on)
        op = TableJoin(name=self._name_for(name, "join"), path=path, on=keys,
                       columns=tuple(columns) if columns else None, how=how)
        return dataclasses.replace(self, operators=self.operators + (op,))

    def join_tables(self, on: str | tuple[str, ...], left: tuple[str, tuple[str, ...]],
                    right: tuple[str, tuple[str, ...]], how: str = "inner",
                    name: str | None = None, kinds: Mapping[str, str] | None = None) -> Stream:
        """Join two tables on ``on``, given a merged stream of their updates (e.g. two state
        tables' changelogs read with ``sp.read.from_delta``): ``left``/``right`` are
        ``(source name, value columns)``; ``kinds`` the declared types of value columns
        (``{"total": "long"}``), which the joined table keeps whatever a batch holds. Write the
        result with ``.write.to_table(name)``."""
        keys = (on,) if isinstance(on, str) else tuple(on)
        op = TableTableJoin(name=self._name_for(name, "table_join"), keys=keys,
                            left=(left[0], tuple(left[1])), right=(right[0], tuple(right[1])),
                            how=how, kinds=tuple((kinds or {}).items()))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def join_kept_table(self, on: str, table: tuple[str, tuple[str, ...]], how: str = "left", *,
                        renamed: Mapping[str, str] | None = None,
                        times: tuple[str, str] | None = None,
                        kinds: Mapping[str, str] | None = None, name: str | None = None) -> Stream:
        """Join events to a table kept in state from its updates, given a merged stream of both:
        ``table`` is ``(updates' source name, value columns)``, ``on`` the column holding the
        key in both. ``events.merge(user_updates).join_kept_table("user", ("users", ("name",)))``
        gives each event the user's name as the last update before it left it (see
        :class:`KeptTableJoin`: ``times``, ``renamed``, ``kinds``)."""
        op = KeptTableJoin(name=self._name_for(name, "kept_table_join"), on=on,
                           table=(table[0], tuple(table[1])), how=how,
                           renamed=tuple((renamed or {}).items()), times=times,
                           kinds=tuple((kinds or {}).items()))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def join_within(self, on: str, left: JoinSide, right: JoinSide, *, before: str, after: str,
                    grace: str = "0s", how: str = "inner", kinds: Mapping[str, str] | None = None,
                    name: str | None = None) -> Stream:
        """Join two streams' records of the same key (in column ``on``) whose event times are
        close, given a merged stream of both: a right record from ``before`` earlier to
        ``after`` later than a left one (ksqlDB's ``WITHIN``). ``how``: ``inner``, ``left`` or
        ``outer`` (unmatched records emitted once no record can match them). Each side keeps a
        record until its own stream time passes the record's time + before + after + ``grace``;
        one arriving after that is late and kept no longer. See :class:`StreamStreamJoin`."""
        named = self._name_for(name, "stream_join")
        op = StreamStreamJoin(name=named, on=on, left=left, right=right,
                              before_ms=arguments.duration(named, "before", before),
                              after_ms=arguments.duration(named, "after", after),
                              grace_ms=arguments.duration(named, "grace", grace), how=how,
                              kinds=tuple((kinds or {}).items()))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def as_table(self, *keys: str, name: str | None = None) -> Stream:
        """Read the stream as updates to a table keyed by ``keys``: each record replaces its
        key's row, a record with only nulls besides the key deletes it (a tombstone). Write it
        with ``.write.to_table(name)``."""
        if not keys:
            raise PipelineDefinitionError("as_table needs the key column(s)")
        op = LatestByKey(name=self._name_for(name, "table"), keys=tuple(keys))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def changes_as_rows(self, name: str | None = None,
                        kinds: Mapping[str, str] | None = None) -> Stream:
        """Read a table's change rows (after ``as_table``, or a state table's changelog read
        with ``sp.read.from_delta``) as signed rows, so a following ``group_by(...).agg(...)``
        aggregates the *table*: an update takes the old row out of its group before the new
        one joins its own (see :mod:`ops.operators.retraction`); COUNT, SUM, AVG and
        COLLECT_LIST only. ``kinds`` (column -> ``long``, ``boolean``…) types the columns a
        batch's nulls would turn into doubles (a changelog read from Delta)."""
        op = ChangesAsRows(name=self._name_for(name, "changes_as_rows"),
                           kinds=tuple((kinds or {}).items()))
        return dataclasses.replace(self, operators=self.operators + (op,))

    def with_watermark(self, event_time: str, delay: Any) -> Stream:
        """The stream's event time is column ``event_time``, its watermark ``delay`` behind the
        largest seen (``"10 seconds"``): what ``time_mode="event_time"`` operators after it
        fire timers and drop late rows by (:mod:`ops.operators.watermark`)."""
        named = self._name_for(None, "watermark")
        return self.via(EventTimeWatermark(named, event_time,
                                           arguments.duration(named, "delay", delay)))

    withWatermark = with_watermark  # Spark's spelling

    def group_by(self, *columns: str) -> GroupedStream:
        """Keyed aggregation: ``.group_by("title").agg(sold=sp.count("ticket"))`` yields the
        state table's changes; write them with ``.write.to_table("name")``."""
        return GroupedStream(self, tuple(columns))

    def typed(self, aggs: Mapping[str, Agg]) -> tuple[tuple[str, Agg], ...]:
        """``aggs`` with result types from the columns the source declares (see
        :meth:`Agg.typed`), unless an operator before may have changed them (any but a filter):
        then their values decide."""
        unchanged = all(isinstance(op, Filter) for op in self.operators)
        declared = self.source.kinds() if unchanged else {}
        return tuple((name, agg.typed(declared)) for name, agg in aggs.items())

    @property
    def write(self) -> Writer:
        """Choose a sink: ``.write.to_console()``, ``.write.to_delta("name")`` or, after an
        aggregation, ``.write.to_table("name")``."""
        return Writer(Pipeline(stream=self, sinks=()))

    def _name_for(self, name: str | None, fn: Callable[..., Any] | str) -> str:
        """``name`` if given (checked unique), else one made from ``fn``'s name (or the text)."""
        return arguments.operator_name({op.name for op in self.operators}, name, fn)


@dataclass(frozen=True)
class Pipeline:
    """A runnable pipeline: source, operators, sinks and a name that locates its tables."""

    stream: Stream
    sinks: tuple[Sink, ...]
    name: str | None = None
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    tracked: tuple[Tracked, ...] = ()
    hooks: tuple[Hooks, ...] = ()
    key_groups: int = DEFAULT_KEY_GROUPS
    mode: str = "driver"
    #: how often an orchestrator looks for new input, in seconds (its Dagster sensor's interval)
    poll_seconds: int = DEFAULT_POLL_SECONDS

    def named(self, name: str) -> Pipeline:
        """Name the pipeline; its tables live under ``<warehouse>/<name>/``."""
        return dataclasses.replace(self, name=check_name("pipeline", name))

    @property
    def id(self) -> str:
        """The pipeline's name; a pipeline must be named before it runs or is stored."""
        if self.name is None:
            raise PipelineDefinitionError("the pipeline has no name: call .named('...') first")
        return self.name

    def checkpoint_every(self, batches: int | None = 1, seconds: float | None = None) -> Pipeline:
        """Checkpoint every ``batches`` micro-batches and/or ``seconds`` seconds (and at run end).
        Driver mode only: in distributed mode every batch is checkpointed, since its state lives
        only in ``_state``, where the next batch's tasks read it."""
        return dataclasses.replace(self, checkpoint=CheckpointPolicy(batches, seconds))

    def with_key_groups(self, groups: int) -> Pipeline:
        """Hash keyed state into ``groups`` key groups (default 256): the most workers a keyed
        operator's state can ever be spread over. Fixed by the pipeline's first checkpoint; a
        later run with another number stops with a ``ConfigError``."""
        try:
            return dataclasses.replace(self, key_groups=check_key_groups(groups))
        except ValueError as exc:
            raise PipelineDefinitionError(f"pipeline {self.name!r}: {exc}") from None

    def with_mode(self, mode: str) -> Pipeline:
        """Where the operators run: ``"driver"`` (default; the fastest for small batches),
        ``"distributed"`` (on Spark executors, state shuffled by key group: the driver never
        holds a batch's rows or state) or ``"auto"`` (distributed when a run's first batch has
        at least ``AUTO_DISTRIBUTED_ROWS`` rows). See the docs, "Running on a Spark cluster"."""
        try:
            return dataclasses.replace(self, mode=check_mode(mode))
        except ValueError as exc:
            raise PipelineDefinitionError(f"pipeline {self.name!r}: {exc}") from None

    def with_poll_interval(self, seconds: int) -> Pipeline:
        """Look for new input every ``seconds`` (default 30): the interval of the pipeline's
        Dagster sensor (``assets.make_pipeline_sensor``). Input published at a random moment
        is read after about half an interval plus a run's start on average (the docs,
        "Running with Dagster", give what each interval gave here); for less, run it
        continuously.

        >>> import ops as sp
        >>> ticks = sp.read.from_callback("ticks").write.to_console().named("ticks")
        >>> ticks.with_poll_interval(5).poll_seconds
        5
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            raise PipelineDefinitionError(
                f"pipeline {self.name!r}: the poll interval is a whole number of seconds, at "
                f"least 1 (Dagster's sensors tick in seconds); got {seconds!r}")
        return dataclasses.replace(self, poll_seconds=seconds)

    def track(self, *variables: Tracked) -> Pipeline:
        """Save these tracked variables (``sp.track(name, initial)``) with every checkpoint;
        they are restored before any operator runs after a restart."""
        names = [v.name for v in self.tracked + variables]
        if len(set(names)) != len(names):
            raise PipelineDefinitionError(f"tracked variable names repeat: {sorted(names)}")
        return dataclasses.replace(self, tracked=self.tracked + variables)

    def with_hooks(self, *hooks: Hooks) -> Pipeline:
        """Add pipeline-wide lifecycle hooks (``sp.Hooks`` subclasses, global tables)."""
        updated = dataclasses.replace(self, hooks=self.hooks + hooks)
        keys = [key for key, _ in updated.all_hooks()]
        if len(set(keys)) != len(keys):
            raise PipelineDefinitionError(
                f"hooks need distinct marker keys (set a `marker_key` attribute): {keys}")
        return updated

    @property
    def stateful_operators(self) -> tuple[str, ...]:
        """The names of the operators that keep managed state."""
        return tuple(op.name for op in self.stream.operators
                     if op.declares().kind is not StateKind.STATELESS)

    def all_hooks(self) -> list[tuple[str, Hooks]]:
        """Every hook with the key its marker is stored under: pipeline-wide, then per operator."""
        keyed = [(hook_key(hook), hook) for hook in self.hooks]
        keyed += [(f"op:{op.name}", op.hooks) for op in self.stream.operators
                  if op.hooks is not None]
        return keyed

    @property
    def write(self) -> Writer:
        """Add another sink (fan-out): every sink receives the same output."""
        return Writer(self)

    @property
    def source(self) -> Source:
        return self.stream.source

    def layout(self, warehouse: str | None = None) -> PipelineLayout:
        """Where the pipeline's tables are, under ``warehouse`` (default: the configured one)."""
        return PipelineLayout(resolve_warehouse(warehouse), self.id)

    def sink(self, name: str) -> Sink:
        """The sink called ``name``."""
        for sink in self.sinks:
            if sink.name == name:
                return sink
        raise PipelineDefinitionError(f"pipeline {self.name!r} has no sink {name!r}")

    def stored_sink(self, name: str) -> StoredSink:
        """The sink called ``name``, which must keep its output in Delta."""
        sink = self.sink(name)
        if not isinstance(sink, StoredSink):
            raise PipelineDefinitionError(f"sink {name!r} of {self.name!r} is not stored in Delta")
        return sink

    def table_path(self, name: str, warehouse: str | None = None) -> str:
        """Where stored sink ``name`` keeps its rows (for SQL, joins and other pipelines)."""
        return self.stored_sink(name).location(self.layout(warehouse))

    def read_sink(self, spark: SparkSession, name: str, warehouse: str | None = None) -> pd.DataFrame:
        """Rows of Delta sink ``name`` (batch and row order) or state table ``name`` (its
        current rows, by key), as pandas; before its first row, no rows but its columns; at a
        ``warehouse`` where the pipeline never ran, a ``ConfigError`` naming where it looked."""
        sink, layout = self.stored_sink(name), self.layout(warehouse)
        rows = sink.read(spark, layout)  # rows: the table is there, and no more need be asked
        if rows.empty and not any(tables.exists(spark, p) for p in (layout.batches, sink.location(layout))):
            raise ConfigError(
                f"pipeline {self.name!r} has not run at warehouse {layout.warehouse}: no batch "
                f"plans at {layout.batches}, no sink {name!r} at {sink.location(layout)}. Given "
                f"no warehouse it takes {default_warehouses()}; pass the warehouse it ran at.")
        return rows

    def rebuild_table(self, spark: SparkSession, name: str, warehouse: str | None = None) -> int:
        """Recreate state table ``name`` from its changelog; returns its rows."""
        sink = self.sink(name)
        if not isinstance(sink, TableSink):
            raise PipelineDefinitionError(f"sink {name!r} of {self.name!r} is not a state table")
        return sink.rebuild(spark, self.layout(warehouse))

    def run_once(self, spark: SparkSession, warehouse: str | None = None,
                 max_batches: int | None = None,
                 progress: Callable[[BatchReport], None] | None = None,
                 mode: str | None = None, clock: Clock = SYSTEM_CLOCK,
                 allow_dropped_state: bool = False) -> RunReport:
        """Recover, then run micro-batches until the source is drained or ``max_batches`` ran
        (see :func:`ops.runtime.run_pipeline`); ``mode`` overrides :meth:`with_mode` for this
        run; ``clock`` gives processing time (tests: :class:`ops.testing.ManualClock`).
        ``allow_dropped_state=True``: state no operator keeps now is dropped (a new
        checkpoint) instead of stopping the run (the docs, "Changing a running pipeline")."""
        pipeline = self if mode is None else self.with_mode(mode)
        return run_pipeline(pipeline, spark, warehouse=warehouse, max_batches=max_batches,
                            progress=progress, clock=clock, allow_dropped_state=allow_dropped_state)

    def run_continuously(self, spark: SparkSession, warehouse: str | None = None, *,
                         trigger: Any = "500ms", stop: StopSignal | None = None,
                         max_seconds: float | None = None,
                         progress: Callable[[BatchReport], None] | None = None,
                         checkpointed: Callable[[CheckpointReport], None] | None = None,
                         mode: str | None = None, allow_dropped_state: bool = False,
                         metrics: RunMetrics | None = None) -> RunReport:
        """Run as one long-lived process: recover once, then run a batch whenever the source
        has new input, polling it every ``trigger`` while idle (like Spark's
        ``trigger(processingTime=...)``), with the Spark session, state and plans kept warm.

        It stops when ``stop`` is set, after ``max_seconds``, or on SIGINT/SIGTERM (from the
        main thread): the batch in flight and its checkpoint finish first. A second signal, or
        a kill, stops it at once; the next run recovers as after any crash. Checkpoints follow
        the pipeline's policy, and an idle run checkpoints what it ran (unless the policy
        waits for ``every_seconds``). ``checkpointed`` hears of each checkpoint committed.
        ``allow_dropped_state`` as in :meth:`run_once`. ``metrics``: a :class:`ops.RunMetrics`
        the run reports to, for Prometheus to scrape (its ``serving()`` endpoint).

        >>> import ops as sp
        >>> pipeline = (sp.read.from_callback("ticks", schema={"sym": "string", "px": "double"})
        ...             .as_table("sym").write.to_table("latest")).named("prices")
        >>> stop = sp.StopSignal()
        >>> # pipeline.run_continuously(spark, trigger="200ms", stop=stop)  # until stop.set(...)
        >>> metrics = sp.RunMetrics()
        >>> # with metrics.serving(port=9464):  # http://127.0.0.1:9464/metrics
        >>> #     pipeline.run_continuously(spark, stop=stop, metrics=metrics)
        """
        live = Continuous(Trigger.parse(trigger), stop or StopSignal(),
                          None if max_seconds is None else time.monotonic() + max_seconds)
        pipeline = self if mode is None else self.with_mode(mode)
        with live.stop.on_signals():
            return run_pipeline(pipeline, spark, warehouse=warehouse, progress=progress,
                                checkpointed=checkpointed, continuous=live,
                                allow_dropped_state=allow_dropped_state, metrics=metrics)

    def publish(self, spark: SparkSession, records: Any, warehouse: str | None = None,
                dedupe_id: str | None = None, source: str | None = None) -> PublishReport:
        """Durably append records to the pipeline's callback inbox (one Delta commit).

        Invalid records are stored too and go to ``_dead_letters`` when processed; the report
        lists them. With ``dedupe_id`` a repeated publish of the same id stores nothing. A
        pipeline merging several callbacks takes the callback's name as ``source``.
        """
        callbacks = [part for part in self.source.parts if isinstance(part, CallbackSource)]
        chosen = [c for c in callbacks if source is None or c.name == source]
        if len(chosen) != 1:
            raise PipelineDefinitionError(
                f"pipeline {self.name!r}: publish needs exactly one callback source to write to; "
                f"it reads callbacks {[c.name for c in callbacks]} (pass source=...)")
        return chosen[0].publish(spark, self.layout(warehouse), records, dedupe_id=dedupe_id)


def hook_key(hook: Hooks) -> str:
    """Where a pipeline-wide hook's marker is stored: its ``marker_key``, else its class name."""
    return hook.marker_key or type(hook).__name__
