"""``stream_a.merge(stream_b)``: one stream holding the records of several sources.

A batch takes at most one planned slice of each source; its position is a mapping of source
name to that source's own position, so each source still replays exactly. Rows keep their
source's order, first source first, and carry the source's name in ``_source``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from state import PipelineLayout

from ..columns import SOURCE_COLUMN
from ..context import RunContext
from ..errors import PipelineDefinitionError
from .base import Slice, Source
from .records import RecordSchema


@dataclass(frozen=True)
class MergedSource(Source):
    """Several sources read as one; ``name`` is theirs joined with ``+``, ``schema`` the first's
    (they share their key)."""

    sources: tuple[Source, ...]
    name: str = field(init=False)
    schema: RecordSchema = field(init=False)

    def __post_init__(self) -> None:
        names = [part.name for part in self.parts]
        if len(set(names)) != len(names):
            raise PipelineDefinitionError(f"merged sources need distinct names, got {names}; "
                                          "pass name=... to the readers")
        keys = {part.schema.key_fields for part in self.parts}
        if len(keys) > 1:
            raise PipelineDefinitionError(f"merged sources must share their key, got {sorted(keys)}")
        # frozen: the derived fields are set once, here
        object.__setattr__(self, "name", "+".join(names))
        object.__setattr__(self, "schema", self.sources[0].schema)

    @property
    def parts(self) -> tuple[Source, ...]:
        return self.sources

    def columns(self) -> tuple[str, ...] | None:
        return None  # each part has its own

    def tables(self, layout: PipelineLayout) -> list[str]:
        return [path for part in self.parts for path in part.tables(layout)]

    def setup(self, ctx: RunContext) -> None:
        for part in self.parts:
            part.setup(ctx)

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        after = after or {}
        planned = {part.name: part.plan(ctx, after.get(part.name), limit) for part in self.parts}
        slices, position = [], dict(after)
        for index in range(max((len(s) for s in planned.values()), default=0)):
            start = dict(position)
            for name, parts in planned.items():
                if index < len(parts):  # a source without a slice this batch keeps its place
                    start[name], position[name] = parts[index]
            slices.append((start, dict(position)))
        return slices

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        good, rejected = [], []
        for part in self.parts:
            begin, finish = start.get(part.name), end.get(part.name)
            if finish is None or begin == finish:
                continue
            sliced = part.read(ctx, begin, finish)
            good.append(sliced.good.assign(**{SOURCE_COLUMN: part.name}))
            rejected.append(sliced.rejected)
        return Slice(good=pd.concat(good, ignore_index=True) if good else pd.DataFrame(),
                     rejected=pd.concat(rejected, ignore_index=True) if rejected
                     else Slice.no_rejects())

    def lag(self, ctx: RunContext, after: Any) -> int:
        after = after or {}
        return sum(part.lag(ctx, after.get(part.name)) for part in self.parts)

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        tokens = {part.name: part.probe(layout, spark) for part in self.parts}
        if all(token is None for token in tokens.values()):
            return None
        return ";".join(f"{name}={token}" for name, token in tokens.items())
