"""How a run stores each state: as JSON text or in typed columns, settled once per run before
its first batch from the pipeline and its latest checkpoint (:func:`state_types`).

A declared type (``state_type=``) is the pipeline's word: the state is stored so, and a
checkpoint that recorded another storage stops the run (:mod:`.meaning`, ``Remedy.STORAGE``).
An inferred type (a map's ``state=`` value, :meth:`~ops.operators.Operator.inferable_state_types`)
is only a default for new state, so that it never refuses nor changes a pipeline that runs:

- it applies to a name no checkpoint recorded yet; a recorded name of a map without a
  declaration keeps the storage recorded (text for a checkpoint written before checkpoints
  recorded it), never converted unasked, whatever its map now infers (a TTL added to a map
  whose state is stored typed keeps it typed);
- only where typed storage runs in either mode, so that switching modes never changes it: a
  key declared as one ``long`` or ``string`` field of the source (typed keys are one int or
  string column; an undeclared key's type is only seen in batch 1), no window, session or
  timers anywhere in the pipeline (distributed mode then passes state rows through Spark,
  where typed state is refused), a ``_state`` table delta-rs writes.

The type comes from ``state=``, not from the values a run sets: storage must be known before
the first checkpoint (distributed mode adds the columns before its first tasks run), and two
runs of one pipeline must not store differently because their first batches differed.

>>> import ops as sp
>>> stream = sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
>>> pipeline = stream.map(lambda op, md, data: data, state=0, name="total").write.to_delta("out")
>>> state_types(pipeline, "/tmp/w/p/_state", None).origin("total")
"state_type 'int64' inferred from state=0"
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from state import Checkpoint, StateType, StateTypes, delta_io

from ..operators import Operator
from .distributed.stages import stages_of, writes_state_files

if TYPE_CHECKING:
    from .protocol import RunnablePipeline

#: the source field types whose values typed storage keeps as keys (int64 and string columns)
_KEY_FIELD_TYPES = ("long", "string")


def state_types(pipeline: RunnablePipeline, state_path: str, last: Checkpoint | None) -> StateTypes:
    """The run's typed states: the declared ones, and the inferred ones that apply (see the
    module docstring) given ``last``, the latest checkpoint (``None``: none yet), and the
    ``_state`` table at ``state_path``."""
    operators = pipeline.stream.operators
    types = declared_state_types(operators)
    inferred: dict[str, str] = {}
    everywhere = _typed_everywhere(pipeline, state_path)
    for op in operators:
        for name, inference in op.inferable_state_types().items():
            kept = _recorded(last, name)
            chosen = kept[0] if kept is not None else (
                inference.kind if everywhere and _typed_keys(pipeline, op) else None)
            if chosen is not None:
                types[name], inferred[name] = chosen, inference.origin
    return StateTypes(types, inferred)


def declared_state_types(operators: Iterable[Operator]) -> dict[str, StateType]:
    """The state types the operators declare (``state_type=``), by state name."""
    return {name: kind for op in operators for name, kind in op.state_types().items()}


def _recorded(last: Checkpoint | None, name: str) -> tuple[StateType | None] | None:
    """The storage ``last`` recorded for ``name`` (in a 1-tuple: ``(None,)`` is text), or
    ``None`` when ``name`` is new to it. A checkpoint from before records said how state is
    stored holds text, if anything."""
    if last is None:
        return None
    if last.operators is None:
        return (None,)
    entry = last.operators.get(name)
    if entry is None:
        return None
    storage = entry.get("storage")
    return (None if storage is None else StateType.described(storage["type"]),)


def _typed_everywhere(pipeline: RunnablePipeline, state_path: str) -> bool:
    """Whether typed state of this pipeline runs in both modes: its stages let tasks write
    their state's files (no windows, sessions or timers) and delta-rs writes its ``_state``."""
    return writes_state_files(stages_of(pipeline.stream.operators)) and delta_io.serves(state_path)


def _typed_keys(pipeline: RunnablePipeline, op: Operator) -> bool:
    """Whether ``op`` keys its state by one field the source declares as ``long`` or ``string``."""
    keys = op.declares().keys
    return len(keys) == 1 and pipeline.source.schema.fields.get(keys[0]) in _KEY_FIELD_TYPES
