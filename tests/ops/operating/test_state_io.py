"""State offline: bootstrapped before a pipeline's first run (driver and distributed), exported
from one warehouse and imported into another with its source positions rewritten; bad input
refused with nothing written."""

import pandas as pd
import pytest

import ops as sp
from state import CheckpointLog, read_state
from state.lake import tables
from tests.ops.runtime.migration_child import version_1
from tests.ops.runtime.recovery import crash_pipeline as cp


def _state(spark, pipeline, warehouse, name):
    rows = read_state(spark, pipeline.layout(warehouse), name)
    return dict(zip(rows["key"], rows["value"]))


@pytest.mark.parametrize("mode, store", [("driver", "local"), ("distributed", "local"),
                                         ("driver", "s3")])
def test_bootstrapped_state_is_where_the_first_run_starts(spark, warehouse, tmp_path, request, mode,
                                                          store):
    if store == "s3":
        warehouse = request.getfixturevalue("s3_warehouse")
    pipeline = version_1(mode=mode)
    seed = tmp_path / "seed"
    spark.createDataFrame(pd.DataFrame({"y": [0, 1, 2], "value": [100, 200, 300]})) \
        .write.format("delta").save(str(seed))
    first = sp.bootstrap_state(spark, pipeline, {"sum": str(seed)}, warehouse=warehouse)
    assert (first.checkpoint_id, first.batch_id, first.migration) == (1, 0, "bootstrap sum")
    pipeline.publish(spark, [{"x": 1, "y": 0}, {"x": 2, "y": 1}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert _state(spark, pipeline, warehouse, "sum") == {0: 101, 1: 202, 2: 300}
    assert sorted(pipeline.read_sink(spark, "out", warehouse)["total"]) == [101, 202]


def test_bad_bootstrap_input_is_refused_and_nothing_is_written(spark, warehouse):
    pipeline = version_1()
    cases = {
        "no column\\(s\\) \\['value'\\]": pd.DataFrame({"y": [0]}),
        "key 0 repeats \\(row 1\\)": pd.DataFrame({"y": [0, 0], "value": [1, 2]}),
        "row 1 has a null key": pd.DataFrame({"y": [0, None], "value": [1, 2]}),
        "cannot be encoded with the json codec": pd.DataFrame({"y": [0], "value": [object()]}),
    }
    for message, rows in cases.items():
        with pytest.raises(sp.MigrationError, match=message):
            sp.bootstrap_state(spark, pipeline, {"sum": rows}, warehouse=warehouse)
    with pytest.raises(sp.MigrationError, match=r"no stateful operator \['nope'\]; it has \['sum'\]"):
        sp.bootstrap_state(spark, pipeline, {"nope": pd.DataFrame()}, warehouse=warehouse)
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest() is None
    pipeline.publish(spark, [{"x": 1, "y": 0}], warehouse)
    pipeline.run_once(spark, warehouse)
    with pytest.raises(sp.MigrationError, match="already has checkpoint 1"):
        sp.bootstrap_state(spark, pipeline, {"sum": pd.DataFrame({"y": [5], "value": [1]})},
                           warehouse=warehouse)


@pytest.mark.parametrize("store", ["local", "s3"])
def test_export_then_import_into_another_warehouse(spark, tmp_path, request, store):
    """State, a tracked variable and a global table move; the inbox of the new warehouse is new,
    so its position is rewritten to its start. ``s3``: exported to and imported into S3."""
    here = str(tmp_path / "here")
    far = request.getfixturevalue("s3_warehouse") if store == "s3" else str(tmp_path)
    there, export = f"{far}/there", f"{far}/export"
    pipeline = cp.build("moving")
    for batch in cp.INPUT[:2]:
        pipeline.publish(spark, batch, here)
    pipeline.run_once(spark, here)
    exported = sp.export_state(spark, pipeline, export, warehouse=here)
    assert exported.offsets  # the inbox's position in `here`
    moved = sp.import_state(spark, pipeline, export, offsets=lambda positions: {},
                            warehouse=there)
    assert (moved.checkpoint_id, moved.offsets) == (1, {})
    assert _state(spark, pipeline, there, "running_sum") == _state(spark, pipeline, here,
                                                                   "running_sum")
    pipeline.publish(spark, cp.INPUT[2], there)
    pipeline.run_once(spark, there)
    expected = {}
    for row in (r for batch in cp.INPUT[:3] for r in batch):
        expected[row["k"]] = expected.get(row["k"], 0) + row["x"]
    assert _state(spark, pipeline, there, "running_sum") == expected
    rows = sum(len(batch) for batch in cp.INPUT[:3])
    assert cp.rows_seen.value["total"] == rows  # restored from the import, then counted on
    audit = tables.read(spark, pipeline.layout(there).table("audit")).toPandas()
    assert sorted(audit["idx"]) == list(range(rows))  # the moved rows, then the new ones
    with pytest.raises(sp.MigrationError, match="already has checkpoint"):
        sp.import_state(spark, pipeline, export, warehouse=there)
