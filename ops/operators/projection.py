"""Projecting a table's changes: the SELECT list of a state table computed over its aggregates.

An aggregation emits change rows (key columns, the aggregates' new values, ``_change`` and the
old values as JSON in ``_old``). ``SELECT title, SUM(x) / COUNT(x) AS mean`` needs the table's
columns to be expressions over those values: this operator replaces the value columns by the
projected ones, in the new values and in the old ones alike, so the changelog stays a true
record of what the table showed. It keeps no state: the old values travel in the rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ..columns import CHANGE_COLUMN, OLD_COLUMN
from ..context import BatchScope
from ..errors import OperatorError
from .base import Operator, StateDeclaration


@dataclass(frozen=True)
class TableProjection(Operator):
    """Replaces the change rows' ``values`` columns by ``project(rows)`` (a frame of the output
    columns, one row per input row); ``keys`` are the table's key columns, which pass through.

    >>> from state import PipelineLayout, StateStore
    >>> mean = TableProjection("mean", keys=("k",), values=("total", "n"),
    ...                        project=lambda rows: pd.DataFrame({"mean": rows["total"] / rows["n"]}))
    >>> changes = pd.DataFrame({"k": ["a"], "total": [6], "n": [3], "_change": ["update"],
    ...                         "_old": ['{"total": 2, "n": 1}']})
    >>> out = mean.apply(None, changes)
    >>> out["mean"].tolist(), out["_old"].tolist()
    ([2.0], ['{"mean": 2.0}'])
    """

    name: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    project: Callable[[pd.DataFrame], pd.DataFrame]

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys

    def declares(self) -> StateDeclaration:
        return StateDeclaration.stateless()

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        kept = frame.drop(columns=[*self.values, CHANGE_COLUMN, OLD_COLUMN])
        new = self._projected(scope, frame)
        new[frame[CHANGE_COLUMN].to_numpy() == "delete"] = None  # a deleted key shows no values
        old = frame[OLD_COLUMN].map(lambda text: None if text is None else json.loads(text))
        shown = old.notna().to_numpy()
        old_json = pd.Series([None] * len(frame), index=frame.index, dtype=object)
        if shown.any():
            before = frame[shown].drop(columns=[*self.values, CHANGE_COLUMN, OLD_COLUMN])
            before = before.assign(**{column: pd.Series([row.get(column) for row in old[shown]],
                                                         index=before.index)
                                      for column in self.values})
            projected = self._projected(scope, before)
            old_json[shown] = [json.dumps(row, default=str)
                               for row in projected.astype(object).where(projected.notna(), None)
                               .to_dict("records")]
        out = pd.concat([kept, new.drop(columns=[c for c in new.columns if c in kept.columns])],
                        axis=1)
        out[CHANGE_COLUMN] = frame[CHANGE_COLUMN]
        out[OLD_COLUMN] = old_json
        return out

    def _projected(self, scope: BatchScope | None, rows: pd.DataFrame) -> pd.DataFrame:
        try:
            out = self.project(rows)
        except Exception as exc:
            where = scope.where(self.name) if scope is not None else self.name
            raise OperatorError(f"{where}: {type(exc).__name__}: {exc}") from exc
        out.index = rows.index
        return out
