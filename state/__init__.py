"""The state engine: managed operator state, checkpoints and batch plans, all in Delta tables.

Nothing here imports Dagster or the pipeline API; ``ops`` builds on it.
"""

from . import delta_io, tables
from .checkpoint import (
    CHECKPOINT_OPERATOR,
    STATE_SCHEMA,
    ChangedState,
    Checkpoint,
    CheckpointLog,
    SparkStateRows,
    StateCommit,
    StateRows,
    WrittenState,
    checkpointed_offsets,
    new_checkpoint,
    next_checkpoint_id,
    takes_state_files,
    wake_time,
    widen_state_table,
    write_state_files,
    write_typed_state_files,
)
from .codecs import JsonCodec, PickleCodec, codec_named, decode_key, encode_key
from .conversion import Conversion
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
from .global_tables import GlobalTable, global_table
from .hooks import HookContext, Hooks
from .keygroups import DEFAULT_KEY_GROUPS, check_key_groups, key_group, key_group_column, key_groups
from .layout import PipelineLayout, check_name, default_warehouses, resolve_warehouse, warehouse_from_env
from .migration import Migrated, StateEdit, migrate_state
from .plans import BatchPlan, BatchPlans
from .queries import changed_keys, compact, read_state
from .rollback import discard_plans, reset_checkpoint
from .sessions import LazySparkSession, spark_started, start_in_background
from .store import OperatorState, StateStore, stored_values
from .timers import EVENT, PROCESSING, WATERMARK, Timers, expiry_state, timer_state
from .tracking import Tracked, restore_all, save_all, track
from .types import StateType, StateTypes
from .types import declared as declared_state_type
from .types import infer as infer_state_type
from .warmup import TransactionWarmer, warming

__all__ = [
    "CHECKPOINT_OPERATOR", "DEFAULT_KEY_GROUPS", "STATE_SCHEMA", "check_key_groups", "key_group",
    "key_groups", "key_group_column", "BatchPlan", "BatchPlans", "Checkpoint",
    "CheckpointConflict", "CheckpointLog", "checkpointed_offsets", "ConfigError", "CorruptStateError",
    "EncodingError", "GlobalTable", "Migrated", "MigrationError", "PipelineChangedError",
    "StateEdit", "migrate_state",
    "HookContext", "Hooks", "JsonCodec", "OperatorState", "PickleCodec", "PipelineLayout",
    "StateError", "StateStore", "StorageError", "StreamError", "Tracked", "TransactionWarmer",
    "changed_keys", "check_name",
    "EVENT", "PROCESSING", "WATERMARK", "Timers", "expiry_state", "timer_state",
    "codec_named", "compact", "decode_key", "discard_plans", "encode_key", "fault_point",
    "global_table", "new_checkpoint", "read_state", "reset_checkpoint", "resolve_warehouse",
    "default_warehouses", "warehouse_from_env", "restore_all", "save_all", "stored_values", "tables",
    "delta_io", "track", "wake_time", "warming",
    "ChangedState", "SparkStateRows", "StateCommit", "StateRows", "WrittenState", "next_checkpoint_id",
    "takes_state_files", "widen_state_table", "write_state_files", "write_typed_state_files",
    "StateType", "StateTypes",
    "declared_state_type", "infer_state_type", "Conversion",
    "LazySparkSession", "spark_started", "start_in_background",
]
