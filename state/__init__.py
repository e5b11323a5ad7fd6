"""The state engine: managed operator state, checkpoints and batch plans, all in Delta tables.

Nothing here imports Dagster or the pipeline API; ``ops`` builds on it.
"""

from . import tables
from .checkpoint import CHECKPOINT_OPERATOR, STATE_SCHEMA, Checkpoint, CheckpointLog, new_checkpoint
from .codecs import JsonCodec, PickleCodec, codec_named, decode_key, encode_key
from .errors import (CheckpointConflict, CorruptStateError, EncodingError, StateError,
                     StreamError)
from .faults import fault_point
from .layout import PipelineLayout, check_name, resolve_warehouse
from .plans import BatchPlan, BatchPlans
from .store import OperatorState, StateStore, decode_state, latest_values

__all__ = [
    "CHECKPOINT_OPERATOR", "STATE_SCHEMA", "BatchPlan", "BatchPlans", "Checkpoint",
    "CheckpointConflict", "CheckpointLog", "CorruptStateError", "EncodingError", "JsonCodec",
    "OperatorState", "PickleCodec", "PipelineLayout", "StateError", "StateStore", "StreamError",
    "check_name", "codec_named", "decode_key", "decode_state", "encode_key", "fault_point",
    "latest_values", "new_checkpoint", "resolve_warehouse", "tables",
]
