"""A typed state's keys and values read back from ``_state`` without Spark
(``state.read.lookup.stored_typed_values``), and the key groups of typed keys
(``state.contract.keygroups.typed_key_groups``): the groups the keys' JSON text had, so a state keeps
its groups when it moves from JSON to typed storage.

The tables are written as a run's driver writes them: ``CheckpointLog.commit`` of pandas rows,
which delta-rs commits (the log never reaches for a Spark session on that path, so none is
started here)."""

import datetime as dt
import itertools

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from state import Checkpoint, CheckpointLog, PipelineLayout, delta_io, encode_key, key_groups
from state.contract.keygroups import MAX_KEY_GROUPS, typed_key_groups
from state.read.lookup import _files_to_read, _groups_to_read, stored_typed_values, stored_values

GROUPS = 256

# -- key groups of typed keys ------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
GROUP_COUNTS = st.integers(1, MAX_KEY_GROUPS)
# printable ASCII, '"' and '\' among it: most need no escape, some do (both ways of quoting)
ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126))
STRINGS = st.one_of(ASCII, st.text())


def by_json_text(keys: list, groups: int) -> list[int]:
    """The reference: each key's group as a JSON-stored key's, by the text encode_key gives it."""
    return key_groups([encode_key(key) for key in keys], groups).tolist()


@given(st.lists(INT64, max_size=50), GROUP_COUNTS)
def test_an_int_key_is_in_the_group_of_its_json_text(keys, groups):
    found = typed_key_groups(pa.array(keys, pa.int64()), groups)
    assert found.dtype == "int32" and found.tolist() == by_json_text(keys, groups)


@given(st.lists(STRINGS, max_size=30), GROUP_COUNTS, st.data())
def test_a_string_key_is_in_the_group_of_its_json_text(keys, groups, data):
    assert typed_key_groups(pa.array(keys, pa.string()), groups).tolist() == by_json_text(keys, groups)
    # however Arrow holds them: sliced (an offset into the buffers), large, in chunks
    start = data.draw(st.integers(0, len(keys)))
    assert typed_key_groups(pa.array(keys, pa.string()).slice(start), groups).tolist() == \
        by_json_text(keys[start:], groups)
    assert typed_key_groups(pa.array(keys, pa.large_string()), groups).tolist() == \
        by_json_text(keys, groups)
    chunks = pa.chunked_array([keys[:start], keys[start:]], pa.string())
    assert typed_key_groups(chunks, groups).tolist() == by_json_text(keys, groups)


def test_strings_that_json_escapes_are_hashed_as_escaped():
    keys = ["plain", "", 'q"uote', "back\\slash", "tab\t", "\x7f", "é", "\U0001f600", "日本"]
    assert [encode_key(key) for key in keys[3:7]] == ['"back\\\\slash"', '"tab\\t"', '"\\u007f"',
                                                      '"\\u00e9"']
    assert typed_key_groups(pa.array(keys), GROUPS).tolist() == by_json_text(keys, GROUPS)


@pytest.mark.parametrize("keys", [
    [True, False], [1.0, -0.0, 1e20, 2.5, float("nan"), float("inf")], [7, 2**64 - 1],
])
def test_other_keys_are_hashed_as_encode_key_writes_them(keys):
    array = pa.array(keys, pa.uint64()) if keys[-1] == 2**64 - 1 else pa.array(keys)
    assert typed_key_groups(array, GROUPS).tolist() == by_json_text(keys, GROUPS)


@pytest.mark.parametrize("kind", [pa.int64(), pa.string(), pa.bool_(), pa.float64()])
def test_no_keys_no_groups(kind):
    found = typed_key_groups(pa.array([], kind), GROUPS)
    assert found.dtype == "int32" and len(found) == 0


@pytest.mark.parametrize("keys", [pa.array([1, None]), pa.array(["a", None]),
                                  pa.chunked_array([["a"], [None]])])
def test_a_null_key_has_no_group(keys):
    with pytest.raises(ValueError, match=r"typed keys cannot be null \(position 1 of 2 is\)"):
        typed_key_groups(keys, GROUPS)


def test_a_key_encode_key_refuses_is_refused_too():
    moment = pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC"))
    with pytest.raises(TypeError, match=r"timestamp\[us, tz=UTC\] have no JSON text"):
        typed_key_groups(moment, GROUPS)


# -- reading a typed state back ----------------------------------------------------------------

#: Two typed states: ``sums`` (int keys, a float value) and ``users`` (string keys, a record
#: of two fields), with their value columns and the pandas types their rows hold them in.
VALUES = {"sums": {"v__sums": "Float64"}, "users": {"v__users__n": "Int64", "v__users__mean": "Float64"}}
KEY_TYPES = {"sums": pa.int64(), "users": pa.string()}
TYPED_COLUMNS = [pa.field("k__sums", pa.int64()), pa.field("v__sums", pa.float64()),
                 pa.field("k__users", pa.string()), pa.field("v__users__n", pa.int64()),
                 pa.field("v__users__mean", pa.float64())]

