"""Typed state (``state_type=``) in distributed mode: its tasks read it from ``_state``'s files
and write what they change as files of it, so the table must have the state's columns before
they run (added by the driver in commits that change no state) and must exist for a
pipeline's first batch.

The run settles which states are typed (declared or inferred, :mod:`ops.runtime.storage`);
a stage's are those of its operators' names.

>>> from ops.operators.basic import Map
>>> from state import StateTypes, declared_state_type
>>> typed_names(Stage((Map(len, "sum", state=0, keys=("k",)),), ("k",)),
...             StateTypes({"sum": declared_state_type(int)}))
{'sum': StateType(fields=(('', 'int64'),))}
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType, StringType

from state import ConfigError, PipelineLayout, StateType, StateTypes, widen_state_table

from .stages import Stage

_KEY_TYPES = {LongType: pa.int64(), IntegerType: pa.int64(), ShortType: pa.int64(),
              ByteType: pa.int64(), StringType: pa.string()}


def typed_names(stage: Stage, storage: StateTypes) -> dict[str, StateType]:
    """The typed states of ``stage``'s operators, by name, as the run's ``storage`` has them."""
    return {name: kind for name in stage.names if (kind := storage.of(name)) is not None}


def prepare_table(layout: PipelineLayout) -> None:
    """``_state`` made if missing, so a first batch's tasks can write its files."""
    if not widen_state_table(layout.state, []):
        raise ConfigError(f"{layout.state}: typed state (state_type=) in distributed mode needs a "
                          "_state table delta-rs writes (a local disk, S3, GCS or Azure): run in "
                          "driver mode")


def add_columns(layout: PipelineLayout, stage: Stage, rows: DataFrame, storage: StateTypes) -> None:
    """``stage``'s typed states' columns added to ``_state``: each key column typed as the
    stage's input key column is (an int or a string), each value column as ``storage`` types
    it."""
    typed = typed_names(stage, storage)
    if not typed:
        return
    keys = stage.keys or ()
    kind = type(rows.schema[keys[0]].dataType) if len(keys) == 1 and keys[0] in rows.columns else None
    if kind not in _KEY_TYPES:
        raise ConfigError(f"typed state {sorted(typed)} is keyed by {list(keys)}: typed state "
                          "keeps its keys in one column of ints or strings")
    fields = [field for name, state_type in typed.items()
              for field in state_type.columns(name, _KEY_TYPES[kind])]
    widen_state_table(layout.state, fields)
