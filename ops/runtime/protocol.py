"""What the runtime reads from a pipeline, named in one place: :class:`RunnablePipeline`.

The runtime sits below :mod:`ops.pipeline` (which hands it pipelines), so it names the few
things it needs here instead of importing the concrete ``Pipeline``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from state import Hooks, PipelineLayout, Tracked

    from ..operators import Operator
    from ..sinks import Sink
    from ..sources import Source
    from .policy import CheckpointPolicy


class RunnableStream(Protocol):
    """The operators a run applies to its source's rows, in order."""

    @property
    def operators(self) -> tuple[Operator, ...]: ...


class RunnablePipeline(Protocol):
    """Everything :func:`ops.runtime.run_pipeline` reads from the pipeline it runs."""

    @property
    def name(self) -> str | None: ...
    @property
    def id(self) -> str: ...
    @property
    def source(self) -> Source: ...
    @property
    def stream(self) -> RunnableStream: ...
    @property
    def sinks(self) -> tuple[Sink, ...]: ...
    @property
    def tracked(self) -> tuple[Tracked, ...]: ...
    @property
    def checkpoint(self) -> CheckpointPolicy: ...
    @property
    def key_groups(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def stateful_operators(self) -> tuple[str, ...]: ...

    def layout(self, warehouse: str | None = None) -> PipelineLayout: ...
    def all_hooks(self) -> list[tuple[str, Hooks]]: ...