#: What each checkpoint changed in typed storage: per state, key -> value (a tuple of its
#: columns) or ``None``, a tombstone. Both states moved to typed storage at checkpoint 2.
SINCE = 2
TYPED = {
    2: {"sums": {1: (1.5,), 2: (2.5,), 3: (3.5,), -(2**63): (0.0,)},
        "users": {"a": (1, 1.0), "b": (2, 2.5), 'é"\\': (3, -1.0), "": (4, 4.0)}},
    3: {"sums": {2: (20.5,), 1: None, 4: (4.5,)},
        "users": {"a": (2, None), "b": None}},           # a record with a null field
    4: {"sums": {1: (100.0,), 3: None, 2**63 - 1: (7.0,)},  # 1 back after its deletion
        "users": {"a": (3, 3.0), "z": (26, 0.5)}},
}
#: JSON rows of the same states: their keys before the move (1 holds 10 there, 5 only there),
#: and a shared entry kept as JSON inside the typed state's partition after it.
JSON = {1: [("sums", "1", "10"), ("sums", "2", "20"), ("sums", "5", "50"),
            ("users", '"a"', '{"n":9,"mean":9.0}'), ("users", '"q"', '{"n":1,"mean":1.0}')],
        3: [("sums", '"__watermark__"', "123")]}
#: Keys asked for: some stored, some deleted, one only ever JSON (5, "q"), some never stored.
ASKED = {"sums": [1, 2, 3, 5, 2**63 - 1, 12345], "users": ["a", "b", "q", 'é"\\', "", "nobody"]}


