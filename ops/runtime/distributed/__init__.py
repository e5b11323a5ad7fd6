"""Operators on executors: a batch's operators and their state run on Spark executors.

The driver builds a plan of Spark DataFrames and never holds a batch's rows or state:

1. The operators are cut into **stages**, each starting at a stateful operator and taking the
   stateless ones after it along (:func:`stages_of`). Stateless operators before the first
   stateful one form a narrow stage, run where the rows are.
2. A **keyed** stage tags every row with its encoded key and key group and shuffles the rows
   by bucket: a contiguous range of key groups, as many buckets as shuffle partitions (a call
   per key group cost 3.5 s of a 7 s batch of 25k rows on 256 groups). Each bucket is one call
   of the operators, on an executor, with a :class:`~state.StateStore` over its keys' state,
   which the task reads from the ``_state`` files of its groups itself (:class:`StateFiles`;
   where delta-rs does not read the table, and for timed maps, the rows are cogrouped with a
   Spark semi-join of ``_state`` instead): ``sp.get``/``sp.set`` behave as on the driver. Key
   groups, not tasks, own state, so any number of tasks works.
3. A **clocked** stage (windows, sessions: keyed, but whether a record is late depends on the
   stream time before it, across all keys) first measures stream time over the whole batch in
   input order: the rows are range-partitioned by ``__order``, each partition's largest event
   time collected (one number per partition), and each row stamped with the stream time before
   it. Then it runs as a keyed stage, with all of the operator's state (its open windows, each
   routed by the keys that own it) so that every bucket closes its own windows; the driver
   writes the operator's clock (stream time, late records the tasks counted).
4. A **whole-stream** stage (unkeyed state) runs as one group, with all of the operator's state.
5. Each group returns its output rows (Arrow IPC, one binary cell per chunk), its changed state
   rows, counts, or the error it raised, in one frame of :data:`~.rows.STAGE_SCHEMA` (a kind
   of row each, with columns of its own: :mod:`.rows`). The driver
   collects only the counts, the output schemas and errors; the next stage decodes the rows.
6. **Files written where the rows are.** Once ``_state`` exists and delta-rs appends to it, a
   task writes its changed state as a ``_state`` data file itself and returns only the file's
   add action, which the driver commits with the checkpoint's record (:class:`StateFiles`,
   :class:`~state.WrittenState`; not in a batch with a clocked stage or a timed map, whose
   driver-made rows and deadline reads need the rows in Spark: :func:`writes_state_files`);
   likewise the last stage's tasks write each Delta sink's
   files when the table takes the rows as they are (:meth:`~ops.sinks.FileSink.file_target`; a
   task whose rows it would not take writes none, and the sink writes the batch itself). No
   state or sink row then passes through Spark's writers: at 1M events per batch on two cores
   that more than halved a batch (``bench/README.md``). A file whose commit never comes (a crash, a
   refused batch) is never read; a vacuum removes it.

Rows keep their source order through the ``__order`` column (an operator sees its rows sorted
by it, as on the driver); an operator that makes new rows (an aggregation) numbers them after
every source ordinal, by bucket and position (so those numbers, and only they, depend on the
number of shuffle partitions; a replayed batch's sink write is skipped or complete either way).

The package's modules: :mod:`.stages` cuts the operators into stages; :mod:`.tasks` is what a
stage's tasks are told; :mod:`.driver_side` plans the stages as Spark frames (with
:mod:`.clocks` for stream time and timers) into a :class:`~.output.StageOutput`;
:mod:`.on_executors` runs a task; :mod:`.rows` types what it returns; :mod:`.mode` is the
run's :class:`DistributedMode`.
"""

from .driver_side import run_stages
from .mode import DistributedMode
from .output import StageOutput
from .rows import STAGE_SCHEMA
from .stages import Stage, is_event_time, stages_of, writes_state_files
from .tasks import StateFiles, TaskSpec, partition_tags

__all__ = ["STAGE_SCHEMA", "DistributedMode", "Stage", "StageOutput", "StateFiles", "TaskSpec",
           "is_event_time", "partition_tags", "run_stages", "stages_of", "writes_state_files"]
