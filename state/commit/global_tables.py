"""Global append-only state: a Delta table user code appends to, kept consistent by hooks.

Each row gets an increasing index. ``on_checkpoint`` stores the highest index in the checkpoint;
``on_recover`` deletes every row beyond the stored index, so rows appended by batches that were
never checkpointed disappear and their replay appends them once. Rows also carry the run and the
checkpoint that will cover them, which lets recovery remove rows a losing concurrent run wrote
below the marker (two runs recovering from the same checkpoint assign the same indexes).
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import StateError
from ..faults import fault_point
from ..lake import tables
from ..layout import check_name
from .hooks import HookContext, Hooks

log = logging.getLogger(__name__)

RUN_COLUMN = "_run"
CHECKPOINT_COLUMN = "_checkpoint"


class GlobalTable(Hooks):
    """An append-only Delta table ``<warehouse>/<pipeline>/<name>`` with index column ``index``.

    Register it with ``pipeline.with_hooks(trades)`` and call ``trades.append(frame)`` from
    operators; its marker is stored under its own key in every checkpoint.

    >>> trades = global_table("trades", index="idx")
    >>> trades.marker_key, trades.index
    ('global:trades', 'idx')
    """

    def __init__(self, name: str, index: str = "index"):
        self.name = check_name("global table", name)
        self.index = check_name("index column", index)
        self.marker_key: str = f"global:{self.name}"  # never None here, unlike the Hooks default
        self._ctx: HookContext | None = None
        self._next_index = 0
        self._covering_checkpoint = 1

    # -- user API ---------------------------------------------------------------------------
    def append(self, rows: pd.DataFrame) -> int:
        """Append ``rows`` (pandas), assigning indexes; returns the last index assigned."""
        ctx = self._bound()
        if self.index in rows.columns or RUN_COLUMN in rows.columns:
            raise StateError(f"global table {self.name!r}: rows must not carry {self.index!r} or "
                             f"{RUN_COLUMN!r}; they are assigned on append")
        if rows.empty:
            return self._next_index - 1
        first = self._next_index
        tagged = rows.reset_index(drop=True).assign(**{
            self.index: range(first, first + len(rows)),
            CHECKPOINT_COLUMN: self._covering_checkpoint, RUN_COLUMN: ctx.run_id})
        fault_point("before_global_append")
        # one commit, by delta-rs where it serves the table (no JVM for a driver-mode run)
        tables.append_rows(ctx.spark, tagged, self.path(ctx), again_soon=False)
        self._next_index = first + len(rows)
        fault_point("after_global_append")
        return self._next_index - 1

    def path(self, ctx: HookContext | None = None) -> str:
        return (ctx or self._bound()).layout.table(self.name)

    def read_committed(self, ctx: HookContext) -> DataFrame:
        """Rows covered by the last checkpoint (what readers outside the pipeline should use)."""
        last = ctx.checkpoints.latest()
        marker = (last.markers.get(self.marker_key) if last else None)
        rows = tables.read(ctx.spark, self.path(ctx))
        return rows.where(F.col(self.index) <= (-1 if marker is None else marker))

    # -- hooks ------------------------------------------------------------------------------
    def on_setup(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def on_recover(self, ctx: HookContext, marker: Any) -> None:
        last = -1 if marker is None else int(marker)
        self._next_index = last + 1
        self._covering_checkpoint = (ctx.checkpoint_id or 0) + 1
        path = self.path(ctx)
        if not tables.exists(ctx.spark, path):
            return
        # the rows are counted first (delta-rs, by the index's statistics): after a clean run
        # there are none beyond the marker, and a DELETE would start Spark for nothing
        if tables.count_between(ctx.spark, path, self.index, last + 1):
            DeltaTable.forPath(ctx.spark, path).delete(F.col(self.index) > last)
            log.info("global table %s truncated to index %d", self.name, last)
        self._fence(ctx, path)

    def on_checkpoint(self, ctx: HookContext) -> Any:
        return self._next_index - 1

    def on_post_checkpoint(self, ctx: HookContext, checkpoint_id: int) -> None:
        self._covering_checkpoint = checkpoint_id + 1

    def on_error(self, ctx: HookContext, error: BaseException) -> None:
        # best effort: the next recovery removes these rows anyway
        path = self.path(ctx)
        if tables.count_between(ctx.spark, path, CHECKPOINT_COLUMN, self._covering_checkpoint):
            DeltaTable.forPath(ctx.spark, path).delete(
                (F.col(RUN_COLUMN) == ctx.run_id)
                & (F.col(CHECKPOINT_COLUMN) >= self._covering_checkpoint))

    # -- internals --------------------------------------------------------------------------
    def _fence(self, ctx: HookContext, path: str) -> None:
        """Delete rows whose (checkpoint, run) is not a committed checkpoint: a losing run's.
        Which pairs the table holds is read from its two columns alone (delta-rs where it
        serves the table); only when one is not a committed checkpoint's does Spark rewrite."""
        written = tables.column_frame(ctx.spark, path, [CHECKPOINT_COLUMN, RUN_COLUMN])
        pairs = set(zip(map(int, written[CHECKPOINT_COLUMN]), written[RUN_COLUMN]))
        if pairs <= ctx.checkpoints.owners():
            return
        owners = (ctx.checkpoints.records()
                  .select(F.col("checkpoint_id").alias(CHECKPOINT_COLUMN),
                          F.get_json_object("value", "$.run_id").alias(RUN_COLUMN)))
        table = DeltaTable.forPath(ctx.spark, path)
        (table.alias("g").merge(owners.alias("o"),
                                f"g.{CHECKPOINT_COLUMN} = o.{CHECKPOINT_COLUMN} "
                                f"AND g.{RUN_COLUMN} = o.{RUN_COLUMN}")
         .whenNotMatchedBySourceDelete().execute())
        log.warning("global table %s: removed rows written by a run that lost its checkpoint",
                    self.name)

    def _bound(self) -> HookContext:
        if self._ctx is None:
            raise StateError(f"global table {self.name!r} is not attached to a running pipeline; "
                             "register it with pipeline.with_hooks(table)")
        return self._ctx


def global_table(name: str, index: str = "index") -> GlobalTable:
    """An append-only global table whose rows beyond the last checkpoint vanish on recovery."""
    return GlobalTable(name, index)
