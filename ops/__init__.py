"""Stream operators and the pipeline API (KX Stream Processor-shaped).

>>> import ops as sp
>>> def running_sum(op, md, data):
...     total = sp.get(op, md) + data["x"].cumsum()
...     sp.set(op, md, int(total.iloc[-1]))
...     return data.assign(total=total)
>>> pipeline = (sp.read.from_callback("publish", key="y", schema={"x": "long", "y": "long"})
...             .map(running_sum, state=0).write.to_console()).named("running_sum")
"""

from state import (CheckpointConflict, EncodingError, GlobalTable, HookContext, Hooks,
                   StreamError, Tracked, global_table, track)

from .aggregates import (Agg, aggregate, avg, collect_list, count, latest_by_offset, max_, min_,
                         sum_)
from .api import Metadata, Op, get, set  # noqa: A004 - KX's names
from .errors import (BadRecordError, ConfigError, OperatorError, PipelineDefinitionError,
                     SqlError)
from .executor import BatchReport, RunReport, run_pipeline
from .operators import BatchScope, Operator
from .pipeline import CheckpointPolicy, Pipeline, Stream, Writer
from .sinks import ConsoleSink, DeltaSink, Sink
from .file_source import FileSource
from .operations import (DEFAULT_RETENTION_HOURS, PipelineStatus, checkpoint_problems,
                         describe, describe_lag, global_table_problems, recover, replay, reset_to_checkpoint,
                         source_lag, vacuum)
from .sources import CallbackSource, DeltaTableSource, PublishReport, Source, read
from .session import CONNECT_UNSUPPORTED, SparkConfig, spark_session
from .sql import register, sql
from .state_access import changed_keys, compact, read_state
from .joins import TableJoin, TableTableJoin
from .merge import MergedSource
from .state_tables import GroupAggregate, GroupedStream, LatestByKey, TableSink, WindowedStream
from .windows import Session, SessionAggregate, Window, WindowAggregate, hopping, session, tumbling

__all__ = [
    "Agg", "GroupAggregate", "GroupedStream", "SqlError", "TableSink", "aggregate", "avg",
    "collect_list", "count", "latest_by_offset", "max_", "min_", "register", "sql", "sum_",
    "LatestByKey", "MergedSource", "TableJoin", "TableTableJoin", "Session", "SessionAggregate", "Window", "WindowAggregate", "WindowedStream", "hopping",
    "session", "tumbling",
    "DEFAULT_RETENTION_HOURS", "DeltaTableSource", "FileSource", "PipelineStatus", "describe",
    "checkpoint_problems", "describe_lag", "global_table_problems", "recover", "replay", "reset_to_checkpoint",
    "source_lag", "vacuum",
    "BadRecordError", "BatchReport", "BatchScope", "Operator", "CallbackSource", "CheckpointConflict", "CheckpointPolicy",
    "CONNECT_UNSUPPORTED", "ConfigError", "EncodingError", "StreamError",
    "ConsoleSink", "DeltaSink", "GlobalTable", "HookContext", "Hooks", "Metadata", "Op",
    "OperatorError", "Pipeline", "PipelineDefinitionError", "PublishReport", "RunReport", "Sink",
    "Source", "SparkConfig", "Stream", "Tracked", "Writer", "changed_keys", "compact", "get",
    "global_table", "read", "read_state", "run_pipeline", "set", "spark_session", "track",
]
