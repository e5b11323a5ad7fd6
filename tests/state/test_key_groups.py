"""Key groups: each state row carries the group of its key (a stable hash, the same in Python and
Spark), G is fixed at a pipeline's first checkpoint, and pipelines checkpointed before key groups
existed keep working."""

import json
import shutil
import zlib

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

import ops as sp
from ops import ConfigError, PipelineDefinitionError
from state import (
    CHECKPOINT_OPERATOR,
    STATE_SCHEMA,
    CheckpointLog,
    PipelineLayout,
    check_key_groups,
    encode_key,
    key_group,
    key_group_column,
    key_groups,
    new_checkpoint,
)
from state.contract.keygroups import crc32_of_texts
from state.lake import tables
from state.offline import compact as state_compact


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def pipeline(groups=None):
    built = (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
             .map(running_sum, state=0, state_type="json")  # text keys, as before key groups
             .write.to_delta("sums")).named("grouped")
    return built if groups is None else built.with_key_groups(groups)


def state_rows(spark, warehouse):
    return tables.read(spark, pipeline().layout(warehouse).state).toPandas()


def test_python_and_spark_put_every_key_in_the_same_group(spark):
    keys = [encode_key(k) for k in [*range(-50, 200), "é", "sensor-7", "", ("a", 1), ("ü", -3)]]
    frame = spark.createDataFrame([(k,) for k in keys], "key string")
    for groups in (1, 7, 256):
        spark_groups = [row[0] for row in frame.select(key_group_column(F.col("key"), groups)).collect()]
        assert spark_groups == [key_group(k, groups) for k in keys]
        assert key_groups(keys, groups).tolist() == spark_groups  # the bulk form agrees
    assert len({key_group(k, 256) for k in keys}) > 100  # spread, not clumped


def test_the_number_of_groups_is_an_integer_from_1_to_32768():
    assert [check_key_groups(groups) for groups in (1, 256, 32_768)] == [1, 256, 32_768]
    for bad in (0, -8, 32_769, 2.5, True, "8"):
        with pytest.raises(ValueError, match=rf"key groups must be an integer from 1 to 32768, got {bad!r}"):
            check_key_groups(bad)


def test_state_rows_carry_their_key_group_and_the_checkpoint_its_count(spark, tmp_path):
    """G is the first checkpoint's, kept by every later one whatever it asks for."""
    layout = PipelineLayout(str(tmp_path), "grouped")
    log = CheckpointLog(spark, layout)
    keys = [encode_key(f"key{n}") for n in range(40)]
    first = new_checkpoint(None, batch_id=1, offsets={}, tracked={}, markers={}, run_id="r",
                           key_groups=8)
    log.commit(first, pd.DataFrame({"operator": "running_sum", "key": keys,
                                    "value": [str(n) for n in range(40)], "deleted": False}))
    second = new_checkpoint(first, batch_id=2, offsets={}, tracked={}, markers={}, run_id="r",
                            key_groups=256)
    log.commit(second, pd.DataFrame({"operator": ["running_sum"], "key": [keys[0]], "value": ["7"],
                                     "deleted": [False]}))
    rows = tables.read(spark, layout.state).toPandas()
    state = rows[rows["operator"] == "running_sum"]
    assert len(state) == 41
    assert state["key_group"].tolist() == [key_group(k, 8) for k in state["key"]]
    assert len(set(state["key_group"])) > 1  # not every key in one group
    records = rows[rows["operator"] == CHECKPOINT_OPERATOR].sort_values("checkpoint_id")
    assert records["key_group"].isna().all()
    assert [json.loads(value)["key_groups"] for value in records["value"]] == [8, 8]
    assert log.latest().key_groups == 8


def test_the_number_of_groups_is_fixed_at_creation(spark, warehouse):
    pipeline(groups=8).publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline(groups=8).run_once(spark, warehouse)
    with pytest.raises(ConfigError, match=r"created with 8 key groups .* use \.with_key_groups\(8\)"):
        pipeline().run_once(spark, warehouse)
    for bad in (0, 40_000, 2.5):
        with pytest.raises(PipelineDefinitionError, match="key groups must be an integer"):
            pipeline(groups=bad)


