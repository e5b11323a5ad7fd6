"""Which paths delta-rs serves (state.delta_io.stores), and what the package answers for a path
it does not serve: ``None`` (``False`` for a creation), so the caller goes to Spark."""

import pandas as pd
import pytest

from state import delta_io


@pytest.mark.parametrize("path", ["/tmp/wh/p/_state", "file:/tmp/wh", "hdfs://nn/wh"])
def test_only_object_stores_go_to_delta_rs(path):
    assert not delta_io.on_object_store(path)




@pytest.mark.parametrize("spark_io", [False, True])
def test_a_path_delta_rs_does_not_serve_is_left_to_spark(monkeypatch, spark_io):
    """HDFS, or an object store while :data:`IO_SETTING` says ``spark``: no call reaches a store."""
    path = "hdfs://nn/wh/t"
    if spark_io:
        monkeypatch.setenv(delta_io.IO_SETTING, "spark")
        path = "s3a://lake/wh/t"
    assert not delta_io.serves(path)
    creation = delta_io.Creation(({"name": "k", "type": "long", "nullable": True, "metadata": {}},))
    rows = pd.DataFrame({"k": [1], "c": ["insert"]})
    assert delta_io.latest_version(path) is None and delta_io.recent_metadata(path) is None
    assert delta_io.schema_json(path) is None and delta_io.metadata_at(path, 0) is None
    assert delta_io.feed_on(path) is None and delta_io.file_schema(path) is None
    assert delta_io.file_statistics(path) is None
    assert delta_io.append(rows[["k"]], path, create=creation) is None
    assert delta_io.upsert(rows, path, delta_io.Upsert(("k",), version="k", change="c"),
                           creation=creation) is None
    assert delta_io.create(path, creation) is False
