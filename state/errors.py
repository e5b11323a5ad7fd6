"""Exceptions of the state engine. ``StreamError`` is the root of every error this project raises."""


class StreamError(Exception):
    """Root of all lakestream errors."""


class StateError(StreamError):
    """State could not be read or written."""


class EncodingError(StateError):
    """A state value or tracked variable could not be encoded; names the operator and key."""


class StorageError(StateError):
    """The object store holding a table refused a request or could not be reached; names the
    bucket, the path and what was being done. Nothing of the commit being made is in force."""


class CheckpointConflict(StateError):
    """Another run committed the same checkpoint first: this run stops, nothing of it is committed."""


class CorruptStateError(StateError):
    """Stored state does not match what the protocol guarantees; names the table and what is wrong."""


class ConfigError(StreamError):
    """A setting is missing or invalid; the message names it and the accepted values."""


class PipelineChangedError(ConfigError):
    """The pipeline's stateful operators no longer mean what its latest checkpoint recorded of
    its state (renamed, removed, re-keyed, other values); lists each difference and the ways
    forward. Nothing ran."""


class MigrationError(StateError):
    """A state migration cannot be applied as asked; names the operator (and key) and why.
    Nothing was written: the checkpoint before it stays in force."""
