"""The runtime: runs a pipeline's micro-batches under the exactly-once protocol.

``executor`` drives a run (recover, plan, read, apply, write behind, checkpoint); ``reports``
is what it tells; ``dead_letters`` is where rejected records go.
"""

from .dead_letters import DEAD_LETTER_SCHEMA
from .executor import run_pipeline
from .reports import BatchReport, RunReport

__all__ = ["DEAD_LETTER_SCHEMA", "BatchReport", "RunReport", "run_pipeline"]
