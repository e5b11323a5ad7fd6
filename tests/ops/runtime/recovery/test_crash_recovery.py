"""Crash at every protocol step (SIGKILL in a child process), recover, and compare to an oracle."""

import json
import signal

import pytest
from deltalake import DeltaTable

from tests.helpers import last_commit
from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome

STEPS = [
    "after_plan:1",                # all six plans recorded (one commit), nothing run
    "after_sink_write:3",
    "before_global_append:4",
    "after_global_append:4",
    "hook_on_checkpoint:1",        # mid-checkpoint: markers taken, nothing committed
    "before_checkpoint_commit:2",
    "after_checkpoint_commit:1",   # committed, not yet verified nor post-checkpoint hooks
    "hook_on_post_checkpoint:2",
    "hook_on_recover:1",           # crash during recovery itself (second start)
]
# Without hooks, batch b+1's sinks are written while checkpoint b commits, so these crashes
# can leave a batch's output written past the last checkpoint (seen: "after_checkpoint_commit:2"
# left batch 3 in the sink); the replay must add nothing to it.
PLAIN_STEPS = [
    "after_sink_write:4",
    "before_checkpoint_commit:3",
    "after_checkpoint_commit:2",
]


def test_oracle_is_what_the_pipeline_means(oracle):
    assert oracle["batch"] == 6
    assert oracle["tracked"]["total"] == 24
    assert oracle["audit_marker"] == 23 and [row[0] for row in oracle["audit"]] == list(range(24))
    expected = {k: sum(r["x"] for batch in cp.INPUT for r in batch if r["k"] == k) for k in (0, 1, 2, 7)}
    assert dict(oracle["state"]) == expected


