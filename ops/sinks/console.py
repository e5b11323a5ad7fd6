"""``.write.to_console()``: print each batch."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pandas as pd

from ..context import RunContext
from .base import Sink


@dataclass(frozen=True)
class ConsoleSink(Sink):
    """Prints each batch. A replayed batch prints again (the console cannot be un-printed)."""

    name: str = "console"

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        print(f"[{ctx.pipeline}] batch {batch_id}:")
        print(frame.to_string(index=False), flush=True, file=sys.stdout)
