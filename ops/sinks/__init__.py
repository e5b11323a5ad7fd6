"""Sinks: the :class:`Sink` interface and the sinks lakestream ships."""

from .base import FileTarget, Sink, StoredSink
from .console import ConsoleSink
from .delta import DeltaSink
from .kafka import KafkaSink
from .state_table import TableSink

__all__ = ["ConsoleSink", "DeltaSink", "FileTarget", "KafkaSink", "Sink", "StoredSink", "TableSink"]