def as_before_key_groups(spark, warehouse):
    """Write the pipeline's ``_state`` again as the release before key groups created it: five
    columns, statistics on ``checkpoint_id`` only, checkpoint records without ``key_groups``."""
    path = pipeline().layout(warehouse).state
    old_columns = [name for name in STATE_SCHEMA.names if name != "key_group"]
    rows = tables.read(spark, path).toPandas()[old_columns]
    records = rows["operator"] == CHECKPOINT_OPERATOR
    rows.loc[records, "value"] = [json.dumps({k: v for k, v in json.loads(text).items()
                                              if k != "key_groups"}) for text in rows.loc[records, "value"]]
    old = spark.createDataFrame(rows, ", ".join(f"{c} {t}" for c, t in zip(
        old_columns, ("string", "string", "string", "boolean", "long"))))
    shutil.rmtree(path)
    (old.write.format("delta").option("delta.dataSkippingStatsColumns", "checkpoint_id")
     .partitionBy("operator").save(path))
    assert "key_group" not in tables.read(spark, path).columns


def test_a_pipeline_checkpointed_before_key_groups_resumes_and_compaction_fills_them(spark, warehouse):
    old = pipeline()
    old.publish(spark, [{"k": "a", "x": 1}, {"k": "b", "x": 2}], warehouse)
    old.run_once(spark, warehouse)
    as_before_key_groups(spark, warehouse)

    old.publish(spark, [{"k": "a", "x": 10}, {"k": "c", "x": 5}], warehouse)
    old.run_once(spark, warehouse)
    assert old.read_sink(spark, "sums", warehouse)["total"].tolist() == [1, 2, 11, 5]
    rows = state_rows(spark, warehouse)
    state = rows[rows["operator"] == "running_sum"].sort_values(["checkpoint_id", "key"])
    assert state["key_group"].isna().tolist() == [True, True, False, False]  # old rows, then new
    assert json.loads(rows[rows["operator"] == CHECKPOINT_OPERATOR]
                      .sort_values("checkpoint_id")["value"].iloc[-1])["key_groups"] == 256

    before = sp.read_state(spark, old, "running_sum", warehouse=warehouse)
    sp.compact(spark, old, warehouse)
    state = state_rows(spark, warehouse).query("operator == 'running_sum'")
    assert state["key_group"].tolist() == [key_group(k, 256) for k in state["key"]]
    after = sp.read_state(spark, old, "running_sum", warehouse=warehouse)
    assert after[["key", "value"]].values.tolist() == before[["key", "value"]].values.tolist() == [
        ["a", 11], ["b", 2], ["c", 5]]


def test_compaction_writes_files_of_key_group_ranges(spark, warehouse):
    grouped = pipeline()
    grouped.publish(spark, [{"k": f"key{n}", "x": 1} for n in range(600)], warehouse)
    grouped.run_once(spark, warehouse)
    layout = grouped.layout(warehouse)
    assert state_compact(spark, layout, rows_per_file=100) == 601  # 600 keys + 1 record
    rows = tables.read(spark, layout.state).where("operator = 'running_sum'").withColumn(
        "file", F.input_file_name())
    files = rows.select("file").distinct().count()
    assert files >= 6
    first_range = rows.where("key_group < 32").select("file").distinct().count()
    assert first_range <= 2  # an eighth of the groups lies in one or two files, not in all
    assert sp.read_state(spark, grouped, "running_sum", warehouse=warehouse)["value"].tolist() == [1] * 600


@given(st.lists(st.text(), max_size=40), st.integers(0, 40),
       st.sampled_from([pa.string(), pa.large_string()]))
def test_groups_are_zlibs_crc32_of_the_keys_utf8_bytes(texts, start, kind):
    """Hashed all at once from Arrow's buffers, as zlib hashes each key's bytes: however the
    keys come (a list, a Series, Arrow arrays sliced, large or in chunks)."""
    expected = [zlib.crc32(text.encode("utf-8")) % 97 for text in texts]
    assert key_groups(texts, 97).tolist() == expected
    assert key_groups(pd.Series(texts, dtype=object), 97).tolist() == expected
    assert key_groups(pa.array(texts, kind).slice(start), 97).tolist() == expected[start:]
    chunks = pa.chunked_array([texts[:start], texts[start:]], kind)
    assert key_groups(chunks, 97).tolist() == expected
    assert crc32_of_texts(pa.array(texts, kind)).tolist() == [zlib.crc32(t.encode("utf-8")) for t in texts]
