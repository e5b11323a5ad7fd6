"""Errors raised by the pipeline API and the micro-batch executor.

Every one derives from :class:`state.StreamError`; ``ConfigError`` is the state engine's, re-exported
because settings are checked on both sides.
"""

from state import ConfigError, StreamError

__all__ = ["BadRecordError", "ConfigError", "OperatorError", "PipelineDefinitionError", "SqlError"]


class PipelineDefinitionError(StreamError):
    """A pipeline was built wrongly (missing source or sink, bad operator arguments)."""


class BadRecordError(StreamError):
    """A published record cannot be accepted; it goes to dead letters with this reason."""


class OperatorError(StreamError):
    """A user function raised; names the pipeline, operator, batch and key. Nothing was committed."""


class SqlError(StreamError):
    """A SQL statement uses something unsupported or malformed; the message quotes that part."""
