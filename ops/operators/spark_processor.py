"""``stream.group_by(...).transform_with_state(processor, ...)``: a Spark 4 ``StatefulProcessor``
run unchanged, as Spark's ``transformWithStateInPandas`` (pandas frames) or
``transformWithState`` (``Row`` s) run it.

Per batch, as each Spark task does: a copy of the processor (Spark ships it to each task, so
what ``handleInputRows`` keeps on ``self`` lasts one batch), ``init(handle)``, then for each
key of the batch, in the order the batch first meets them, ``handleInputRows(key, rows,
timerValues)`` with the key as a tuple and its rows in one chunk, then ``close()``. The handle's
variables (:mod:`.processor_handle`) are the key's record in this operator's managed state, so
they are checkpointed with the batch's output in one commit and restored after any failure,
like every state here.

An initial state (a frame or records with the grouping columns) is handed to
``handleInitialState`` per key in the pipeline's first batch, before its input, as Spark does
in a query's first batch; on executors its rows join that batch's input, each routed to its
key's task (:meth:`TransformWithState.added_rows`).

What is stored: each variable as a state of its own, ``<operator>.<variable>``, of a row per
value, list element or map entry (:mod:`.processor_handle`), its value in columns typed from the
variable's schema (:func:`.processor_schema.variable_columns`), so an append or an entry's
update writes that element or entry alone, in the same checkpoint commit. Timers are kept in
the key's record (any number per key) and its earliest in the run's timer queue
(``<op>__timers``, as a map's), which the runtime reads to run a batch with no input when one
falls due; after the batch's rows, each timer before the batch's time calls
``handleExpiredTimer``. The batch's time is its processing time, or in ``event_time`` mode the
watermark it starts with: the largest event time (of the column a ``with_watermark`` upstream
names) of the batches before, less the delay; rows at or below it are dropped as late before
any call, as Spark drops them. A variable's TTL (processing time) stamps each value with its
expiry (:mod:`.processor_handle`); a key's earliest expiry is in the timer queue too, so a key
nobody writes again is cleaned when it passes. ``deleteIfExists`` in ``init`` drops the
variable from every key (which reads the operator's whole state: on the driver only).

As Spark's driver does when it plans the query, :meth:`TransformWithState.of` calls the
processor's ``init`` once on a copy, with a handle that only records what it declares: a TTL
Spark refuses is refused when the pipeline is defined, and a ``deleteIfExists`` is known then.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from state import EntryColumns, EntryState, codec_named

from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import to_python
from .base import ADDED_ROW, Operator, StateDeclaration, TimerDeclaration
from .processor_handle import ProcessorHandle
from .processor_schema import check_columns, conformed, entry_column, output_fields, variable_columns
from .timing import KeyClock, batch_now, timers_of, watermark_after

log = logging.getLogger(__name__)

_PICKLED = codec_named("pickle")

#: Spark's spellings of the time modes, and this API's
TIME_MODES = {"none": "none", "processingtime": "processing_time", "processing_time": "processing_time",
              "eventtime": "event_time", "event_time": "event_time"}


@dataclass(frozen=True)
class TransformWithState(Operator):
    """A ``StatefulProcessor`` per key of ``keys``, its output of ``fields`` (``form``: ``"pandas"``
    frames or ``"rows"``)."""

    name: str
    keys: tuple[str, ...]
    processor: StatefulProcessor
    fields: tuple[tuple[str, str], ...]
    form: str = "pandas"
    codec: str = "pickle"
    time_mode: str = "none"
    #: the initial state's rows (with the grouping columns), handed to ``handleInitialState``
    #: in the pipeline's first batch; ``None``: none
    initial: pd.DataFrame | None = field(default=None, compare=False, hash=False)
    #: the input's event time column and watermark delay (ms), from ``with_watermark``
    watermark: tuple[str, int] | None = None
    #: the output's event time column (Spark's ``eventTimeColumnName``), the event time of
    #: the stream after the operator
    event_time: str | None = None
    #: the variables ``init`` deletes from every key (``deleteIfExists``)
    deletes: tuple[str, ...] = ()
    #: the variables ``init`` declares: name, kind (``"value"``, ``"list"``, ``"map"``) and
    #: the columns of the state of its own its entries are kept in
    variables: tuple[tuple[str, str, EntryColumns], ...] = ()

    @property
    def driver_only(self) -> str | None:
        # an executor task sees only its keys' rows and state, and a sweep of every key needs
        # them all (a key with only a due timer, or only an initial state, is handed to its
        # task by the runtime)
        if self.deletes:
            return f"deletes state variables of every key (deleteIfExists{self.deletes})"
        return None

    @property
    def clock(self) -> TimerDeclaration | None:
        """Timers and TTL: each key's earliest deadline in the run's timer queue, so the
        runtime wakes a batch with no input when one falls due; in event time, with the
        watermark's column and delay."""
        if self.time_mode == "event_time":
            assert self.watermark is not None  # of() refuses event time without one
            return TimerDeclaration(self.name, *self.watermark)
        return TimerDeclaration(self.name) if self.time_mode == "processing_time" else None

    @classmethod
    def of(cls, name: str, keys: tuple[str, ...], processor: Any, output_schema: Any,
           output_mode: str, time_mode: str, form: str, initial_state: Any,
           watermark: tuple[str, int] | None = None,
           event_time: str | None = None) -> TransformWithState:
        """The operator, its arguments checked as Spark checks them."""
        where = f"transform_with_state {name!r}"
        if not isinstance(processor, StatefulProcessor):
            raise PipelineDefinitionError(f"{where}: the processor must be an instance of "
                                          "pyspark.sql.streaming.StatefulProcessor, got "
                                          f"{type(processor).__name__}")
        if str(output_mode).lower() not in ("append", "update"):
            raise PipelineDefinitionError(f"{where}: output_mode is 'append' or 'update' (as in "
                                          f"Spark), got {output_mode!r}")
        mode = TIME_MODES.get(str(time_mode).lower())
        if mode is None:
            raise PipelineDefinitionError(f"{where}: time_mode is one of 'none', "
                                          f"'processing_time', 'event_time', got {time_mode!r}")
        if (mode == "event_time" or event_time is not None) and watermark is None:
            raise PipelineDefinitionError(f"{where}: event time needs a watermark: call "
                                          ".with_watermark(column, delay) before group_by")
        fields = output_fields(output_schema)
        if event_time is not None and event_time not in dict(fields):
            raise PipelineDefinitionError(f"{where}: event_time {event_time!r} is not a column "
                                          f"of the output schema {[n for n, _ in fields]}")
        declared = _declared(where, processor, name, mode)
        return cls(name=name, keys=keys, processor=processor, fields=fields, form=form,
                   time_mode=mode, initial=_initial_rows(where, initial_state, keys),
                   watermark=watermark if mode == "event_time" else None, event_time=event_time,
                   deletes=tuple(declared.deleted), variables=tuple(
                       (variable, declared.kind_of(variable),
                        variable_columns(name, variable, declared.schemas[variable],
                                         declared.ttls[variable]))
                       for variable in declared.variables))

    def added_rows(self, batch_id: int) -> pd.DataFrame | None:
        """The initial state's rows in the pipeline's first batch (batches are numbered from 1;
        again on a replay of it: nothing of it was checkpointed then), so that on executors each
        key's reach its task as its input does."""
        if self.initial is None or batch_id != 1:
            return None
        records = [_PICKLED.encode(record) for record in self.initial.to_dict("records")]
        return self.initial[list(self.keys)].assign(**{ADDED_ROW: records})

    def declares(self) -> StateDeclaration:
        entries = tuple((self.variable_state(name), columns) for name, _, columns in self.variables)
        declared = replace(StateDeclaration.keyed(self.keys, self.name), entries=entries)
        # a variable init deletes is still this operator's state (it empties it): kept by name
        deleted = tuple(self.variable_state(name) for name in self.deletes)
        declared = replace(declared, names=declared.names + tuple(name for name, _ in entries) + deleted)
        if self.clock is None:
            return declared
        return replace(declared, names=declared.names + self.clock.names, clock=self.clock)

    def variable_state(self, variable: str) -> str:
        """The state name a list or map variable's entries are kept under."""
        return f"{self.name}.{variable}"

    def _entries_of(self, scope: BatchScope) -> Callable[[str], EntryState]:
        """A variable's entries in this batch's store, by the variable's name (one ``init``
        declares, or one it deletes)."""
        declared = {name: columns for name, _, columns in self.variables}

        def entries(variable: str) -> EntryState:
            columns = declared.get(variable) or EntryColumns(entry_column(self.name, variable))
            return scope.store.entries(self.variable_state(variable), columns)
        return entries

    def state_shape(self) -> dict[str, Any]:
        """The processor's class: a checkpoint of another processor's variables is refused.
        Its name only, not its module: a script run as ``__main__`` and the same file imported
        by Dagster's code location are one processor."""
        return {"processor": type(self.processor).__qualname__, "time_mode": self.time_mode}

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        missing = [key for key in self.keys if key not in frame.columns]
        if missing and not frame.empty:  # a batch with no input may come with no columns
            raise OperatorError(f"transform_with_state {self.name!r}: no column(s) {missing} to "
                                f"group by in the batch's rows {list(frame.columns)}")
        frame, starting = self._initial_state(scope, frame)
        clock = self.clock
        event = clock if clock is not None and clock.event_time is not None else None
        now = batch_now(clock, scope) if clock is not None else None  # what timers fire before
        processor = copy.deepcopy(self.processor)  # a task's own copy, as Spark ships it
        handle = ProcessorHandle(self.name, self.time_mode, now=scope.batch_time,
                                 entries=self._entries_of(scope))
        processor.init(handle)
        if handle.deleted:
            self._delete_everywhere(scope, handle.deleted)
        try:
            on_time = KeyClock(event, scope).on_time(frame) if event is not None else frame
            timer_values = _timer_values(self.time_mode, scope.batch_time, now)
            outputs = self._each_key(scope, processor, handle, on_time, starting, timer_values)
            if clock is not None:  # after the input, as Spark: a key's input may move them
                outputs += self._fire_timers(scope, processor, handle, now, timer_values)
        finally:
            processor.close()
        out = conformed(outputs, self.fields, f"transform_with_state {self.name!r}")
        if event is not None and self.name not in scope.watermarks:
            # on the driver: the watermark moves after the batch, from all its rows (on
            # executors the runtime measures it over the whole batch and keeps it)
            queue = timers_of(event, scope.store)
            queue.advance(watermark_after(event, frame, queue.watermark))
        return out

    def _delete_everywhere(self, scope: BatchScope, names: list[str]) -> None:
        """Drop variables ``names`` from every key (a key left with nothing goes)."""
        entries = self._entries_of(scope)
        for name in names:
            variable = entries(name)
            for key in variable.load_all():
                for entry in list(variable.entries(key)):
                    variable.remove(key, entry)
        state = scope.store.operator(self.name, None, self.codec)
        keys = state.held_keys()
        holding = [(key, record) for key, record in zip(keys, state.get_values(keys))
                   if record and any(name in record for name in names)]
        if not holding:
            return
        kept = [{name: value for name, value in record.items() if name not in names}
                for _, record in holding]
        state.delete_many([key for (key, _), left in zip(holding, kept) if not left])
        state.set_values([key for (key, _), left in zip(holding, kept) if left],
                         [left for left in kept if left])
        log.info("transform_with_state %r batch %d: deleteIfExists%s dropped from %d key(s)",
                 self.name, scope.batch_id, tuple(names), len(holding))

    def _initial_state(self, scope: BatchScope, frame: pd.DataFrame
                       ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """The batch's input and initial state: on executors, the initial state's rows the
        runtime added to the input (:meth:`added_rows`: its column is on every task's rows
        then, null on the input's); on the driver, the operator's own."""
        if ADDED_ROW in frame.columns:
            added = frame[ADDED_ROW].notna()
            initial = pd.DataFrame([_PICKLED.decode(text) for text in frame.loc[added, ADDED_ROW]],
                                   columns=self.initial.columns if self.initial is not None else None)
            return frame.loc[~added].drop(columns=ADDED_ROW), initial
        return frame, self.initial if scope.batch_id == 1 else None

    def _each_key(self, scope: BatchScope, processor: StatefulProcessor, handle: ProcessorHandle,
                  frame: pd.DataFrame, initial: pd.DataFrame | None,
                  timer_values: TimerValues) -> list[pd.DataFrame]:
        state = scope.store.operator(self.name, None, self.codec)
        keyed = _by_key(frame, self.keys)
        starting = _by_key(initial, self.keys) if initial is not None else {}
        grouping = list(dict.fromkeys([*starting, *keyed]))  # Spark: initial state first
        stored_keys = [self.state_key(values) for values in grouping]
        records = state.get_values(stored_keys)
        for variable in handle.variables:  # the batch's keys' entries, in one read each
            self._entries_of(scope)(variable).load(stored_keys)
        outputs: list[pd.DataFrame] = []
        for values, key, record in zip(grouping, stored_keys, records):
            handle.turn_to(record or {}, key)
            where = f"transform_with_state {self.name!r}, key {values!r}"
            handler = "handleInitialState"
            try:
                if values in starting:
                    self._start(processor, values, starting[values], timer_values)
                handler = "handleInputRows"
                if values in keyed:
                    outputs.extend(self._called(processor.handleInputRows(
                        values, self._input(keyed[values]), timer_values), where))
            except OperatorError:
                raise
            except Exception as error:  # the processor's own: named with its operator and key
                raise OperatorError(f"{where}: {handler} raised {type(error).__name__}: "
                                    f"{error}") from error
            if handle.has_ttl:
                handle.drop_expired()
            self._keep(scope, key, handle)
        return outputs

    def _fire_timers(self, scope: BatchScope, processor: StatefulProcessor,
                     handle: ProcessorHandle, now: int | None,
                     timer_values: TimerValues) -> list[pd.DataFrame]:
        """``handleExpiredTimer`` for each timer before the batch's time ``now``, earliest
        first, each removed before its call; a key's later timers fire in the same batch if due
        too. A key woken by a TTL's expiry loses its expired values."""
        assert self.clock is not None
        queue = timers_of(self.clock, scope.store)
        state = scope.store.operator(self.name, None, self.codec)
        outputs: list[pd.DataFrame] = []
        for key, _ in queue.due(now):
            values = key if isinstance(key, tuple) else (key,)
            where = f"transform_with_state {self.name!r}, key {values!r}"
            [record] = state.get_values([key])
            handle.turn_to(record or {}, key)
            for at in [at for at in handle.timers() if now is not None and at < now]:
                handle.deleteTimer(at)
                try:
                    outputs.extend(self._called(processor.handleExpiredTimer(
                        values, timer_values, ExpiredTimerInfo(at)), where))
                except OperatorError:
                    raise
                except Exception as error:  # the processor's own: named with operator and key
                    raise OperatorError(f"{where}: handleExpiredTimer({at}) raised "
                                        f"{type(error).__name__}: {error}") from error
            if handle.has_ttl:
                handle.drop_expired()
            self._keep(scope, key, handle)
        return outputs

    def _keep(self, scope: BatchScope, key: Any, handle: ProcessorHandle) -> None:
        """The key's record as the handle left it, and in the queue its earliest timer or TTL
        expiry (one ms early: the queue fires what is strictly before the batch's time, and a
        value expires in the batch at its expiry)."""
        if handle.changed:
            state = scope.store.operator(self.name, None, self.codec)
            if handle.record:
                state.set_values([key], [handle.record])
            else:
                state.delete_many([key])
        if self.clock is not None and (handle.changed or handle.entries_changed):
            queue = timers_of(self.clock, scope.store)
            expiry = handle.earliest_expiry() if handle.has_ttl else None
            deadlines = [*handle.timers()[:1], *([expiry - 1] if expiry is not None else [])]
            if deadlines:
                queue.set(key, min(deadlines))
            else:
                queue.clear(key)

    def _start(self, processor: StatefulProcessor, values: tuple, rows: pd.DataFrame,
               timer_values: TimerValues) -> None:
        """``handleInitialState`` for a key: its rows in one frame, or once per ``Row``."""
        for given in ([rows] if self.form == "pandas" else self._input(rows)):
            processor.handleInitialState(values, given, timer_values)

    def _input(self, rows: pd.DataFrame) -> Iterator[Any]:
        """A key's rows as Spark hands them: frames, or ``Row`` s."""
        if self.form == "pandas":
            return iter([rows])
        return (Row(**{name: to_python(value) for name, value in record.items()})
                for record in rows.to_dict("records"))

    def _called(self, produced: Any, where: str) -> list[pd.DataFrame]:
        """What a handler yielded, as frames (consumed now, while the handle is on its key)."""
        if produced is None:
            return []
        if self.form == "pandas":
            frames = list(produced)
            wrong = [type(part).__name__ for part in frames if not isinstance(part, pd.DataFrame)]
            if wrong:
                raise OperatorError(f"{where}: handleInputRows yields pandas DataFrames "
                                    f"(transformWithStateInPandas), got {wrong[0]}")
        else:
            rows = list(produced)
            if not all(isinstance(row, Row) for row in rows):
                raise OperatorError(f"{where}: handleInputRows yields pyspark Rows "
                                    "(transformWithState)")
            frames = [pd.DataFrame([row.asDict() for row in rows])] if rows else []
        for frame in frames:  # checked now, while the key is known
            check_columns(frame, self.fields, where)
        return frames



def _timer_values(time_mode: str, batch_time: int, now: int | None) -> TimerValues:
    """The batch's time as Spark gives it: its processing time with timers, and in event time
    the watermark it started with, ``now`` (0 before any event, as Spark's first)."""
    if time_mode == "none":
        return TimerValues()
    if time_mode == "processing_time":
        return TimerValues(currentProcessingTimeInMs=batch_time)
    return TimerValues(batch_time, now or 0)

def _by_key(frame: pd.DataFrame, keys: tuple[str, ...]) -> dict[tuple, pd.DataFrame]:
    """``frame``'s rows per key (a tuple of Python values), keys in the order first met, each
    key's rows in their order. One stable sort, then a slice per key: iterating a groupby
    takes rows per group (~0.2 ms a key; a slice ~0.02 ms)."""
    if frame.empty:
        return {}
    codes = frame.groupby(list(keys), sort=False, dropna=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    ordered = frame.take(order).reset_index(drop=True)
    ends = np.cumsum(np.bincount(codes))
    starts = ends - np.bincount(codes)
    firsts = ordered[list(keys)].iloc[starts].itertuples(index=False, name=None)
    return {tuple(to_python(value) for value in first): _numbered(ordered.iloc[start:end])
            for first, start, end in zip(firsts, starts.tolist(), ends.tolist())}


def _numbered(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` indexed from 0, as Spark's frames are (the slice keeps its data, not copied)."""
    rows.index = pd.RangeIndex(len(rows))
    return rows


def _declared(where: str, processor: StatefulProcessor, name: str, mode: str) -> ProcessorHandle:
    """The handle a copy of ``processor``'s ``init`` leaves: what it declares and deletes."""
    handle = ProcessorHandle(name, mode)
    try:
        copy.deepcopy(processor).init(handle)
    except OperatorError as error:  # a declaration the handle refuses: said at definition
        raise PipelineDefinitionError(str(error)) from None
    except Exception as error:
        raise PipelineDefinitionError(f"{where}: the processor's init(handle) raised "
                                      f"{type(error).__name__}: {error}") from error
    return handle


def _initial_rows(where: str, given: Any, keys: tuple[str, ...]) -> pd.DataFrame | None:
    """The initial state's rows: a pandas DataFrame or records holding the grouping columns."""
    if given is None:
        return None
    if isinstance(given, pd.DataFrame):
        rows = given.reset_index(drop=True)
    elif isinstance(given, (list, tuple)) and all(isinstance(row, dict) for row in given):
        rows = pd.DataFrame(list(given))
    else:
        raise PipelineDefinitionError(f"{where}: initial_state is a pandas DataFrame or a list of "
                                      f"records (dicts), got {type(given).__name__}")
    missing = [key for key in keys if key not in rows.columns]
    if missing:
        raise PipelineDefinitionError(f"{where}: the initial state lacks the grouping column(s) "
                                      f"{missing}; it has {list(rows.columns)}")
    return rows

