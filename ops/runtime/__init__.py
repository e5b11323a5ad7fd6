"""The runtime: runs a pipeline's micro-batches under the exactly-once protocol.

``executor`` drives a run (recover, plan, read, apply, write behind, checkpoint); ``continuous``
is how a long-lived run polls and stops; ``modes`` says where operators run and ``distributed``
runs them on executors; ``reports`` is what a run tells and ``metrics`` the same for Prometheus;
``dead_letters`` is where rejected records go; ``policy`` says when a run checkpoints and
``protocol`` what the runtime reads from a pipeline.
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
