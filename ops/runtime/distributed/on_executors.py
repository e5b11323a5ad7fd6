"""The executors' side: a stage's operators over one bucket's rows, and what the task returns."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from state import (
    EntryColumns,
    StateStore,
    delta_io,
    encode_key,
    key_groups,
    value_json,
    write_state_files,
    write_typed_state_files,
)

from ...columns import BATCH_COLUMN, ORDER_COLUMN, ROW_COLUMN
from ...context import BatchScope
from ...errors import OperatorError
from ...operators import Operator
from ...operators.aggregates import to_python
from ...operators.event_time import (
    LATE_COUNT,
    NO_TIME,
    STREAM_TIME_COLUMN,
    EventTimeAggregate,
    running_max_before,
)
from ..failures import first_rows
from ..instants import Instants
from ..reports import distinct_keys
from .rows import Done, Failed, FileWritten, SinkWritten, results_frame, typed
from .tasks import BUCKET_COLUMN, KEY_COLUMN, PART_COLUMN, TaskSpec

_NEW_ROWS = 1 << 62     # ordinals of rows an operator made: after every source ordinal
_BUCKET_SPAN = 1 << 32  # positions per bucket among them
_CHUNK_ROWS = 100_000   # output rows per Arrow cell


def decode_cells(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for cell in batch.column(0).to_pylist():
            table = pa.ipc.open_stream(cell).read_all()
            columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
                       else pa.nulls(len(table), f.type) for f in schema]
            yield from pa.Table.from_arrays(columns, schema=schema).to_batches()


def with_buckets(chunks: Iterator[pd.DataFrame], task: TaskSpec) -> Iterator[pd.DataFrame]:
    """Rows tagged with their encoded key (as the stage's operator keys its state) and the
    bucket of its key group."""
    operator, keys, plain = task.stage.operators[0], task.stage.keys or (), plain_key(task)
    for chunk in chunks:
        if any(k not in chunk.columns for k in keys):  # the operator reports it, by name
            encoded = [encode_key(None)] * len(chunk)
        elif plain is not None and pd.api.types.is_integer_dtype(chunk[plain].dtype):
            encoded = chunk[plain].astype(str).tolist()  # an int's encoding is its digits
        else:
            encoded = [encode_key(operator.state_key(tuple(to_python(v) for v in row)))
                       for row in chunk[list(keys)].itertuples(index=False)]
        groups = key_groups(encoded, task.key_groups).astype("int64")
        yield chunk.assign(**{KEY_COLUMN: encoded, BUCKET_COLUMN: task.bucket(groups).astype("int32")})


def plain_key(task: TaskSpec) -> str | None:
    """The keyed stage's one key column when its operator keys state by the column's plain
    value (so an integer key's encoding is its digits); ``None`` otherwise."""
    operator, keys = task.stage.operators[0], task.stage.keys or ()
    return keys[0] if len(keys) == 1 and type(operator).state_key is Operator.state_key else None


def owned(chunks: Iterator[pd.DataFrame], task: TaskSpec) -> Iterator[pd.DataFrame]:
    """Stored state rows tagged with the bucket of the keys that own them."""
    for chunk in chunks:
        yield chunk.assign(**{BUCKET_COLUMN: task.owning_bucket(chunk["key"]).astype("int32")})


def latest_times(chunks: Iterator[pd.DataFrame], operator: EventTimeAggregate,
                 instants: Instants) -> Iterator[pd.DataFrame]:
    """Per chunk of a range partition: its number, its largest event time (of the instants
    the operator gets) and the stream time its progress column says was reached (``None``
    without one)."""
    for chunk in instants.each(chunks):
        if len(chunk):
            yield pd.DataFrame({"part": [int(chunk[PART_COLUMN].iloc[0])],
                                "latest": [int(operator.event_ms(chunk).max())],
                                "reached": pd.array([operator.progressed(chunk, None)],
                                                    dtype="Int64")})


def stamped(chunks: Iterator[pd.DataFrame], operator: EventTimeAggregate,
            starts: dict[int, int], instants: Instants) -> Iterator[pd.DataFrame]:
    """A range partition's rows (in input order), each with the stream time before it."""
    running: int | None = None
    for chunk in instants.each(chunks):
        if not len(chunk):
            continue
        if running is None:  # a partition's first chunk: what every earlier partition saw
            running = starts[int(chunk[PART_COLUMN].iloc[0])]
        before, after = running_max_before(operator.event_ms(chunk), running)
        running = NO_TIME if after is None else after
        yield chunk.drop(columns=[PART_COLUMN]).assign(**{STREAM_TIME_COLUMN: before})


def narrow_task(task: TaskSpec, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for chunk in chunks:
        yield _run(task, chunk, StateStore.of_rows(_no_state()), bucket=None)


def bucket_task(task: TaskSpec, bucket: tuple, rows: pd.DataFrame,
                 held: pd.DataFrame) -> pd.DataFrame:
    held = held[held["operator"] != ""]  # the marker that makes a whole-stream bucket run
    return _run(task, rows, StateStore.of_rows(held), bucket=int(bucket[0]))


def reading_task(task: TaskSpec, rows: pd.DataFrame) -> pd.DataFrame:
    """A bucket's rows through the stage's operators, their state read from ``_state``'s
    files of the bucket's key groups."""
    files = task.state_files
    assert files is not None
    bucket = int(rows[BUCKET_COLUMN].iloc[0])
    delta_io.adopt_storage_environment(files.storage)
    store = StateStore.of_files(files.path, files.as_of, task.key_groups, task.groups_of(bucket),
                                state_types=task.state_types)
    return _run(task, rows, store, bucket=bucket)


def _run(task: TaskSpec, rows: pd.DataFrame, store: StateStore, bucket: int | None) -> pd.DataFrame:
    """Run the stage's operators on one bucket's rows; its result rows (see STAGE_SCHEMA)."""
    rows = task.instants.restored(rows).sort_values(ORDER_COLUMN, kind="stable")
    frame = rows.drop(columns=[c for c in (ORDER_COLUMN, KEY_COLUMN, BUCKET_COLUMN) if c in rows])
    frame.index = pd.Index(rows[ORDER_COLUMN].to_numpy(), name=None)
    keys = distinct_keys(frame, task.stage.keys or task.stage.operators[0].declares().keys
                         if task.stage.operators else ())
    scope = BatchScope(task.pipeline, task.batch_id, task.key_fields, store, task.inputs,
                       stream_time=task.stream_time, watermarks=task.watermarks,
                       batch_time=task.batch_time, operators=task.operators)
    running: tuple[str, pd.DataFrame] | None = None  # the operator and the rows it was given
    try:
        for op in task.stage.operators:
            running = (op.name, frame)
            frame = op.apply(scope, frame)
        running = None
        out = _ordered(frame, rows[ORDER_COLUMN], bucket)
        changes = store.changes()
        changed = _changed_state(changes.rows, task, bucket)
        _check_typed_owned(changes.tables, task, bucket)
        if task.writes_state:
            changed = _written(changed, changes.tables, task)
        else:  # an entry state's rows go back through Spark, beside the others
            changed = _with_entry_rows(changed, changes.entries, task)
        if changes.typed and not task.writes_state:  # typed state goes only to tasks writing files
            raise RuntimeError(f"typed state {[t['operator'][0].as_py() for t in changes.typed]} "
                               "changed in a task that does not write _state's files")
        cells = _cells(out)
        if task.sink_files and not out.empty:
            cells = pd.concat([cells, _sink_written(out, task)], ignore_index=True)
    except Exception as exc:  # reported to the driver, which fails the batch with it
        failure = (Failed(_message(task, exc)) if running is None
                   else Failed(_message(task, exc), running[0], first_rows(running[1])))
        return typed(results_frame([failure]))
    done = Done(len(rows), len(out), keys, scope.counts.get(LATE_COUNT, 0),
                pa.Schema.from_pandas(out, preserve_index=False).serialize().to_pybytes()
                if len(out.columns) else None)
    return typed(pd.concat([cells, changed, results_frame([done])], ignore_index=True))


def _ordered(out: pd.DataFrame, ordinals: pd.Series, bucket: int | None) -> pd.DataFrame:
    """``out`` with ``__order``: its rows' source ordinals when it kept them (a map, a filter),
    else new ones after all source rows, by bucket and position."""
    out = out if out is not None else pd.DataFrame()
    if _kept_ordinals(out.index, ordinals):
        order = out.index.to_numpy(dtype="int64")
    else:
        base = _NEW_ROWS + (bucket or 0) * _BUCKET_SPAN
        order = np.arange(base, base + len(out), dtype="int64")
    out = out.reset_index(drop=True)  # a new frame: the operator's own is left as it was
    out[ORDER_COLUMN] = order
    return out


def _kept_ordinals(index: pd.Index, ordinals: pd.Series) -> bool:
    """Whether ``index`` is distinct source ordinals of ``ordinals``: every row
    (the common case, compared at once), or some of them, each once."""
    if not pd.api.types.is_integer_dtype(index.dtype):
        return False
    if not index.is_unique:  # a narrow stage's new rows, numbered chunk by chunk, may repeat
        return False
    if len(index) == len(ordinals) and np.array_equal(index.to_numpy(), ordinals.to_numpy()):
        return True
    return bool(index.isin(ordinals.to_numpy()).all())


def _changed_state(rows: pd.DataFrame, task: TaskSpec, bucket: int | None) -> pd.DataFrame:
    if rows.empty:
        return rows
    groups = key_groups(rows["key"], task.key_groups)
    if task.stage.keys and bucket is not None:
        elsewhere = task.owning_bucket(rows["key"], groups) != bucket
        if elsewhere.any():  # a key encoded unlike its rows: its state would be lost next batch
            raise RuntimeError(f"state keys {rows['key'][elsewhere].head(3).tolist()} do not "
                               f"belong to bucket {bucket}, whose rows changed them")
    return rows.assign(kind="state", key_group=groups)


def _check_typed_owned(typed: tuple[pa.Table, ...], task: TaskSpec, bucket: int | None) -> None:
    """Typed state changed by a bucket's rows must be of its key groups (each row carries the
    group of its key's text, as the rows' own were tagged): else it would be lost."""
    if bucket is None:
        return
    for rows in typed:
        groups = rows["key_group"].to_numpy().astype("int64")
        elsewhere = task.bucket(groups) != bucket
        if elsewhere.any():
            keys = rows.column(1).filter(pa.array(elsewhere)).slice(0, 3).to_pylist()
            raise RuntimeError(f"typed state keys {keys} do not belong to bucket {bucket}, whose "
                               "rows changed them")


def _with_entry_rows(changed: pd.DataFrame, entries: tuple[pa.Table, ...], task: TaskSpec
                     ) -> pd.DataFrame:
    """``changed`` and the stage's entry states' changed rows (a stage without an operator
    holding entries, or none at all, changes none)."""
    if not entries:
        return changed
    declared = {name: columns for op in task.stage.operators for name, columns in op.declares().entries}
    return pd.concat([changed, *(_entry_rows(rows, declared[rows["operator"][0].as_py()])
                                 for rows in entries)], ignore_index=True)


def _entry_rows(entries: pa.Table, columns: EntryColumns) -> pd.DataFrame:
    """An entry state's changed rows as result rows: its entry column as ``entry``, a typed
    value as the JSON of its fields in ``value`` (the driver puts both back in their columns:
    :meth:`~.output.StageOutput.changed_state`)."""
    return pd.DataFrame({"kind": "state", "operator": entries["operator"].to_pylist(),
                         "key": entries["key"].to_pylist(), "entry": entries[columns.entry].to_pylist(),
                         "value": value_json(entries, columns), "deleted": entries["deleted"].to_pylist(),
                         "key_group": entries["key_group"].to_pylist()})


def _written(changed: pd.DataFrame, typed: tuple[pa.Table, ...], task: TaskSpec) -> pd.DataFrame:
    """``changed`` state rows, and ``typed`` states' rows, written as ``_state`` files
    (uncommitted: see StateFiles), as result rows naming them."""
    files = task.state_files
    if files is None or files.checkpoint_id is None or (changed.empty and not typed):
        return changed.iloc[0:0]
    delta_io.adopt_storage_environment(files.storage)
    actions = write_state_files(files.path, changed, files.checkpoint_id) if len(changed) else []
    actions += write_typed_state_files(files.path, typed, files.checkpoint_id)
    return results_frame([FileWritten(action) for action in actions])


def _sink_written(out: pd.DataFrame, task: TaskSpec) -> pd.DataFrame:
    """``out`` written as a data file of each of ``task.sink_files``, as result rows naming
    them (a ``None`` action: the table does not take the rows as they are)."""
    rows = out.rename(columns={ORDER_COLUMN: ROW_COLUMN}).assign(**{BATCH_COLUMN: task.batch_id})
    return results_frame([SinkWritten(target.sink, target.write(rows))
                          for target in task.sink_files])


def _cells(out: pd.DataFrame) -> pd.DataFrame:
    payloads = []
    for start in range(0, len(out), _CHUNK_ROWS):
        table = pa.Table.from_pandas(out.iloc[start:start + _CHUNK_ROWS], preserve_index=False)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        payloads.append(sink.getvalue().to_pybytes())
    return pd.DataFrame({"kind": "rows", "payload": payloads})


def _no_state() -> pd.DataFrame:
    return pd.DataFrame({"operator": [], "key": [], "value": []})


def _message(task: TaskSpec, exc: BaseException) -> str:
    """The error as the driver reports it: what failed and where, then the Python traceback of
    the user's code (not the JVM's)."""
    where = f"pipeline {task.pipeline!r}, batch {task.batch_id}"
    text = str(exc) if isinstance(exc, OperatorError) else f"{where}: {type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc
    trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    return f"{text}\n\nTraceback on the Spark executor:\n{trace}"

