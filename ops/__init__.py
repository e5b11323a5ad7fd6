"""lakestream's pipeline API, KX Stream Processor-shaped: ``import ops as sp``.

>>> import ops as sp
>>> def running_sum(op, md, data):
...     total = sp.get(op, md) + data["x"].cumsum()
...     sp.set(op, md, int(total.iloc[-1]))
...     return data.assign(total=total)
>>> pipeline = (sp.read.from_callback("publish", key="y", schema={"x": "long", "y": "long"})
...             .map(running_sum, state=0).write.to_console()).named("running_sum")
>>> [op.declares().kind.value for op in pipeline.stream.operators]
['keyed']

This module is the public door: the names below are the API; the subpackages (``sources``,
``operators``, ``sinks``, ``sql``, ``runtime``) hold the implementations and the interfaces to
extend (see ARCHITECTURE.md).
"""

from state import (
    CheckpointConflict,
    EncodingError,
    GlobalTable,
    HookContext,
    Hooks,
    MigrationError,
    PipelineChangedError,
    StreamError,
    Tracked,
    global_table,
    track,
)

from .api import Metadata, Op, clear_timer, get, remove, set, set_timer  # noqa: A004 - KX's names
from .columns import (
    BATCH_COLUMN,
    CHANGE_COLUMN,
    OLD_COLUMN,
    ROW_COLUMN,
    SOURCE_COLUMN,
    WATERMARK_COLUMN,
)
from .context import BatchScope, RunContext
from .errors import (
    BadRecordError,
    ConfigError,
    OperatorError,
    PipelineDefinitionError,
    SinkError,
    SourceError,
    SqlError,
)
from .group_by import GroupedStream, WindowedStream
from .kafka_client import RegistryUnavailable, SchemaRegistry
from .operating.inspection import (
    PipelineStatus,
    changed_keys,
    checkpoint_problems,
    describe,
    describe_lag,
    describe_lag_by_part,
    global_table_problems,
    read_state,
    source_lag,
)
from .operating.migrate import Migration, MigrationReport, migrate
from .operating.operations import (
    DEFAULT_RETENTION_HOURS,
    compact,
    discard_plans,
    recover,
    replay,
    reset_to_checkpoint,
    vacuum,
)
from .operating.state_io import bootstrap_state, export_state, import_state
from .operators import (
    Agg,
    GroupAggregate,
    JoinSide,
    KeptTableJoin,
    LatestByKey,
    Operator,
    Session,
    SessionAggregate,
    StateDeclaration,
    StateKind,
    StreamStreamJoin,
    TableJoin,
    TableOperator,
    TableTableJoin,
    Window,
    WindowAggregate,
    aggregate,
    avg,
    collect_list,
    collect_set,
    count,
    count_distinct,
    hopping,
    latest_by_offset,
    max_,
    max_by,
    min_,
    min_by,
    session,
    sum_,
    tumbling,
)
from .pipeline import CheckpointPolicy, Pipeline, Stream
from .readers import read
from .runtime import (
    BatchReport,
    CheckpointReport,
    MetricsEndpoint,
    RunMetrics,
    RunReport,
    StopSignal,
    Trigger,
    run_pipeline,
)
from .sinks import (
    ConsoleSink,
    DeltaSink,
    FileSink,
    FileTarget,
    KafkaSink,
    Sink,
    StoredSink,
    TableSink,
)
from .sources import (
    CallbackSource,
    DeltaTableSource,
    FileSource,
    KafkaSource,
    MergedSource,
    PublishReport,
    Source,
)
from .spark import CONNECT_UNSUPPORTED, SparkConfig, lazy_spark_session, spark_session
from .sql import Catalog, TableQuery, compile_query, declare, query, register, sql
from .writer import Writer

__all__ = [
    # the state API and pipeline builder
    "Metadata", "Op", "get", "set", "remove", "set_timer", "clear_timer", "read", "Stream", "GroupedStream",
    "WindowedStream", "Writer",
    "Pipeline", "CheckpointPolicy", "Tracked", "track", "Hooks", "HookContext", "GlobalTable",
    "global_table",
    # aggregates and windows
    "Agg", "aggregate", "avg", "collect_list", "collect_set", "count", "count_distinct",
    "latest_by_offset", "max_", "max_by", "min_", "min_by", "sum_",
    "Window", "Session", "hopping", "session", "tumbling",
    # SQL
    "Catalog", "TableQuery", "compile_query", "declare", "query", "register", "sql",
    # running and operating
    "run_pipeline", "BatchReport", "CheckpointReport", "RunReport", "StopSignal", "Trigger",
    "RunMetrics", "MetricsEndpoint",
    "recover", "replay", "reset_to_checkpoint", "Migration", "MigrationReport", "migrate",
    "bootstrap_state", "export_state", "import_state",
    "discard_plans", "compact", "vacuum", "DEFAULT_RETENTION_HOURS", "describe", "describe_lag",
    "describe_lag_by_part", "source_lag",
    "PipelineStatus", "read_state", "changed_keys", "checkpoint_problems", "global_table_problems",
    "spark_session", "lazy_spark_session", "SparkConfig", "CONNECT_UNSUPPORTED",
    # interfaces to extend, and the implementations shipped
    "Source", "CallbackSource", "DeltaTableSource", "FileSource", "KafkaSource", "MergedSource",
    "PublishReport",
    "Operator", "TableOperator", "StateDeclaration", "StateKind", "BatchScope", "RunContext",
    "GroupAggregate", "LatestByKey", "SessionAggregate", "TableJoin", "TableTableJoin", "WindowAggregate",
    "KeptTableJoin", "StreamStreamJoin", "JoinSide",
    "Sink", "StoredSink", "FileSink", "FileTarget", "ConsoleSink", "DeltaSink", "KafkaSink", "TableSink",
    # Kafka's schema registry formats
    "SchemaRegistry",
    # columns lakestream adds
    "BATCH_COLUMN", "ROW_COLUMN", "CHANGE_COLUMN", "OLD_COLUMN", "SOURCE_COLUMN", "WATERMARK_COLUMN",
    # errors
    "StreamError", "BadRecordError", "CheckpointConflict", "ConfigError", "EncodingError",
    "MigrationError", "PipelineChangedError",
    "OperatorError", "PipelineDefinitionError", "RegistryUnavailable", "SinkError", "SourceError",
    "SqlError",
]
