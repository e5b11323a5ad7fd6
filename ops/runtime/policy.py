"""When a run checkpoints: the policy a pipeline declares, applied by the runtime's loop."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PipelineDefinitionError


@dataclass(frozen=True)
class CheckpointPolicy:
    """When to checkpoint within a run (a run always checkpoints at its end).

    ``every_batches=1`` (the default) checkpoints after every micro-batch; ``every_seconds``
    checkpoints when that much time passed since the last one, whichever comes first.
    """

    every_batches: int | None = 1
    every_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.every_batches is not None and self.every_batches < 1:
            raise PipelineDefinitionError(f"every_batches must be >= 1, got {self.every_batches}")
        if self.every_seconds is not None and self.every_seconds <= 0:
            raise PipelineDefinitionError(f"every_seconds must be > 0, got {self.every_seconds}")

    def due(self, batches_since: int, seconds_since: float) -> bool:
        by_count = self.every_batches is not None and batches_since >= self.every_batches
        by_time = self.every_seconds is not None and seconds_since >= self.every_seconds
        return by_count or by_time
