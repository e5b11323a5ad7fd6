"""The targets a query manager serves: state tables, each under a name of its own, with the
pipeline that writes it. Subscriptions name their target; a push query's table becomes one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops import Pipeline, TableSink

from .errors import AnalyticsError, quoted


class Targets:
    """Target name -> (pipeline, state table name), in the order they were added."""

    def __init__(self, targets: Mapping[str, tuple[Pipeline, str]]):
        self._tables = dict(targets)

    def names(self) -> list[str]:
        return list(self._tables)

    def check(self, target: Any) -> None:
        """An ``AnalyticsError`` unless ``target`` names a target."""
        if not isinstance(target, str) or target not in self._tables:
            raise AnalyticsError(f"no target pipeline {quoted(target)}; known: {sorted(self._tables)}")

    def reading(self, pipeline: Pipeline, table: str) -> str | None:
        """The target that is ``pipeline``'s state table ``table`` (``None``: none is)."""
        return next((name for name, (known, kept) in self._tables.items()
                     if known.name == pipeline.name and kept == table), None)

    def add(self, name: str, pipeline: Pipeline, table: str) -> None:
        self._tables[name] = (pipeline, table)

    def sink(self, target: str) -> TableSink:
        """The sink of ``target``'s state table (its keys, its changelog)."""
        pipeline, table = self._tables[target]
        sink = pipeline.sink(table)
        if not isinstance(sink, TableSink):
            raise AnalyticsError(f"target {target!r}: {table!r} is not a state table")
        return sink

    def changelog(self, target: str, warehouse: str | None) -> str:
        """Where ``target``'s changelog is, under ``warehouse``."""
        pipeline, _ = self._tables[target]
        return self.sink(target).changelog(pipeline.layout(warehouse))
