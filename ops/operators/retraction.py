"""A table's changes as signed rows, so an aggregation over a table can take rows back.

ksqlDB's ``CREATE TABLE … AS SELECT … FROM <table> GROUP BY …`` aggregates a table, not a
stream: when a row of the source table changes, its old values leave their group before its
new ones join theirs (a row may move from one group to another). Change rows (key columns,
new values, ``_change``, the old values as JSON in ``_old``: what ``as_table``, aggregations
and a state table's changelog carry) become, for each change, the old row with ``_sign`` -1
(unless it is an insert), then the new row with ``_sign`` +1 (unless it is a delete), both
with the change's position in the batch in ``_change_no``. A retracting aggregation folds
them: COUNT adds the signs, SUM the signed values; emitting per record, it makes an update
whose rows stay in one group one change, as ksqlDB does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import CHANGE_COLUMN, CHANGE_NO_COLUMN, OLD_COLUMN, SIGN_COLUMN
from ..context import BatchScope
from ..errors import OperatorError
from .base import Operator, StateDeclaration


@dataclass(frozen=True)
class ChangesAsRows(Operator):
    """Turns change rows into signed rows (see the module docstring); stateless.

    >>> changes = pd.DataFrame({"id": ["u1", "u1"], "region": ["east", "west"],
    ...                         "_change": ["insert", "update"],
    ...                         "_old": [None, '{"region": "east"}']})
    >>> out = ChangesAsRows("rows").apply(None, changes)
    >>> list(zip(out["id"], out["region"], out["_sign"]))
    [('u1', 'east', 1), ('u1', 'east', -1), ('u1', 'west', 1)]
    """

    name: str
    #: declared column types (column -> ``long``/``boolean``/…): a long or boolean column that
    #: a batch's nulls turned into doubles or objects (a Delta changelog read with pyarrow) is
    #: read as its nullable type again, so group keys and values keep their type (1, not 1.0:
    #: another state key)
    kinds: tuple[tuple[str, str], ...] = ()

    def declares(self) -> StateDeclaration:
        return StateDeclaration.stateless()

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        missing = [c for c in (CHANGE_COLUMN, OLD_COLUMN) if c not in frame.columns]
        if missing:
            where = scope.where(self.name) if scope is not None else self.name
            raise OperatorError(f"{where}: {missing} not in the data: aggregating a table needs "
                                "its change rows (a state table's changelog, or as_table)")
        rows = self._typed(frame.drop(columns=[c for c in frame.columns if c.startswith("_")]))
        rows = rows.reset_index(drop=True)
        position = np.arange(len(frame)) * 2
        had = frame[OLD_COLUMN].notna().to_numpy()
        old = rows[had].copy()
        decoded = [json.loads(text) for text in frame[OLD_COLUMN][had]]
        for column in old.columns:
            if decoded and column in decoded[0]:
                old[column] = _like(rows[column], [values.get(column) for values in decoded],
                                    old.index)
        new = rows[(frame[CHANGE_COLUMN] != "delete").to_numpy()]
        out = pd.concat([old.assign(**{SIGN_COLUMN: -1, "__at": position[had]}),
                         new.assign(**{SIGN_COLUMN: 1, "__at": position[new.index] + 1})])
        out[CHANGE_NO_COLUMN] = out["__at"] // 2  # an update's two rows share their change's
        return out.sort_values("__at", kind="stable").drop(columns=["__at"]).reset_index(drop=True)


    def _typed(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` with each declared long or boolean column in its nullable dtype (values
        that do not fit it, such as 1.5 in a long column, leave the column as it is)."""
        for column, kind in self.kinds:
            dtype = _NULLABLE.get(kind)
            if dtype is None or column not in rows.columns or rows[column].dtype == dtype:
                continue
            try:
                rows = rows.assign(**{column: rows[column].astype(dtype)})
            except (TypeError, ValueError):
                pass  # not the declared type after all: the values decide, as before
        return rows


#: The nullable dtypes of the declared kinds whose nulls pandas would otherwise make doubles
#: or objects.
_NULLABLE = {"long": "Int64", "boolean": "boolean"}


def _like(column: pd.Series, values: list, index: pd.Index) -> pd.Series:
    """Old values decoded from JSON, in ``column``'s dtype where they fit it (timestamps were
    written as text)."""
    decoded = pd.Series(values, index=index, dtype=object)
    try:
        if pd.api.types.is_datetime64_any_dtype(column.dtype):
            return pd.to_datetime(decoded, utc=True).astype(column.dtype)
        return decoded.astype(column.dtype) if column.dtype != object else decoded
    except (TypeError, ValueError):
        return decoded
