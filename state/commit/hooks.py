"""Lifecycle hooks: how user-managed global state stays consistent with checkpoints.

Call order in one run (pipeline-wide hooks first, then each operator's, in pipeline order)::

    on_setup(ctx)                         once, before recovery: create clients, tables
    on_recover(ctx, marker)               once: marker saved by on_checkpoint in the last
                                          checkpoint (None on a fresh pipeline); truncate
                                          global state back to it
    on_start(ctx)                         once, after recovery, before the first batch
      ... batches ...
      on_checkpoint(ctx) -> marker        at every checkpoint, after the batch's operators and
                                          before the commit; the marker (JSON-serialisable) is
                                          stored inside the commit
      on_post_checkpoint(ctx, checkpoint_id)   after the commit succeeded, before the next
                                          batch's operators run
    on_finish(ctx)                        after the last batch and the final checkpoint
    on_error(ctx, error)                  instead of on_finish, when the run fails
    on_teardown(ctx)                      always, last

A crash skips everything after the crash point; the next run's ``on_recover`` repairs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from ..layout import PipelineLayout
from .log import CheckpointLog


@dataclass
class HookContext:
    """What hooks are handed: the session, the pipeline's tables, the run and its progress."""

    spark: SparkSession
    layout: PipelineLayout
    run_id: str
    checkpoints: CheckpointLog
    checkpoint_id: int | None = None  # last committed checkpoint (None before the first)
    batch_id: int = 0  # last batch run

    @property
    def pipeline(self) -> str:
        return self.layout.pipeline


class Hooks:
    """Base class with no-op hooks; override the ones you need (see the module doc for order).

    ``marker_key`` is where the hook's marker is stored in a checkpoint (default: the class
    name); two hooks of one class in a pipeline need distinct keys.
    """

    marker_key: str | None = None

    def on_setup(self, ctx: HookContext) -> None:
        """Called once when the run starts, before recovery."""

    def on_recover(self, ctx: HookContext, marker: Any) -> None:
        """Called once with the marker of the last checkpoint (``None`` when there is none)."""

    def on_start(self, ctx: HookContext) -> None:
        """Called once after recovery, before the first batch."""

    def on_checkpoint(self, ctx: HookContext) -> Any:
        """Return the marker to store in the checkpoint being committed."""
        return None

    def on_post_checkpoint(self, ctx: HookContext, checkpoint_id: int) -> None:
        """Called after checkpoint ``checkpoint_id`` was committed."""

    def on_finish(self, ctx: HookContext) -> None:
        """Called after a successful run's final checkpoint."""

    def on_error(self, ctx: HookContext, error: BaseException) -> None:
        """Called when the run fails, before the error propagates."""

    def on_teardown(self, ctx: HookContext) -> None:
        """Called at the very end of every run that did not crash."""
