"""``sp.read``: the source constructors, KX-style (``sp.read.from_callback(...)``), each returning
a :class:`~ops.pipeline.Stream` to build on."""

from __future__ import annotations

from collections.abc import Mapping

from .pipeline import Stream
from .sources import CallbackSource, DeltaTableSource, FileSource, RecordSchema


class Readers:
    """``sp.read``: the source constructors, KX-style (``sp.read.from_callback(...)``)."""

    @staticmethod
    def from_callback(name: str, key: str | tuple[str, ...] | None = None,
                      schema: Mapping[str, str] | None = None,
                      max_versions: int | None = None) -> Stream:
        """A stream of records published with ``pipeline.publish(...)``.

        ``key`` names the field (or fields) that key the stream; ``schema`` maps field names to
        ``long``/``double``/``string``/``boolean``/``timestamp`` and is checked on every record.
        """
        source = CallbackSource(name=name, schema=RecordSchema(dict(schema or {}), key),
                                max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_delta(path: str, key: str | tuple[str, ...] | None = None, *, name: str = "delta",
                   order_by: tuple[str, ...] = (), max_versions: int | None = None) -> Stream:
        """A stream of the rows appended to the Delta table at ``path`` (change data feed on)."""
        source = DeltaTableSource(name=name, path=path, schema=RecordSchema({}, key),
                                  order_by=tuple(order_by), max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_files(directory: str, format: str, key: str | tuple[str, ...] | None = None,  # noqa: A002
                   schema: Mapping[str, str] | None = None, *, name: str = "files",
                   max_files: int | None = None, options: Mapping[str, str] | None = None) -> Stream:
        """A stream of the records in files landing in ``directory`` (``json``, ``csv`` with a
        header row, or ``parquet``); each file is processed exactly once, oldest first.

        ``schema`` is required for JSON and CSV; records that do not match it, and records with
        a null key, go to dead letters with ``file:line`` as their position.
        """
        source = FileSource(name=name, directory=directory, format=format,
                            schema=RecordSchema(dict(schema or {}), key), max_files=max_files,
                            options=tuple(sorted((options or {}).items())))
        return Stream(source=source)


#: ``sp.read``
read = Readers()
