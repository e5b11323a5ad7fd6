"""Where a pipeline's operators run: on the driver, on Spark executors, or chosen per run.

``driver``: the batch comes to the driver as pandas and operators keep state in the driver's
memory between checkpoints; fastest while a batch fits one process comfortably.
``distributed``: operators run on executors, cogrouped with their keys' state by key group
(:mod:`ops.runtime.distributed`); the driver never holds a batch's rows or state.
``auto``: a run counts its first batch's rows and runs distributed from
:data:`AUTO_DISTRIBUTED_ROWS` rows on (bench/README.md has the measurements behind it).

>>> check_mode("auto")
'auto'
"""

from __future__ import annotations

MODES = ("driver", "distributed", "auto")

#: From this many rows in a run's first batch, ``auto`` runs distributed: where the driver's
#: memory, not its speed, becomes the limit (bench/README.md, "Driver vs distributed").
AUTO_DISTRIBUTED_ROWS = 1_000_000


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`; ``ValueError`` naming them if not."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode
