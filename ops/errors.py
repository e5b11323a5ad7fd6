"""Errors raised by the pipeline API and the micro-batch executor.

Every one derives from :class:`state.StreamError`; ``ConfigError`` is the state engine's, re-exported
because settings are checked on both sides.
"""

from state import ConfigError, StreamError

__all__ = ["BadRecordError", "ConfigError", "OperatorError", "PipelineDefinitionError", "SinkError",
           "SourceError", "SqlError", "StreamError"]


class PipelineDefinitionError(StreamError):
    """A pipeline was built wrongly (missing source or sink, bad operator arguments)."""


class BadRecordError(StreamError):
    """A published record cannot be accepted; it goes to dead letters with this reason."""


class OperatorError(StreamError):
    """A user function raised; names the pipeline, operator, batch and key. Nothing was committed."""


class SqlError(StreamError):
    """A SQL statement uses something unsupported or malformed; the message quotes that part."""


class SourceError(StreamError):
    """A source cannot be read now (unreachable, missing, or its records are gone); names the
    source, what is missing and what to do. Nothing of the batch is recorded or written."""


class SinkError(StreamError):
    """A sink cannot take a batch's output; names the sink and batch. The checkpoint is not
    taken, so the batch is written again by the next run."""
