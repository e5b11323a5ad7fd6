"""Read-ahead: while a batch's operators run, the next planned batch is read in a thread of its
own, and nothing about what a batch reads, or what a failed read leaves, changes."""

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import ops as sp
from ops.context import RunContext
from ops.errors import SourceError
from ops.sources import CallbackSource, Slice
from state import CheckpointLog
from tests.helpers import sink_rows


@dataclass(frozen=True)
class RecordedSource(CallbackSource):
    """The callback source, noting which thread read which range; it refuses to read from
    version ``fail_from`` on (``None``: never)."""

    fail_from: int | None = None
    reads: ClassVar[list[tuple[str, int, int]]] = []

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        RecordedSource.reads.append((threading.current_thread().name, int(start), int(end)))
        if self.fail_from is not None and int(end) >= self.fail_from:
            raise SourceError(f"version {end} is unreadable now")
        return super().read(ctx, start, end)


def running_total(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def _pipeline(name: str, fail_from: int | None = None) -> sp.Pipeline:
    stream = sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"}, max_versions=1)
    source = RecordedSource(**{f.name: getattr(stream.source, f.name)
                               for f in dataclasses.fields(CallbackSource)}, fail_from=fail_from)
    stream = dataclasses.replace(stream, source=source)
    return stream.map(running_total, state=0, name="total").write.to_delta("out").named(name)


@pytest.fixture(autouse=True)
def _no_reads_yet():
    RecordedSource.reads.clear()


def _publish(spark, pipeline, warehouse, values):
    for x in values:
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)


def test_each_batch_after_the_first_is_read_ahead_once(spark, warehouse):
    pipeline = _pipeline("read_ahead")
    _publish(spark, pipeline, warehouse, (1, 2, 3))
    report = pipeline.run_once(spark, warehouse)
    assert [b.batch_id for b in report.batches] == [1, 2, 3]
    threads = [name.split("_")[0] for name, _, _ in RecordedSource.reads]
    assert threads == ["MainThread", "lakestream-read", "lakestream-read"]
    # every planned range read exactly once, in order
    assert [(start, end) for _, start, end in RecordedSource.reads] == [(0, 1), (1, 2), (2, 3)]
    assert sink_rows(spark, pipeline, warehouse, "out")["total"].tolist() == [1, 3, 6]


def test_no_read_ahead_past_the_last_batch_a_run_may_run(spark, warehouse):
    pipeline = _pipeline("read_ahead_bounded")
    _publish(spark, pipeline, warehouse, (1, 2))
    pipeline.run_once(spark, warehouse, max_batches=1)
    assert [(start, end) for _, start, end in RecordedSource.reads] == [(0, 1)]


def test_a_failed_read_ahead_fails_its_own_batch_and_the_next_run_reads_it_again(spark, warehouse):
    failing = _pipeline("read_ahead_fails", fail_from=2)
    _publish(spark, failing, warehouse, (1, 2, 3))
    with pytest.raises(SourceError, match="version 2 is unreadable"):
        failing.run_once(spark, warehouse)
    # batch 1 ran, was written and checkpointed; nothing of batch 2 was
    assert CheckpointLog(spark, failing.layout(warehouse)).latest().batch_id == 1
    assert sink_rows(spark, failing, warehouse, "out")["total"].tolist() == [1]

    report = _pipeline("read_ahead_fails").run_once(spark, warehouse)
    assert [b.batch_id for b in report.batches] == [2, 3]
    rows = sink_rows(spark, failing, warehouse, "out")
    assert rows["_batch_id"].tolist() == [1, 2, 3] and rows["total"].tolist() == [1, 3, 6]
