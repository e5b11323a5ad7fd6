"""Comparing two runs of a pipeline (driver vs distributed, one cluster size vs another):
same sink rows, state-table changelogs, state and dead letters, whatever order executors
wrote them in. Only ``_row``, which numbers rows differently per mode, and checkpoint ids are
left out."""

import pandas as pd

from ops import ROW_COLUMN, TableSink
from ops.testing import TestRun
from state.lake import tables


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without ``_row`` and checkpoint ids, as text, columns and rows sorted."""
    frame = frame.drop(columns=[c for c in (ROW_COLUMN, "checkpoint_id") if c in frame.columns])
    frame = frame[sorted(frame.columns)].astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def changelogs(spark, pipeline, run: TestRun) -> dict[str, pd.DataFrame]:
    layout = pipeline.layout(run.warehouse)
    return {sink.name: tables.read(spark, sink.changelog(layout)).toPandas()
            for sink in pipeline.sinks
            if isinstance(sink, TableSink) and tables.exists(spark, sink.changelog(layout))}


def assert_same_results(spark, pipeline, expected: TestRun, got: TestRun) -> None:
    parts = {"outputs": (expected.outputs, got.outputs), "state": (expected.state, got.state),
             "changelogs": (changelogs(spark, pipeline, expected), changelogs(spark, pipeline, got)),
             "dead letters": ({"": expected.dead_letters}, {"": got.dead_letters})}
    for part, (want, have) in parts.items():
        assert sorted(want) == sorted(have), part
        for name in want:
            pd.testing.assert_frame_equal(comparable(have[name]), comparable(want[name]),
                                          obj=f"{part} {name!r}")
