"""Nullable columns added to a table in a commit of their own (state.delta_io.columns_added),
locally and on S3: rows keep their values, old files read the new columns as nulls, appends
then carry them, and racing writers both succeed."""

import pandas as pd
import pyarrow as pa
import pytest

from state import delta_io
from state.delta_io import Creation
from tests.state.delta_io.racing import COLUMN_ADDER, racing

BASE = Creation(({"name": "key", "type": "string", "nullable": True, "metadata": {}},
                 {"name": "checkpoint_id", "type": "long", "nullable": True, "metadata": {}}))
TYPED = [pa.field("k__sum", pa.int64()), pa.field("v__sum", pa.float64()),
         pa.field("v__seen", pa.timestamp("us", tz="UTC"))]


@pytest.fixture(params=["local", "s3"])
def path(request, tmp_path):
    if request.param == "s3":
        return f"{request.getfixturevalue('s3_warehouse')}/widened"
    return str(tmp_path / "widened")


def test_columns_are_added_once_and_old_rows_read_them_as_nulls(path):
    delta_io.append(pd.DataFrame({"key": ["a"], "checkpoint_id": [1]}), path, create=BASE)

    assert delta_io.add_columns(path, TYPED)
    version = delta_io.latest_version(path)
    assert delta_io.add_columns(path, TYPED[:1])  # there already: nothing committed
    assert delta_io.latest_version(path) == version == 1

    typed = pd.DataFrame({"key": [None], "checkpoint_id": [2], "k__sum": [7], "v__sum": [1.5],
                          "v__seen": [pd.Timestamp("2026-01-01", tz="UTC")]})
    assert delta_io.append(typed, path)  # a blind append with the new columns
    rows = delta_io.table(path).to_pandas().sort_values("checkpoint_id")
    assert rows["k__sum"].tolist()[0] is None or pd.isna(rows["k__sum"].tolist()[0])
    assert rows["v__sum"].tolist()[1] == 1.5 and rows["key"].tolist()[0] == "a"
    schema = delta_io.table(path).schema().to_arrow()
    assert [(f.name, f.type) for f in schema][2:] == [(f.name, f.type) for f in TYPED]


def test_two_processes_adding_columns_at_once_both_succeed(path):
    delta_io.append(pd.DataFrame({"key": ["a"], "checkpoint_id": [1]}), path, create=BASE)

    racing(COLUMN_ADDER, path, ("a", "b"), 4)

    names = {f.name for f in delta_io.table(path).schema().to_arrow()}
    assert names == {"key", "checkpoint_id", *(f"shared_{i}" for i in range(4)),
                     *(f"own_{w}_{i}" for w in "ab" for i in range(4))}
    assert delta_io.table(path).to_pandas()["key"].tolist() == ["a"]


def test_a_column_there_with_another_type_or_an_unplain_type_is_refused_by_name(tmp_path):
    path = str(tmp_path / "t")
    delta_io.append(pd.DataFrame({"key": ["a"], "checkpoint_id": [1]}), path, create=BASE)
    with pytest.raises(ValueError, match="column 'KEY' exists with type .*string.*, not long"):
        delta_io.add_columns(path, [pa.field("KEY", pa.int64())])
    with pytest.raises(ValueError, match="column 'v__list': .* is not a plain Delta type"):
        delta_io.add_columns(path, [pa.field("v__list", pa.list_(pa.int64()))])
    with pytest.raises(FileNotFoundError, match="no Delta table"):
        delta_io.add_columns(str(tmp_path / "none"), TYPED)
    assert delta_io.latest_version(path) == 0
