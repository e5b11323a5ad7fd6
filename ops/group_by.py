"""``stream.group_by(...)[.window(...)].agg(...)``: the pipeline builder's aggregation steps, which
wait for their aggregates and then add the aggregating operator to the stream (definition
only, checked at once, as in :mod:`ops.pipeline`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from .errors import PipelineDefinitionError
from .operators import (
    Agg,
    ChangesAsRows,
    GroupAggregate,
    Session,
    SessionAggregate,
    TransformWithState,
    Window,
    WindowAggregate,
    last_watermark,
)

if TYPE_CHECKING:  # the stream holds its group_by's module, not the other way round
    from .pipeline import Stream


@dataclass(frozen=True)
class GroupedStream:
    """``stream.group_by(...)``: waiting for ``.agg(...)``."""

    stream: Stream
    keys: tuple[str, ...]

    def window(self, window: Window | Session) -> WindowedStream:
        """Aggregate per key and event-time window: ``sp.tumbling("ts", "1min")``,
        ``sp.hopping("ts", "10min", "5min", grace="30s")`` or ``sp.session("ts", "5min")``."""
        return WindowedStream(self.stream, self.keys, window)

    def agg(self, having: Callable[[pd.DataFrame], Any] | None = None, name: str | None = None,
            per_record: bool = False, **aggs: Agg) -> Stream:
        """The state table's change stream: ``agg(total=sp.sum_("x"), n=sp.count())``: one
        change per key a batch changed, or with ``per_record`` one per input row (ksqlDB's
        ``EMIT CHANGES`` without its record cache)."""
        return self.aggregate(aggs, having=having, name=name, per_record=per_record)

    def transform_with_state(self, processor: Any, output_schema: Any, output_mode: str = "append",
                             time_mode: str = "none", initial_state: Any = None,
                             event_time: str | None = None, *, form: str = "pandas",
                             name: str | None = None) -> Stream:
        """Run a Spark 4 ``StatefulProcessor`` per key of the grouping columns, unchanged:
        ``init(handle)`` declares its ``ValueState``, ``ListState`` and ``MapState`` (each with
        an optional ``ttlDurationMs``), ``handleInputRows(key, rows, timerValues)`` gets the key
        as a tuple and its rows (pandas frames; ``form="rows"``: pyspark ``Row`` s, as
        ``transformWithState``) and yields rows of ``output_schema`` (DDL or ``StructType``).
        Its state is checkpointed with each batch, exactly once. ``time_mode`` takes Spark's
        spellings too (``"ProcessingTime"``): ``"processing_time"`` and ``"event_time"`` (after
        ``stream.with_watermark(column, delay)``) give timers, in both modes. ``initial_state``
        (a DataFrame or records with the grouping columns) goes to ``handleInitialState`` in
        the pipeline's first batch, on the driver. ``event_time`` names the output's event time
        column, the event time of the stream after it (:mod:`ops.operators.spark_processor`).

        >>> import ops as sp
        >>> from pyspark.sql.streaming import StatefulProcessor
        >>> class Count(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.n = handle.getValueState("n", "n long")
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         total = (self.n.get()[0] if self.n.exists() else 0) + sum(map(len, rows))
        ...         self.n.update((total,))
        ...         yield pd.DataFrame({"k": [key[0]], "total": [total]})
        >>> stream = sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
        >>> stream.group_by("k").transform_with_state(Count(), "k string, total long").operators[-1].keys
        ('k',)
        """
        named = self.stream._name_for(name, type(processor).__name__)
        mark = last_watermark(self.stream.operators)
        op = TransformWithState.of(named, self.keys, processor, output_schema, output_mode,
                                   time_mode, form, initial_state,
                                   (mark.column, mark.delay_ms) if mark else None, event_time)
        out = self.stream.via(op)
        if event_time is None or mark is None:
            return out
        return out.with_watermark(event_time, mark.delay_ms)

    def transformWithStateInPandas(self, statefulProcessor: Any, outputStructType: Any,
                                   outputMode: str = "append", timeMode: str = "None",
                                   initialState: Any = None,
                                   eventTimeColumnName: str = "") -> Stream:
        """Spark's name and arguments for :meth:`transform_with_state` (pandas frames)."""
        return self.transform_with_state(statefulProcessor, outputStructType, outputMode, timeMode,
                                         initialState, eventTimeColumnName or None)

    def transformWithState(self, statefulProcessor: Any, outputStructType: Any,
                           outputMode: str = "append", timeMode: str = "None",
                           initialState: Any = None, eventTimeColumnName: str = "") -> Stream:
        """Spark's Row form: :meth:`transform_with_state` with ``form="rows"``."""
        return self.transform_with_state(statefulProcessor, outputStructType, outputMode, timeMode,
                                         initialState, eventTimeColumnName or None, form="rows")

    def aggregate(self, aggs: Mapping[str, Agg], *, having: Callable[[pd.DataFrame], Any] | None = None,
                  name: str | None = None, per_record: bool = False) -> Stream:
        """:meth:`agg` with the aggregates in a mapping, so an output may be called ``name``
        (what SQL's aliases need)."""
        _check_aggs(aggs)
        retracting = any(isinstance(op, ChangesAsRows) for op in self.stream.operators)
        op = GroupAggregate(name=self.stream._name_for(name, "aggregate"),
                            keys=self.keys, aggs=self.stream.typed(aggs), having=having,
                            retracting=retracting, per_record=per_record)
        return self.stream.via(op)


@dataclass(frozen=True)
class WindowedStream:
    """``stream.group_by(...).window(sp.tumbling(...))``: waiting for ``.agg(...)``."""

    stream: Stream
    keys: tuple[str, ...]
    window: Window | Session

    def agg(self, emit: str = "changes", name: str | None = None,
            having: Callable[[pd.DataFrame], Any] | None = None, per_record: bool = False,
            **aggs: Agg) -> Stream:
        """Aggregates per key and window; ``emit="final"`` emits each window once, closed;
        ``having`` hides windows that fail it; ``per_record`` emits a change per input row
        (``changes`` mode)."""
        return self.aggregate(aggs, emit=emit, name=name, having=having, per_record=per_record)

    def aggregate(self, aggs: Mapping[str, Agg], *, emit: str = "changes", name: str | None = None,
                  having: Callable[[pd.DataFrame], Any] | None = None,
                  per_record: bool = False, progress: str | None = None) -> Stream:
        """:meth:`agg` with the aggregates in a mapping (see :meth:`GroupedStream.aggregate`);
        ``progress``: a column whose largest value stream time reaches after each batch (see
        :class:`EventTimeAggregate`), for windows over a FINAL tumbling table's rows."""
        _check_aggs(aggs)
        kind = SessionAggregate if isinstance(self.window, Session) else WindowAggregate
        op = kind(name=self.stream._name_for(name, "window"), keys=self.keys,
                  window=self.window, aggs=self.stream.typed(aggs), emit=emit, having=having,
                  per_record=per_record, progress=progress)
        return self.stream.via(op)


def _check_aggs(aggs: Mapping[str, Any]) -> None:
    for out, agg in aggs.items():
        if not isinstance(agg, Agg):
            raise PipelineDefinitionError(
                f"agg {out}= needs an aggregate such as sp.count() or sp.sum_('x'), "
                f"not {type(agg).__name__}")
