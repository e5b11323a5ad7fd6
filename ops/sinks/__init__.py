"""Sinks: the :class:`Sink` interface and the sinks lakestream ships."""

from .base import FileSink, FileTarget, Sink, StoredSink
from .console import ConsoleSink
from .delta import DeltaSink
from .kafka import KafkaSink
from .state_table import TableSink

__all__ = ["ConsoleSink", "DeltaSink", "FileSink", "FileTarget", "KafkaSink", "Sink", "StoredSink",
           "TableSink"]
