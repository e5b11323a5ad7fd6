"""``stream.as_table(*keys)``: a table from a stream of updates, one row per key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..columns import CHANGE_COLUMN, OLD_COLUMN
from ..context import BatchScope
from ..errors import OperatorError
from .aggregates import to_python
from .base import TableOperator
from .grouped import row_keys_of, without_nulls


@dataclass(frozen=True)
class LatestByKey(TableOperator):
    """A table from a stream of updates (ksqlDB's ``CREATE TABLE`` over a topic): each record
    sets its key's row; a record whose value columns are all null is a tombstone and deletes
    the key. Within a batch the last record per key wins."""

    name: str
    keys: tuple[str, ...]

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        missing = [c for c in self.keys if c not in frame.columns]
        if missing:
            raise OperatorError(f"{scope.where(self.name)}: key column(s) {missing} are not in the data")
        values = [c for c in frame.columns if c not in self.keys and not c.startswith("_")]
        latest = without_nulls(frame, self.keys).drop_duplicates(list(self.keys), keep="last")
        keys = row_keys_of(latest, self.keys)
        store = scope.store.operator(self.name, initial=None)
        previous = store.get_values(keys)
        rows = []
        for key, old, record in zip(keys, previous, latest[values].to_dict("records")):
            new = {c: to_python(v) for c, v in record.items()}
            tombstone = all(v is None or v != v for v in new.values())
            if tombstone and old is None:
                continue
            parts = key if len(self.keys) > 1 else (key,)
            change = "delete" if tombstone else ("insert" if old is None else "update")
            if tombstone:
                store.delete(key)
            else:
                store.set(key, {c: _storable(v) for c, v in new.items()})
            shown = dict.fromkeys(values) if tombstone else new
            rows.append({**dict(zip(self.keys, parts)), **shown, CHANGE_COLUMN: change,
                         OLD_COLUMN: None if old is None else json.dumps(old, default=str)})
        return pd.DataFrame(rows, columns=[*self.keys, *values, CHANGE_COLUMN, OLD_COLUMN])


def _storable(value: Any) -> Any:
    """A row's value as its key's state keeps it: an instant as ISO-8601 text (the state is
    JSON; the row itself goes on with its timestamp), a missing one as null."""
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return None if value is pd.NaT else value
