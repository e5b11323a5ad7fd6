"""Sources: the :class:`Source` interface and the sources lakestream ships (one module each)."""

from .base import REJECTED_COLUMNS, FrameSlice, Slice, Source
from .callback import INBOX_SCHEMA, CallbackSource, PublishReport
from .delta import DeltaTableSource
from .files import FileSource
from .kafka import KafkaSource, kafka_schema
from .merged import MergedSource
from .records import RecordSchema

__all__ = [
    "INBOX_SCHEMA", "REJECTED_COLUMNS", "CallbackSource", "DeltaTableSource", "FileSource",
    "FrameSlice", "KafkaSource", "MergedSource", "PublishReport", "RecordSchema", "Slice", "Source",
    "kafka_schema",
]
