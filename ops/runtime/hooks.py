"""A run's lifecycle hooks: each called in order with the run's :class:`~state.HookContext`."""

from __future__ import annotations

import logging
from typing import Any

from state import HookContext, Hooks, fault_point

log = logging.getLogger(__name__)


class RunHooks:
    """The pipeline's hooks (with their marker keys) and the context they are called with."""

    def __init__(self, name: str, hooks: list[tuple[str, Hooks]], ctx: HookContext):
        self.name = name
        self.hooks = hooks
        self.ctx = ctx

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def call(self, method: str, *args: Any) -> dict[str, Any]:
        """Call ``method`` on every hook, in order; return their results by marker key."""
        results = {key: getattr(hook, method)(self.ctx, *args) for key, hook in self.hooks}
        fault_point(f"hook_{method}")
        return results

    def recover(self, markers: dict[str, Any]) -> None:
        """``on_recover``: each hook gets the marker it returned at the last checkpoint."""
        for key, hook in self.hooks:
            hook.on_recover(self.ctx, markers.get(key))
        fault_point("hook_on_recover")

    def call_quietly(self, method: str, *args: Any) -> None:
        """``on_error``/``on_teardown``: one failing hook must neither stop the others nor hide
        the run's own error, so failures are logged, not raised."""
        for key, hook in self.hooks:
            try:
                getattr(hook, method)(self.ctx, *args)
            except Exception:
                log.exception("%s: %s hook %s failed", self.name, method, key)
