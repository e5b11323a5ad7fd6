"""What offline tools edit: a pipeline's stored state migrated (renamed, dropped, re-keyed,
transformed, re-encoded), reset to an older checkpoint, or compacted. Only the operations
layer (``ops.operating``) and recovery use it; a run never does."""

from ..commit.global_tables import CHECKPOINT_COLUMN, RUN_COLUMN
from ..contract.codecs import encode_value
from ..contract.types import key_columns, value_columns
from ..read.latest import latest_per_key
from ..read.queries import changelog_as_of
from .compaction import ROWS_PER_FILE, compact
from .conversion import Conversion
from .migration import Migrated, StateEdit, dropped, migrate_state
from .rollback import discard_plans, reset_checkpoint

__all__ = [
    "Conversion", "Migrated", "StateEdit", "compact", "discard_plans", "dropped", "migrate_state",
    "reset_checkpoint", "ROWS_PER_FILE",
    # the vocabulary of a state's export and import (ops.operating.state_io)
    "CHECKPOINT_COLUMN", "RUN_COLUMN", "changelog_as_of", "encode_value", "key_columns",
    "latest_per_key", "value_columns",
]
