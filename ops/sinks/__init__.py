"""Sinks: the :class:`Sink` interface and the sinks lakestream ships."""

from .base import Sink, StoredSink
from .console import ConsoleSink
from .delta import DeltaSink
from .state_table import TableSink

__all__ = ["ConsoleSink", "DeltaSink", "Sink", "StoredSink", "TableSink"]
