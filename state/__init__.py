"""The state engine: managed operator state, checkpoints and batch plans, all in Delta tables.

Nothing here imports Dagster or the pipeline API; ``ops`` builds on it. The engine's rooms:
:mod:`state.run` (what a run holds), :mod:`state.commit` (what a checkpoint commits),
:mod:`state.contract` (what the one hands the other, and the rows' vocabulary),
:mod:`state.read` (what is read back), :mod:`state.offline` (what offline tools edit) and
:mod:`state.lake` (the Delta plumbing). This door is what a pipeline's runtime uses; offline
tools come through :mod:`state.offline`, the plumbing through :mod:`state.lake`.
"""

from . import delta_io
from .commit.appends import takes_state_files, widen_state_table, write_state_files, write_typed_state_files
from .commit.global_tables import GlobalTable, global_table
from .commit.hooks import HookContext, Hooks
from .commit.log import CheckpointLog, checkpointed_offsets, wake_time
from .commit.plans import BatchPlan, BatchPlans
from .commit.record import Checkpoint, new_checkpoint, next_checkpoint_id
from .contract.changes import ChangedState, SparkStateRows, StateRows, WrittenState
from .contract.codecs import codec_named, decode_key, encode_key
from .contract.entries import EntryColumns, value_columns_from_json, value_json
from .contract.keygroups import DEFAULT_KEY_GROUPS, check_key_groups, key_group, key_group_column, key_groups
from .contract.schema import CHECKPOINT_OPERATOR, STATE_SCHEMA
from .contract.types import StateType, StateTypes
from .contract.types import declared as declared_state_type
from .contract.types import infer as infer_state_type
from .errors import (
    CheckpointConflict,
    ConfigError,
    CorruptStateError,
    EncodingError,
    MigrationError,
    PipelineChangedError,
    StateError,
    StorageError,
    StreamError,
)
from .faults import fault_point
from .layout import PipelineLayout, check_name, default_warehouses, resolve_warehouse, warehouse_from_env
from .read.latest import latest_per_key, stored_values
from .read.queries import changed_keys, read_state
from .run.entries import EntryState, Expiring
from .run.store import OperatorState, StateStore
from .run.timers import WATERMARK, Timers, expiry_state, timer_state
from .run.tracking import Tracked, restore_all, save_all, track

__all__ = [
    # errors, and where a pipeline's tables live
    "CheckpointConflict", "ConfigError", "CorruptStateError", "EncodingError", "MigrationError",
    "PipelineChangedError", "StateError", "StorageError", "StreamError",
    "PipelineLayout", "check_name", "default_warehouses", "resolve_warehouse", "warehouse_from_env",
    # what a run holds
    "EntryState", "Expiring", "OperatorState", "StateStore", "StateType", "StateTypes", "declared_state_type",
    "infer_state_type",
    "Timers", "WATERMARK", "expiry_state", "timer_state",
    "Tracked", "restore_all", "save_all", "track", "fault_point",
    # what a checkpoint commits, and what a run hands it
    "Checkpoint", "CheckpointLog", "new_checkpoint", "next_checkpoint_id", "checkpointed_offsets",
    "wake_time", "BatchPlan", "BatchPlans", "GlobalTable", "global_table", "HookContext", "Hooks",
    "ChangedState", "SparkStateRows", "StateRows", "WrittenState", "EntryColumns",
    "value_columns_from_json", "value_json",
    # an executor's side of a checkpoint: the files it writes for the driver to commit
    "takes_state_files", "widen_state_table", "write_state_files", "write_typed_state_files",
    # the rows' vocabulary: keys, their groups, the table's schema
    "CHECKPOINT_OPERATOR", "STATE_SCHEMA", "DEFAULT_KEY_GROUPS", "check_key_groups", "codec_named",
    "decode_key", "encode_key", "key_group", "key_group_column", "key_groups",
    # read back
    "changed_keys", "latest_per_key", "read_state", "stored_values",
    "delta_io",
]
