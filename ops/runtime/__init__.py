"""The runtime: runs a pipeline's micro-batches under the exactly-once protocol.

``executor`` is a run's one loop (:func:`run_pipeline`); ``recovery`` says where a run starts,
``planning`` which batch comes next, ``run`` what both modes share (position, checkpoint
records, reports); ``modes`` says where operators run: ``driver`` (with ``write_behind``) or
``distributed`` (on executors); ``policy`` says when a run checkpoints and ``protocol`` what
it reads from a pipeline; ``continuous`` is how a long-lived run polls and stops; ``reports``
is what a run tells and ``metrics`` the same for Prometheus; ``dead_letters`` is where
rejected records go; ``hooks`` calls a pipeline's lifecycle hooks.
"""

from .continuous import Continuous, StopSignal, Trigger
from .dead_letters import DEAD_LETTER_SCHEMA
from .executor import run_pipeline
from .metrics import MetricsEndpoint, RunMetrics
from .modes import AUTO_DISTRIBUTED_ROWS, MODES, check_mode
from .policy import CheckpointPolicy
from .protocol import RunnablePipeline
from .reports import BatchReport, BatchTotals, CheckpointReport, RunReport

__all__ = ["AUTO_DISTRIBUTED_ROWS", "DEAD_LETTER_SCHEMA", "MODES", "BatchReport", "BatchTotals",
           "CheckpointPolicy", "CheckpointReport", "Continuous", "MetricsEndpoint", "RunMetrics",
           "RunReport", "RunnablePipeline", "StopSignal", "Trigger", "check_mode", "run_pipeline"]
