"""A landing directory: every file is processed exactly once, in arrival order; bad lines and
unreadable files go to dead letters with ``file:line`` positions."""

import os

import pandas as pd
import pytest

import ops as sp
from ops import PipelineDefinitionError
from tests.helpers import dead_letters, sink_rows


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def land(directory, name, text, mtime):
    """Write a file elsewhere and rename it in, as producers should."""
    os.makedirs(directory, exist_ok=True)
    staging = os.path.join(directory, f".{name}.tmp")
    with open(staging, "w") as handle:
        handle.write(text)
    os.utime(staging, (mtime, mtime))
    os.rename(staging, os.path.join(directory, name))


def pipeline_for(directory, fmt="json", **kwargs):
    return (sp.read.from_files(directory, fmt, key="k", schema={"k": "string", "x": "long"}, **kwargs)
            .map(running_sum, state=0).write.to_delta("sums")).named(f"files_{fmt}")


def test_json_files_are_processed_once_in_arrival_order(spark, warehouse, tmp_path):
    landing = str(tmp_path / "landing")
    land(landing, "b.json", '{"k":"a","x":1}\n{"k":"b","x":2}\n', mtime=1_000)
    land(landing, "a.json", '{"k":"a","x":10}\n', mtime=2_000)  # later, though its name sorts first
    pipeline = pipeline_for(landing)

    first = pipeline.run_once(spark, warehouse)
    assert first.rows_in == 3
    assert sink_rows(spark, pipeline, warehouse)[["k", "x", "total"]].values.tolist() == [
        ["a", 1, 1], ["b", 2, 2], ["a", 10, 11]]

    assert pipeline.run_once(spark, warehouse).rows_in == 0  # nothing new: nothing reread
    land(landing, "c.json", '{"k":"b","x":5}\n', mtime=3_000)
    assert pipeline.run_once(spark, warehouse).rows_in == 1
    assert list(sink_rows(spark, pipeline, warehouse)["total"]) == [1, 2, 11, 7]


def test_max_files_bounds_each_batch(spark, warehouse, tmp_path):
    landing = str(tmp_path / "landing")
    for n in range(3):
        land(landing, f"f{n}.json", f'{{"k":"a","x":{n + 1}}}\n', mtime=1_000 + n)
    report = pipeline_for(landing, max_files=2).run_once(spark, warehouse)
    assert [b.rows_in for b in report.batches] == [2, 1]


def test_malformed_lines_and_null_keys_go_to_dead_letters(spark, warehouse, tmp_path):
    landing = str(tmp_path / "landing")
    land(landing, "mixed.json", '{"k":"a","x":1}\nnot json\n{"k":"a","x":"two"}\n{"x":3}\n'
         '{"k":"a","x":4}\n', mtime=1_000)
    pipeline = pipeline_for(landing)
    report = pipeline.run_once(spark, warehouse)

    assert (report.rows_in, report.rows_out, report.dead_letters) == (5, 2, 3)
    assert list(sink_rows(spark, pipeline, warehouse)["total"]) == [1, 5]
    letters = dead_letters(spark, pipeline, warehouse).sort_values("position")
    assert [p.rsplit("/", 1)[1] for p in letters["position"]] == [
        "mixed.json:2", "mixed.json:3", "mixed.json:4"]
    assert list(letters["raw"])[:2] == ["not json", '{"k":"a","x":"two"}']
    assert "malformed json record" in letters["reason"].iloc[0]
    assert "key field 'k'" in letters["reason"].iloc[2]


def test_csv_and_parquet_files(spark, warehouse, tmp_path):
    csv_dir = str(tmp_path / "csv")
    land(csv_dir, "one.csv", "k,x\na,1\na,2\nb,oops\n", mtime=1_000)
    csv = pipeline_for(csv_dir, fmt="csv")
    assert csv.run_once(spark, warehouse).dead_letters == 1
    assert list(sink_rows(spark, csv, warehouse)["total"]) == [1, 3]

    parquet_dir = tmp_path / "parquet"
    parquet_dir.mkdir()
    pd.DataFrame({"k": ["a", "a"], "x": [5, 6]}).to_parquet(parquet_dir / "one.parquet")
    (parquet_dir / "broken.parquet").write_bytes(b"not parquet at all")
    parquet = pipeline_for(str(parquet_dir), fmt="parquet")
    report = parquet.run_once(spark, warehouse)
    assert list(sink_rows(spark, parquet, warehouse)["total"]) == [5, 11]
    letters = dead_letters(spark, parquet, warehouse)
    assert report.dead_letters == 1 and letters["position"].iloc[0].endswith("broken.parquet")
    assert letters["reason"].iloc[0].startswith("unreadable parquet file")


def test_bad_definitions_are_refused():
    with pytest.raises(PipelineDefinitionError, match="format 'xml'"):
        sp.read.from_files("/tmp/x", "xml", schema={"x": "long"})
    with pytest.raises(PipelineDefinitionError, match="json files need a schema"):
        sp.read.from_files("/tmp/x", "json")