def json_rows(entries: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Rows of ``(state, key text, value text)`` as JSON storage writes them."""
    return pd.DataFrame({"operator": [state for state, _, _ in entries],
                         "key": [key for _, key, _ in entries],
                         "value": [value for _, _, value in entries], "deleted": False})


def typed_rows(state: str, changes: dict) -> pd.DataFrame:
    """A checkpoint's rows of typed state ``state`` as typed storage writes them: no key or
    value text, the key in ``k__<state>``, the value in its columns, the group given."""
    keys = list(changes)
    rows = pd.DataFrame({
        "operator": state, "key": None, "value": None,
        "deleted": [changes[key] is None for key in keys],
        "key_group": pd.array(typed_key_groups(pa.array(keys, KEY_TYPES[state]), GROUPS), dtype="Int32"),
        f"k__{state}": pd.array(keys, dtype="Int64" if state == "sums" else object)})
    for position, (column, kind) in enumerate(VALUES[state].items()):
        rows[column] = pd.array([None if changes[key] is None else changes[key][position]
                                 for key in keys], dtype=kind)
    return rows


def checkpoint_rows(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts as one frame, each typed column of its own type (not the floats or objects
    a concatenation fills another part's missing column with)."""
    kinds = {"deleted": bool, "key_group": "Int32", "k__sums": "Int64", "k__users": object,
             **VALUES["sums"], **VALUES["users"]}
    rows = pd.concat(parts, ignore_index=True)
    return rows.astype({column: kind for column, kind in kinds.items() if column in rows})


def commit(layout: PipelineLayout, checkpoint_id: int, rows: pd.DataFrame) -> None:
    """Commit ``rows`` as checkpoint ``checkpoint_id``, as a run's driver does (delta-rs
    commits them: no Spark session is used)."""
    checkpoint = Checkpoint(checkpoint_id=checkpoint_id, batch_id=checkpoint_id, run_id="test")
    CheckpointLog(None, layout).commit(checkpoint, rows)  # type: ignore[arg-type]


def rows_of(checkpoint_id: int) -> pd.DataFrame:
    """What checkpoint ``checkpoint_id`` of :data:`JSON` and :data:`TYPED` changed."""
    parts = [json_rows(JSON[checkpoint_id])] if checkpoint_id in JSON else []
    parts += [typed_rows(state, changes) for state, changes in TYPED.get(checkpoint_id, {}).items()]
    return checkpoint_rows(parts)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> str:
    """``_state`` after :data:`JSON` and :data:`TYPED`: a JSON checkpoint, the typed columns
    added, then three checkpoints with typed rows. Its path."""
    layout = PipelineLayout(str(tmp_path_factory.mktemp("typed")), "typed")
    for checkpoint_id in sorted({*JSON, *TYPED}):
        commit(layout, checkpoint_id, rows_of(checkpoint_id))
        if checkpoint_id == 1:  # the move to typed storage: its columns come first
            assert delta_io.add_columns(layout.state, TYPED_COLUMNS)
    return layout.state


@pytest.fixture(scope="module")
def compacted(tmp_path_factory) -> str:
    """The rows of :func:`history` in one file per state, as compaction leaves them: the
    files' statistics span every checkpoint, so only the rows' own ids tell them apart."""
    rows = pd.concat([rows_of(checkpoint_id).assign(checkpoint_id=checkpoint_id)
                      for checkpoint_id in sorted({*JSON, *TYPED})], ignore_index=True)
    schema = pa.schema([("operator", pa.string()), ("key", pa.string()), ("value", pa.string()),
                        ("deleted", pa.bool_()), ("checkpoint_id", pa.int64()),
                        ("key_group", pa.int32()), *TYPED_COLUMNS])
    path = str(tmp_path_factory.mktemp("compacted") / "_state")
    write_deltalake(path, pa.Table.from_pandas(rows, schema=schema, preserve_index=False),
                    partition_by=["operator"])
    return path


def expected(state: str, as_of: int, since: int, keys: list | None,
             within: tuple[int, int] | None) -> dict:
    """The oracle: each key's newest change up to ``as_of`` from ``since`` on, if not a tombstone."""
    newest: dict = {}
    for checkpoint_id in sorted(TYPED):
        if since <= checkpoint_id <= as_of:
            newest.update(TYPED[checkpoint_id][state])
    return {key: value for key, value in newest.items() if value is not None
            and (keys is None or key in keys)
            and (within is None or within[0] <= group_of(state, key) < within[1])}


def group_of(state: str, key) -> int:
    return int(typed_key_groups(pa.array([key], KEY_TYPES[state]), GROUPS)[0])


def read(path: str, state: str, as_of: int, keys: list | None = None, since: int = SINCE,
         within: tuple[int, int] | None = None) -> dict:
    """``stored_typed_values`` of ``state`` as ``{key: (value columns…)}``."""
    asked = None if keys is None else pa.array(keys, KEY_TYPES[state])
    found = stored_typed_values(path, state, as_of, asked, GROUPS, f"k__{state}", list(VALUES[state]),
                                since=since, within=within)
    assert found is not None
    rows = found.rows.to_pylist()
    assert len(rows) == len({row[f"k__{state}"] for row in rows})  # one row per key
    if keys is not None:  # in the order asked, each key placed where it was asked
        assert [row[f"k__{state}"] for row in rows] == [key for key, held in zip(keys, found.holding) if held]
    return {row[f"k__{state}"]: tuple(row[column] for column in VALUES[state]) for row in rows}


@pytest.mark.parametrize("table", ["history", "compacted"])
@pytest.mark.parametrize("state", ["sums", "users"])
def test_every_checkpoint_reads_as_the_history_says(request, table, state):
    path = request.getfixturevalue(table)
    for as_of, since, asked, within in itertools.product(
            (1, 2, 3, 4), (0, SINCE, 3), (None, ASKED[state]), (None, (0, 128), (128, 256))):
        assert read(path, state, as_of, asked, since, within) == \
            expected(state, as_of, since, asked, within), (as_of, since, asked, within)


def test_newest_wins_deleted_keys_are_absent_and_json_rows_are_not_read(history):
    assert read(history, "sums", 4) == {1: (100.0,), 2: (20.5,), 4: (4.5,), -(2**63): (0.0,),
                                        2**63 - 1: (7.0,)}
    assert read(history, "sums", 3) == {2: (20.5,), 3: (3.5,), 4: (4.5,), -(2**63): (0.0,)}
    assert read(history, "sums", 1) == {} == read(history, "sums", 4, [5])  # only JSON there
    assert read(history, "sums", 4, []) == {}  # no key asked for: no file holds one
    assert stored_values(history, "sums", 4, [], GROUPS).rows.num_rows == 0  # JSON keys alike
    assert read(history, "users", 4, ["a", "b", "q"]) == {"a": (3, 3.0)}
    assert read(history, "users", 3, ["a"]) == {"a": (2, None)}
    # from 3 on only: what checkpoint 2 wrote and nothing changed later does not count
    assert read(history, "users", 4, since=3) == {"a": (3, 3.0), "z": (26, 0.5)}


def test_the_json_rows_of_a_partition_with_typed_rows_read_as_json(history):
    found = stored_values(history, "sums", 4, None, GROUPS).rows
    assert dict(zip(found["key"].to_pylist(), found["value"].to_pylist())) == \
        {"1": "10", "2": "20", "5": "50", '"__watermark__"': "123"}


def test_the_columns_keep_their_stored_types(history):
    found = stored_typed_values(history, "users", 4, None, GROUPS, "k__users",
                                ["v__users__n", "v__users__mean"], since=SINCE).rows
    assert found.schema == pa.schema([("k__users", pa.string()), ("v__users__n", pa.int64()),
                                      ("v__users__mean", pa.float64())])
    nothing = stored_typed_values(history, "sums", 1, pa.array([1]), GROUPS, "k__sums", ["v__sums"]).rows
    assert nothing.num_rows == 0 and nothing.schema == pa.schema([("k__sums", pa.int64()),
                                                                  ("v__sums", pa.float64())])


def typed_files_to_read(files, state, as_of, keys, since, within):
    """The files a read of ``state``'s ``keys`` (``None``: all) as of ``as_of`` chooses."""
    needed = _groups_to_read(keys, within, lambda asked: typed_key_groups(asked, GROUPS))
    return _files_to_read(files, state, (since, as_of), needed)


def test_since_skips_the_files_of_older_checkpoints(history):
    files = delta_io.file_statistics(history)
    ours = files.filter(pc.equal(files["partition.operator"], "sums"))
    every = set(ours["path"].to_pylist())
    json_era = set(ours.filter(pc.less(ours["max.checkpoint_id"], SINCE))["path"].to_pylist())
    assert len(every) == 4 and len(json_era) == 1  # checkpoints 1 (JSON), 2, 3, 4
    assert set(typed_files_to_read(files, "sums", 4, None, 0, None)) == every
    assert set(typed_files_to_read(files, "sums", 4, None, SINCE, None)) == every - json_era
    assert typed_files_to_read(files, "sums", 1, None, SINCE, None) == []


@pytest.fixture(scope="module")
def one_key_per_checkpoint(tmp_path_factory) -> str:
    """``_state`` whose checkpoints 2..13 each change one key of each typed state (a file
    per state and checkpoint, of one key group each). Its path."""
    layout = PipelineLayout(str(tmp_path_factory.mktemp("pruned")), "pruned")
    # the first commit makes the table (of the untyped columns), which then takes the typed ones
    commit(layout, 1, pd.DataFrame())
    assert delta_io.add_columns(layout.state, TYPED_COLUMNS)
    for checkpoint_id in range(2, 14):
        commit(layout, checkpoint_id, checkpoint_rows([
            typed_rows("sums", {checkpoint_id * 1000: (float(checkpoint_id),)}),
            typed_rows("users", {f"user-{checkpoint_id}": (checkpoint_id, 0.5)})]))
    return layout.state


@pytest.mark.parametrize("state", ["sums", "users"])
def test_a_few_keys_read_only_the_files_of_their_groups(one_key_per_checkpoint, state):
    path = one_key_per_checkpoint
    files = delta_io.file_statistics(path)
    stored = [checkpoint_id * 1000 if state == "sums" else f"user-{checkpoint_id}"
              for checkpoint_id in range(2, 14)]
    every = typed_files_to_read(files, state, 13, None, 0, None)
    assert len(every) == 12
    for asked in ([stored[3]], [stored[0], stored[7]], [stored[5], "never" if state == "users" else 7]):
        keys = pa.array(asked, KEY_TYPES[state])
        chosen = typed_files_to_read(files, state, 13, keys, 0, None)
        # only files whose one group is one of the keys' (the stored keys' own files among them)
        holding = {group_of(state, key) for key in asked}
        groups = files.filter(pc.is_in(files["path"], pa.array(chosen)))["min.key_group"]
        assert set(groups.to_pylist()) <= holding and len(chosen) < len(every)
        assert set(read(path, state, 13, asked, since=0)) == set(asked) & set(stored)
    within = (0, 64)
    chosen = typed_files_to_read(files, state, 13, None, 0, within)
    low = {key for key in stored if group_of(state, key) < 64}
    assert len(chosen) == len(low) and 0 < len(low) < len(stored)
    assert set(read(path, state, 13, since=0, within=within)) == low


def test_a_table_without_the_state_s_columns_holds_none_of_its_rows(tmp_path):
    layout = PipelineLayout(str(tmp_path), "json")
    commit(layout, 1, json_rows(JSON[1]))
    found = stored_typed_values(layout.state, "sums", 1, pa.array([1]), GROUPS, "k__sums", ["v__sums"]).rows
    assert found.num_rows == 0 and found.column_names == ["k__sums", "v__sums"]
    assert found.schema.field("v__sums").type == pa.null()  # not in the table: no type known
    assert stored_typed_values(str(tmp_path / "nothing"), "sums", 1, None, GROUPS, "k__sums",
                               ["v__sums"]) is None  # no table delta-rs reads: as stored_values


def test_a_null_key_is_refused(history):
    with pytest.raises(ValueError, match="a key is null, and no typed key is"):
        stored_typed_values(history, "sums", 4, pa.array([1, None]), GROUPS, "k__sums", ["v__sums"])
