"""Errors raised by the pipeline API and the micro-batch executor."""

from state.errors import StreamError


class ConfigError(StreamError):
    """A setting is missing or invalid; the message names it and the accepted values."""


class PipelineDefinitionError(StreamError):
    """A pipeline was built wrongly (missing source or sink, bad operator arguments)."""


class BadRecordError(StreamError):
    """A published record cannot be accepted; it goes to dead letters with this reason."""


class OperatorError(StreamError):
    """A user function raised; names the pipeline, operator, batch and key. Nothing was committed."""


class SqlError(StreamError):
    """A SQL statement uses something unsupported or malformed; the message quotes that part."""
