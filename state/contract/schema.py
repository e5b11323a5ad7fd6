"""The ``_state`` table's shape: its columns, its file layout, and the partition of the
checkpoint records. Every part of the state engine that writes or reads ``_state`` takes it
from here.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from .. import delta_io
from ..lake import tables

#: The ``operator`` of the rows holding :class:`~state.commit.record.Checkpoint` records
CHECKPOINT_OPERATOR = "__checkpoint__"


STATE_SCHEMA = StructType([
    StructField("operator", StringType(), False),
    StructField("key", StringType(), True),  # null on a typed state's rows (its k__ columns)
    StructField("value", StringType(), True),
    StructField("deleted", BooleanType(), False),
    StructField("checkpoint_id", LongType(), False),
    # null on checkpoint records, and on rows written before key groups existed (see compact)
    StructField("key_group", IntegerType(), True),
])


# File statistics only for checkpoint ids and key groups, which reads filter on. Min/max of the
# key and value strings skip nothing (a commit's keys are spread over the key space) and
# collecting them cost 0.75 s of a 1.2 s commit of 30k state rows.
STATE_TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": "checkpoint_id,key_group"}


#: A checkpoint's ``_state`` file, the driver's or a task's: rows in key-group order, 16,384 to
#: a row group, so a read of a few keys' groups skips the others' row groups by their
#: statistics, however many groups the checkpoint changed and whether or not a compaction ran
#: since (1M rows over 256 groups: 62 row groups; a read of 10 keys took 0.022 s, against 0.088
#: for one row group in a batch's order: bench/state_reads.py).
STATE_FILES = delta_io.FileLayout(sorted_by="key_group", row_group_rows=16_384)


#: How the first checkpoint creates ``_state``
NEW_STATE_TABLE = tables.new_table(STATE_SCHEMA, ("operator",), STATE_TABLE_PROPERTIES)


#: A ``_state`` data file's columns (``operator`` is the partition, in the folder and the log).
STATE_FILE_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("deleted", pa.bool_()),
                               ("checkpoint_id", pa.int64()), ("key_group", pa.int32())])


STATE_ARROW = pa.schema([("operator", pa.string()), *STATE_FILE_SCHEMA])  # STATE_SCHEMA's
