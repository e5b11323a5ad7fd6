"""Stream operators and the pipeline API (KX Stream Processor-shaped).

>>> import ops as sp
>>> def running_sum(op, md, data):
...     total = sp.get(op, md) + data["x"].cumsum()
...     sp.set(op, md, int(total.iloc[-1]))
...     return data.assign(total=total)
>>> pipeline = (sp.read.from_callback("publish", key="y", schema={"x": "long", "y": "long"})
...             .map(running_sum, state=0).write.to_console()).named("running_sum")
"""

from .api import Metadata, Op, get, set  # noqa: A004 - KX's names
from .errors import BadRecordError, ConfigError, OperatorError, PipelineDefinitionError
from .executor import BatchReport, RunReport, run_pipeline
from .pipeline import CheckpointPolicy, Pipeline, Stream, Writer
from .sinks import ConsoleSink, DeltaSink, Sink
from .sources import CallbackSource, PublishReport, Source, read
from .session import SparkConfig, spark_session

__all__ = [
    "BadRecordError", "BatchReport", "CallbackSource", "CheckpointPolicy", "ConfigError",
    "ConsoleSink", "DeltaSink", "Metadata", "Op", "OperatorError", "Pipeline",
    "PipelineDefinitionError", "PublishReport", "RunReport", "Sink", "Source", "SparkConfig",
    "Stream", "Writer", "get", "read", "run_pipeline", "set", "spark_session",
]