def test_plain_oracle_is_the_same_run_without_the_audit_table(oracle, plain_oracle):
    assert plain_oracle == {key: value for key, value in oracle.items()
                            if not key.startswith("audit")}


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", STEPS)
def test_crash_then_recover_matches_oracle(spark, warehouse, crash_child, oracle, published,
                                           crash_at):
    pipeline = cp.build()
    published(pipeline, warehouse)
    if crash_at.startswith("hook_on_recover"):
        first = crash_child("after_sink_write:3")
        assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    crashed = crash_child(crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = pipeline.run_once(spark, warehouse)  # recovery in a fresh run, here in-process

    assert report.last_batch_id == 6
    assert outcome(spark, pipeline, warehouse) == oracle


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", PLAIN_STEPS)
def test_crash_while_the_next_batch_writes_matches_oracle(spark, warehouse, crash_child,
                                                          plain_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "plain", crash_at, plain_oracle,
                       batches=6)


def _crash_and_recover(spark, warehouse, crash_child, published, variant, crash_at, oracle,
                       batches):
    """Kill a child running the ``variant`` pipeline at ``crash_at``; recover in a fresh run,
    here in-process; what it leaves must be the oracle's."""
    pipeline = cp.BUILDERS[variant]()
    published(pipeline, warehouse)
    crashed = crash_child(crash_at, pipeline=variant)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = pipeline.run_once(spark, warehouse)

    assert report.last_batch_id == batches
    assert outcome(spark, pipeline, warehouse) == oracle


# A continuous run keeps its process between batches; a kill at these steps must leave what
# the next (continuous) run recovers to the oracle.
# Continuous runs use the same executor, whose every step the tests above kill; here the step
# that matters most to a run that stays up: a batch written, its checkpoint not (suite time).
CONTINUOUS_STEPS = ["after_sink_write:3"]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", CONTINUOUS_STEPS)
def test_continuous_run_killed_then_recovered_matches_oracle(spark, warehouse, crash_child, oracle,
                                                             published, crash_at):
    pipeline = cp.build()
    published(pipeline, warehouse)
    crashed = crash_child(crash_at, run="continuous")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = cp.run_until_drained(spark, pipeline, warehouse)

    assert report.last_batch_id == 6
    assert outcome(spark, pipeline, warehouse) == oracle


DISTRIBUTED_STEPS = [
    "after_plan:1",
    "after_sink_write:2",
    "before_checkpoint_commit:2",
    "after_checkpoint_commit:2",
]


def test_distributed_oracle_is_what_the_pipeline_means(distributed_oracle):
    assert distributed_oracle["batch"] == 2
    rows = [row for batch in cp.DISTRIBUTED_INPUT for row in batch]
    expected = {k: sum(r["x"] for r in rows if r["k"] == k) for k in {r["k"] for r in rows}}
    assert dict(distributed_oracle["state"]) == expected
    assert [row[3] for row in distributed_oracle["sink"]] == [1] * 4 + [2] * 4


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", DISTRIBUTED_STEPS)
def test_distributed_crash_then_recover_matches_oracle(spark, warehouse, crash_child,
                                                       distributed_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "distributed", crash_at,
                       distributed_oracle, batches=2)


@pytest.mark.slow
def test_a_killed_executor_python_worker_fails_the_batch_or_is_retried(
        warehouse, crash_child, tmp_path, spark, distributed_oracle, published):
    """Without task retries (``local[1]``) a worker killed mid-batch fails the run cleanly,
    nothing of the batch committed; the next run, whose worker is killed too but with retries
    (``local[1,4]``), has Spark retry the task, replays the batch and matches the oracle."""
    pipeline = cp.build_distributed()
    published(pipeline, warehouse)
    failed = crash_child(pipeline="distributed",
                         CRASH_TEST_KILL_WORKER=str(tmp_path / "killed_once"))
    assert failed.returncode == 1, failed.stdout + failed.stderr[-3000:]
    assert "DONE" not in failed.stdout
    assert outcome(spark, pipeline, warehouse)["batch"] == 1  # batch 2 was not committed

    retried = crash_child(pipeline="distributed", LAKESTREAM_SPARK_MASTER="local[1,4]",
                          CRASH_TEST_KILL_WORKER=str(tmp_path / "killed_again"))
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert "DONE checkpoint=2 batches=1" in retried.stdout  # batch 2 replayed, once
    assert (tmp_path / "killed_again").exists()  # its worker was killed, and Spark retried
    assert outcome(spark, pipeline, warehouse) == distributed_oracle


# The vectorized sum holds its state in columns; checkpoints every two batches, so a crash
# after batch 3 loses state that waited, encoded, in memory.
VECTORIZED_STEPS = [
    "after_sink_write:3",
    "before_checkpoint_commit:2",
    "after_checkpoint_commit:1",
]


def test_vectorized_oracle_is_the_per_key_sum(plain_oracle, vectorized_oracle):
    assert vectorized_oracle == {key: value for key, value in plain_oracle.items()
                                 if key != "tracked"}


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", VECTORIZED_STEPS)
def test_vectorized_crash_then_recover_matches_oracle(spark, warehouse, crash_child,
                                                      vectorized_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "vectorized", crash_at,
                       vectorized_oracle, batches=6)


# A Spark StatefulProcessor (transform_with_state): its variables are its key's record in the
# operator's state, checkpointed every two batches. Killed with a batch's output written, before
# a checkpoint's commit and after one.
PROCESSOR_STEPS = ["after_sink_write:3", "before_checkpoint_commit:2", "after_checkpoint_commit:1"]


def test_processor_oracle_is_the_running_sum(vectorized_oracle, processor_oracle):
    """The same sums, the rows of a batch grouped by key (as Spark's tasks give them), the
    total in the processor's ValueState."""
    assert sorted(row[:4] for row in processor_oracle["sink"]) == \
        sorted(row[:4] for row in vectorized_oracle["sink"])
    # the ValueState "total" is a state of its own: a row per key, its typed column the total
    assert [(key, value[0]) for key, _, value in processor_oracle["running_sum.total"]] == \
        vectorized_oracle["state"]
    assert processor_oracle["batch"] == vectorized_oracle["batch"] == 6


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", PROCESSOR_STEPS)
def test_processor_crash_then_recover_matches_oracle(spark, warehouse, crash_child,
                                                     processor_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "processor", crash_at,
                       processor_oracle, batches=6)


# With an initial state, applied in the first batch only: killed before the first checkpoint
# (batches 1 and 2 run again, the initial state with batch 1) and after it (it is never
# applied again).
INITIAL_STEPS = ["before_checkpoint_commit:1", "after_checkpoint_commit:1"]


def test_initial_oracle_starts_from_the_initial_state(processor_oracle, initial_oracle):
    plain = {key: value for key, _, value in processor_oracle["running_sum.total"]}
    started = {key: value for key, _, value in initial_oracle["running_sum.total"]}
    assert started == {**plain, 7: (plain[7][0] + 100,), 99: (5,)}
    sevens = [row[2] for row in initial_oracle["sink"] if row[0] == 7]
    assert sevens == [total + 100 for *_, total in
                      (row[:3] for row in processor_oracle["sink"] if row[0] == 7)]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", INITIAL_STEPS)
def test_initial_state_crash_then_recover_applies_it_once(spark, warehouse, crash_child,
                                                          initial_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "processor_initial", crash_at,
                       initial_oracle, batches=6)


@pytest.mark.slow
def test_initial_state_on_executors_crash_then_recover_applies_it_once(
        spark, warehouse, crash_child, initial_oracle, published):
    """On executors, killed before the first checkpoint's commit: the first batch runs again,
    its initial state's rows with it, and what recovery leaves is the driver's crash-free run
    (row ids aside)."""
    _on_executors_matches_the_driver(spark, warehouse, crash_child, published,
                                     "processor_initial_distributed", "before_checkpoint_commit:1",
                                     initial_oracle, batches=6)


# Event time: timers kept in the key's record and the operator's queue, the watermark in the
# queue's table; killed with a batch's output written and before a checkpoint's commit, in a
# batch that fires timers and after the last input, in the batch with none that fires the rest.
EVENT_TIME_STEPS = ["after_sink_write:4", "before_checkpoint_commit:2", "after_sink_write:7"]


def test_event_time_oracle_fires_timers_and_drops_late_rows(event_time_oracle):
    fired = {(row[0], row[1], row[2]) for row in event_time_oracle["sink"]}
    assert (7, 7, 1 + 2) in fired  # key 7's rows of batches 1-2 (x = 1, 2): quiet at 7 s
    assert all(key != 7 or total == 3 for key, _, total in fired)  # its later rows were late
    assert event_time_oracle["batch"] == 7  # six with input, one after them for due timers


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", EVENT_TIME_STEPS)
def test_event_time_crash_then_recover_matches_oracle(spark, warehouse, crash_child,
                                                      event_time_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "processor_event_time",
                       crash_at, event_time_oracle, batches=7)


@pytest.mark.slow
def test_event_time_on_executors_crash_then_recover_matches_the_driver(
        spark, warehouse, crash_child, event_time_oracle, published):
    """Killed with the batch that fires timers on executors written, its checkpoint not; what
    recovery leaves is what the driver does without a crash: the same rows in the same
    batches, the same state (a row's ``_row`` id on executors is numbered by its task)."""
    _on_executors_matches_the_driver(spark, warehouse, crash_child, published,
                                     "processor_event_time_distributed", "after_sink_write:4",
                                     event_time_oracle, batches=7)


# A list and a map kept as a row per element and entry (state "running_sum.recent" and
# "running_sum.seen"): the first checkpoint adds their entry columns in a commit of its own;
# killed between the two, with a batch's output written, and before a later checkpoint.
ENTRY_STEPS = ["state_columns_added:1", "after_sink_write:3", "before_checkpoint_commit:2"]


def test_entries_oracle_is_the_last_three_and_the_counts(entries_oracle):
    """The crash-free run against a brute force: each key's last three ``x`` and its counts
    per ``x % 3`` over all the input, and each row's total the sum of its last three."""
    by_key: dict[int, list[int]] = {}
    for batch in cp.INPUT:
        for row in batch:
            by_key.setdefault(row["k"], []).append(row["x"])
    # a list's positions only grow: each row's put drops one element and adds one
    assert entries_oracle["running_sum.recent"] == sorted(
        (k, str(at), (x,)) for k, xs in by_key.items() for at, x in enumerate(xs) if at >= len(xs) - 3)
    counts = {(k, x % 3): 0 for k, xs in by_key.items() for x in xs}
    for k, xs in by_key.items():
        for x in xs:
            counts[k, x % 3] += 1
    # a map entry's identity is its user key's JSON
    assert entries_oracle["running_sum.seen"] == sorted(
        (k, f"[{rem}]", (n,)) for (k, rem), n in counts.items())
    totals = {(row[0], row[1]): row[2] for row in entries_oracle["sink"]}
    for k, xs in by_key.items():
        assert [totals[k, x] for x in xs] == [sum(xs[max(0, i - 2):i + 1]) for i in range(len(xs))]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", ENTRY_STEPS)
def test_entries_crash_then_recover_matches_oracle(spark, warehouse, crash_child, entries_oracle,
                                                   published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "processor_entries", crash_at,
                       entries_oracle, batches=6)


@pytest.mark.slow
def test_entries_on_executors_crash_then_recover_match_the_driver(
        spark, warehouse, crash_child, entries_oracle, published):
    """On executors, killed with a checkpoint's files (its tasks' entries) written and not
    committed: recovery leaves what the driver does without a crash (row ids aside)."""
    _on_executors_matches_the_driver(spark, warehouse, crash_child, published,
                                     "processor_entries_distributed", "before_checkpoint_commit:3",
                                     entries_oracle, batches=6)


# Typed storage (state_type=int): the first checkpoint adds the state's columns to `_state` in a
# commit of its own, then appends its rows; killed between the two, and before a later
# checkpoint's commit (a kill after a commit is the same for every storage: the tests above).
TYPED_STEPS = ["state_columns_added:1", "before_checkpoint_commit:2"]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", TYPED_STEPS)
def test_typed_state_crash_then_recover_matches_oracle(spark, warehouse, crash_child,
                                                       vectorized_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "typed", crash_at,
                       vectorized_oracle, batches=6)
    _assert_stored_typed(cp.build_typed().layout(warehouse).state)


def _assert_stored_typed(state: str) -> None:
    """The sum's rows of ``state`` hold their keys in its typed column only, none as text."""
    rows = DeltaTable(state).to_pyarrow_table(filters=[("operator", "=", "running_sum")])
    assert rows["key"].null_count == rows.num_rows and rows["k__running_sum"].null_count == 0


# On executors (each task's state in columns) every batch is checkpointed, and from the second
# on (`_state` exists) each task writes its changed state as a file of its own, which the
# driver commits with the checkpoint's record. Killed before the first checkpoint, with the
# second's files written and not committed (never to be read: the recovery writes its own),
# and with them committed but not yet verified.
EXECUTOR_STEPS = ["before_checkpoint_commit:1", "before_checkpoint_commit:2",
                  "after_checkpoint_commit:2"]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", EXECUTOR_STEPS)
def test_vectorized_on_executors_crash_then_recover_matches_oracle(
        spark, warehouse, crash_child, distributed_oracle, published, crash_at):
    _crash_and_recover(spark, warehouse, crash_child, published, "vectorized_distributed",
                       crash_at, distributed_oracle, batches=2)
    state = cp.build_vectorized_distributed().layout(warehouse).state
    added = [action["add"] for action in last_commit(state) if "add" in action]  # not Spark's
    assert {add["partitionValues"]["operator"] for add in added} == {"running_sum", "__checkpoint__"}
    assert {json.loads(add["stats"])["minValues"]["checkpoint_id"] for add in added} == {2}


# Typed state on executors: its first batch's tasks write files too (the table is made first),
# killed before that checkpoint and after a later one (before one: on S3, test_crash_on_s3).
TYPED_EXECUTOR_STEPS = ["before_checkpoint_commit:1", "after_checkpoint_commit:2"]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", TYPED_EXECUTOR_STEPS)
def test_typed_state_on_executors_crash_then_recover_matches_oracle(
        spark, warehouse, crash_child, distributed_oracle, published, crash_at):
    """Typed state on executors: each task writes its typed rows as a `_state` file of the
    state's columns (from the first batch: the table is made first), the driver commits them."""
    _crash_and_recover(spark, warehouse, crash_child, published, "typed_distributed",
                       crash_at, distributed_oracle, batches=2)
    state = cp.build_typed_distributed().layout(warehouse).state
    added = [action["add"] for action in last_commit(state) if "add" in action]
    assert {add["partitionValues"]["operator"] for add in added} == {"running_sum", "__checkpoint__"}
    _assert_stored_typed(state)


def _on_executors_matches_the_driver(spark, warehouse, crash_child, published, variant, crash_at,
                                     oracle, batches):
    """Kill a child running the ``variant`` pipeline on executors at ``crash_at``, recover
    here: what it leaves is the driver's crash-free run, the sink's rows compared as a set,
    their ``_row`` ids aside (on executors a row's id is numbered by its task)."""
    pipeline = cp.BUILDERS[variant]()
    published(pipeline, warehouse)
    crashed = crash_child(crash_at, pipeline=variant)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]
    assert pipeline.run_once(spark, warehouse).last_batch_id == batches

    def without_row_ids(found):
        return {**found, "sink": sorted(row[:4] for row in found["sink"])}
    assert without_row_ids(outcome(spark, pipeline, warehouse)) == without_row_ids(oracle)
