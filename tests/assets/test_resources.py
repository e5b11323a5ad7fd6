"""The resources' defaults are the library's: one reading of the Spark master and one default
warehouse, shared by the Dagster resources and the code outside Dagster."""

import state.layout
from assets import SparkResource, WarehouseResource
from ops import SparkConfig
from state import resolve_warehouse


def test_the_resource_and_the_session_read_the_master_in_one_place(monkeypatch):
    monkeypatch.setenv("LAKESTREAM_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert SparkResource().master == SparkConfig.from_env().master == "spark://127.0.0.1:7077"
    # unset, both take the one default: changing it changes both (not set by name alone, so a
    # second copy of the default fails the comparison rather than the patch)
    monkeypatch.delenv("LAKESTREAM_SPARK_MASTER")
    monkeypatch.setattr(SparkConfig, "DEFAULT_MASTER", "local[3]", raising=False)
    assert SparkResource().master == SparkConfig.from_env().master == "local[3]"
    assert SparkConfig.MASTER_SETTING == "LAKESTREAM_SPARK_MASTER"  # the documented variable


def test_the_resource_s_default_warehouse_is_the_library_s(monkeypatch, tmp_path):
    monkeypatch.delenv("LAKESTREAM_WAREHOUSE", raising=False)
    elsewhere = str(tmp_path / "elsewhere")
    monkeypatch.setattr(state.layout, "DEFAULT_WAREHOUSE", elsewhere)
    assert WarehouseResource().path == elsewhere
    assert WarehouseResource().root == resolve_warehouse() == elsewhere
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", str(tmp_path / "set"))
    assert WarehouseResource().root == resolve_warehouse() == str(tmp_path / "set")
    assert state.layout.WAREHOUSE_SETTING == "LAKESTREAM_WAREHOUSE"  # the documented variable
