"""``stream_a.merge(stream_b)``: one stream holding the records of several sources.

A batch takes at most one planned slice of each source; its position is a mapping of source
name to that source's own position, so each source still replays exactly. Rows keep their
source's order, first source first, and carry the source's name in ``_source``.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    """Several sources read as one; ``name`` is theirs joined with ``+``, ``schema`` all their
    declared fields, keyed by their key when they share one (else by none: a keyed operator
    after the merge names its key columns)."""

    sources: tuple[Source, ...]
    name: str = field(init=False)
    schema: RecordSchema = field(init=False)

    def __post_init__(self) -> None:
        names = [part.name for part in self.parts]
        if len(set(names)) != len(names):
            raise PipelineDefinitionError(f"merged sources need distinct names, got {names}; "
                                          "pass name=... to the readers")
        # frozen: the derived fields are set once, here
        object.__setattr__(self, "name", "+".join(names))
        object.__setattr__(self, "schema", _merged_schema(self.parts))

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
        good, rejected = {}, []
        for part in self.parts:
            begin, finish = start.get(part.name), end.get(part.name)
            if finish is None or begin == finish:
                continue
            sliced = part.read(ctx, begin, finish)
            good[part.name] = sliced.good
            rejected.append(sliced.rejected)
        return Slice(good=self.combined(good),
                     rejected=pd.concat(rejected, ignore_index=True) if rejected
                     else Slice.no_rejects())

    def combined(self, frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
        """One batch's rows from its parts' rows (part name -> frame, in the parts' order),
        each row with its part's name in ``_source``, and every part's declared columns
        whichever parts the batch holds rows of (see :meth:`RecordSchema.with_fields`)."""
        # a part with no rows adds nothing but columns, which with_fields gives anyway (and
        # pandas would let its empty columns decide the others' dtypes)
        tagged = [frame.assign(**{SOURCE_COLUMN: name}) for name, frame in frames.items() if len(frame)]
        frame = _concat(tagged) if tagged else self.schema.frame([], [])
        return self.schema.with_fields(_with_source(frame))

    @property
    def lag_needs_spark(self) -> bool:
        return any(part.lag_needs_spark for part in self.parts)

    def lag(self, ctx: RunContext, after: Any) -> int:
        after = after or {}
        return sum(part.lag(ctx, after.get(part.name)) for part in self.parts)

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        tokens = {part.name: part.probe(layout, spark) for part in self.parts}
        if all(token is None for token in tokens.values()):
            return None
        return ";".join(f"{name}={token}" for name, token in tokens.items())


def _merged_schema(parts: tuple[Source, ...]) -> RecordSchema:
    """Every part's declared fields (a field two parts declare as different types is refused),
    keyed by the parts' key when they all have the same one."""
    fields: dict[str, str] = {}
    for part in parts:
        for name, kind in part.schema.fields.items():
            if fields.setdefault(name, kind) != kind:
                raise PipelineDefinitionError(
                    f"merged sources declare field {name!r} as {fields[name]} and as {kind} "
                    f"({part.name}); rename it in one of them")
    keys = {part.schema.key_fields for part in parts}
    key = next(iter(keys)) if len(keys) == 1 else ()
    return RecordSchema(fields, key or None)


def _with_source(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``_source`` column (an empty one when it has no rows)."""
    if SOURCE_COLUMN in frame.columns:
        return frame
    return frame.assign(**{SOURCE_COLUMN: pd.Series(dtype=object, index=frame.index)})


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' rows, one after the other. A column some parts lack would be filled with NaN,
    turning its integers into floats (``7`` into ``7.0``, and keys that no longer match), so
    such integer and boolean columns become their nullable kinds first."""
    if len(frames) == 1:
        return frames[0]
    everywhere = set.intersection(*(set(frame.columns) for frame in frames))
    nullable = {"int64": "Int64", "int32": "Int64", "bool": "boolean"}
    return pd.concat([frame.astype({c: nullable[str(frame[c].dtype)] for c in frame.columns
                                    if c not in everywhere and str(frame[c].dtype) in nullable})
                      for frame in frames], ignore_index=True)
