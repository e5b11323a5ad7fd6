"""How an append lays its rows out in the data file it writes, for the readers that filter it.

A Parquet file keeps each row group's minimum and maximum per column, and a read with a filter
skips the row groups whose range excludes it (pyarrow's dataset does). Rows written in the order
of the column readers filter by, in row groups of a bounded size, give each row group a narrow
range of that column: a read of a few of its values then opens few row groups of a large file.

>>> import pyarrow as pa
>>> rows = pa.table({"group": pa.array([3, None, 1, 3], pa.int32()), "n": [0, 1, 2, 3]})
>>> FileLayout(sorted_by="group", row_group_rows=2).arrange(rows)["n"].to_pylist()
[2, 0, 3, 1]
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class FileLayout:
    """Rows in ascending order of the column ``sorted_by`` (nulls last, rows of one value in the
    order given), at most ``row_group_rows`` to a row group."""

    sorted_by: str
    row_group_rows: int

    def arrange(self, rows: pa.Table) -> pa.Table:
        """``rows`` in this layout's order; as they are when they fit one row group anyway."""
        if rows.num_rows <= self.row_group_rows:
            return rows
        # in Arrow, not pandas: reordering a frame of Python strings before its conversion made
        # the conversion four times slower (1M rows: +0.4 s; the sort and take here: 0.03 s)
        order = pc.sort_indices(rows, sort_keys=[(self.sorted_by, "ascending", "at_end")])
        return rows.take(order)
