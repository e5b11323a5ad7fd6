"""A batch's shape never stops a pipeline: whichever of a statement's sources a batch holds
rows of (one side of a join only, the other only, both), every operator gets and gives the
columns its definition declares. Run for real, in driver and distributed mode, across runs."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops as sp
from ops import BatchScope
from ops.sources.merged import MergedSource
from tests.ops.runtime.same_results import comparable
from tests.ops.sql.test_ksql_semantics import Run, values

TEST = {"ID": "long", "NAME": "string", "VALUE": "long"}
TEST_TABLE = {"ID": "long", "F1": "string", "F2": "long"}
JOIN = ("CREATE STREAM j AS SELECT t.id, name, value, f1, f2 FROM test t "
        "LEFT JOIN test_table tt ON t.id = tt.id")


def catalog():
    found = sp.Catalog()
    found.register("test", sp.read.from_callback("test", schema=TEST))
    found.register("test_table", sp.read.from_callback("test_table", schema=TEST_TABLE),
                   primary_key="ID")
    return found


@pytest.mark.parametrize("mode", ["driver", "distributed"])
@pytest.mark.parametrize("first", ["test", "test_table"])
def test_a_stream_table_join_runs_on_through_batches_of_table_updates_only(spark, tmp_path, mode,
                                                                           first):
    """The issue's report: a batch holding only the table's rows (first or later) stopped the
    join's SELECT for good (its stream columns were missing)."""
    pipeline = sp.sql(JOIN, catalog=catalog()).named(f"shapes_{mode}").with_mode(mode)
    warehouse = str(tmp_path)
    rows = {"test": [{"ID": 1, "NAME": "a", "VALUE": 3}],
            "test_table": [{"ID": 1, "F1": "x", "F2": 2}]}
    order = [first, "test" if first == "test_table" else "test_table", "test_table", "test"]
    for number, source in enumerate(order):
        pipeline.publish(spark, [dict(row, VALUE=number) if source == "test" else row
                                 for row in rows[source]], warehouse, source=source)
        pipeline.run_once(spark, warehouse)
    out = pipeline.read_sink(spark, "j", warehouse)
    assert list(out.columns[:5]) == ["ID", "NAME", "VALUE", "F1", "F2"]
    seen = [(r.ID, r.NAME, r.VALUE, r.F1 if isinstance(r.F1, str) else None)
            for r in out.itertuples()]
    # the stream's rows, each with the table's row as it stood when it came
    assert seen == ([(1, "a", 1, "x"), (1, "a", 3, "x")] if first == "test_table"
                    else [(1, "a", 0, None), (1, "a", 3, "x")])


REAL_BATCHES = [{"test_table": [{"ID": 1, "F1": "x", "F2": 2}]},
                {"other": [{"ID": 1, "G1": "g"}, {"ID": 2, "G1": None}]},
                {"test_table": [{"ID": 2, "F1": "y", "F2": None}, {"ID": 1, "F1": None, "F2": None}],
                 "other": [{"ID": 2, "G1": "h"}]}]


@pytest.mark.parametrize("shape", ["table-table join", "stream-stream join"])
def test_one_sided_batches_run_alike_in_both_modes(spark, tmp_path, shape):
    """Batches of one side, then the other, then both, run for real: driver and distributed
    mode write the same rows, and the table-table join the reference's table."""
    sides = {"table-table join": ("test_table", "other"), "stream-stream join": ("events", "clicks")}
    renamed = dict(zip(("test_table", "other"), sides[shape]))
    got = {}
    for mode in ("driver", "distributed"):
        found = shape_catalog()
        compiled = sp.sql(SHAPES[shape], catalog=found)
        pipeline = compiled.named(f"sided_{mode}").with_mode(mode)
        warehouse = str(tmp_path / mode)
        for batch in REAL_BATCHES:
            for source, rows in batch.items():
                if shape == "stream-stream join":  # the streams' records: IDs and times
                    rows = [{"ID": r["ID"], "NAME": "n", "VALUE": r["ID"],
                             "TS": (T0 + pd.Timedelta(seconds=r["ID"])).isoformat()} for r in rows]
                pipeline.publish(spark, rows, warehouse, source=renamed[source])
            pipeline.run_once(spark, warehouse)
        got[mode] = pipeline.read_sink(spark, pipeline.sinks[0].name, warehouse)
        assert [c for c in got[mode].columns if not c.startswith("_")] == \
            _declared_columns(compiled, found)
    pd.testing.assert_frame_equal(comparable(got["distributed"]), comparable(got["driver"]))
    if shape == "table-table join":  # ID 1 deleted on the left; ID 2 on both sides
        assert values(got["driver"], "ID", "F1", "G1") == [(2, "y", "h")]


def test_a_qualified_star_stands_for_that_sides_columns():
    found = catalog()
    assert sp.sql("CREATE STREAM s AS SELECT t.* FROM test t", catalog=found) \
        .stream.operators[-1].fn.__self__.names == ("ID", "NAME", "VALUE")
    joined = sp.sql("CREATE STREAM s2 AS SELECT t.*, tt.f1 FROM test t "
                    "LEFT JOIN test_table tt ON t.id = tt.id", catalog=found)
    assert joined.stream.operators[-1].fn.__self__.names == ("ID", "NAME", "VALUE", "F1")
    with pytest.raises(sp.SqlError, match=r"no source x in this query \(it reads test\)"):
        sp.sql("CREATE STREAM s3 AS SELECT x.* FROM test t", catalog=found)
    with pytest.raises(sp.SqlError, match="SELECT \\* is not supported in a table query"):
        sp.sql("CREATE TABLE s4 AS SELECT t.*, COUNT(*) AS n FROM test t GROUP BY id",
               catalog=found)


# -- the invariant, generatively --------------------------------------------------------------
# Every statement shape the docs show, over batches drawn as any subset of its sources (one
# side, the other, both, none), with nulls anywhere and restarts between batches: each batch's
# output has the columns the statement declares, and where a brute-force reference is cheap
# the rows (or the table they build) are the reference's. The operators run as driver mode
# runs them, state in memory and encoded on restart (the Spark tests above run the join for
# real in both modes).

EVENTS = {"ID": "long", "NAME": "string", "VALUE": "long", "TS": "timestamp"}
OTHER = {"ID": "long", "G1": "string"}
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def shape_catalog():
    found = catalog()
    found.register("other", sp.read.from_callback("other", schema=OTHER), primary_key="ID")
    found.register("events", sp.read.from_callback("events", schema=EVENTS), timestamp="TS")
    found.register("clicks", sp.read.from_callback("clicks", schema=EVENTS), timestamp="TS")
    return found


SHAPES = {
    "projection": "CREATE STREAM p AS SELECT id, value * 2 AS twice, UCASE(name) AS upper FROM test",
    "filter": "CREATE STREAM f AS SELECT * FROM test WHERE value > 2",
    "stream-table left join": JOIN,
    "stream-table inner join": JOIN.replace("LEFT JOIN", "JOIN"),
    "table-table join": "CREATE TABLE tt AS SELECT a.id, f1, g1 FROM test_table a JOIN other b "
                        "ON a.id = b.id",
    "stream aggregate": "CREATE TABLE agg AS SELECT name, COUNT(*) AS n, SUM(value) AS total "
                        "FROM test GROUP BY name",
    "table aggregate": "CREATE TABLE tagg AS SELECT f1, COUNT(*) AS n, SUM(f2) AS total "
                       "FROM test_table GROUP BY f1",
    "tumbling window": "CREATE TABLE w AS SELECT name, COUNT(*) AS n FROM events "
                       "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY name EMIT CHANGES",
    "stream-stream join": "CREATE STREAM ss AS SELECT e.id, e.value, c.name FROM events e "
                          "LEFT JOIN clicks c WITHIN 1 MINUTE ON e.id = c.id",
}

FIELDS = {"test": TEST, "test_table": TEST_TABLE, "other": OTHER, "events": EVENTS,
          "clicks": EVENTS}


def records_of(source):
    """Records of ``source``: few keys, and any field but the key may be null."""
    values = {"long": st.one_of(st.none(), st.integers(0, 5)),
              "string": st.one_of(st.none(), st.sampled_from(["a", "b"])),
              "timestamp": st.integers(0, 150).map(
                  lambda s: (T0 + pd.Timedelta(seconds=s)).isoformat())}
    fields = {name: st.integers(1, 3) if name == "ID" else values[kind]
              for name, kind in FIELDS[source].items()}
    return st.lists(st.fixed_dictionaries(fields), max_size=3)


class ShapedRun(Run):
    """A compiled statement's operators over batches made as its source makes them."""

    def feed_parts(self, parts):
        source = self.pipeline.source
        frames = {}
        for part in source.parts:
            if part.name in parts:
                checked = [part.schema.check(record) for record in parts[part.name]]
                frames[part.name] = part.schema.frame(checked, list(range(len(checked))))
        if isinstance(source, MergedSource):
            frame = source.combined(frames)
        else:
            frame = frames.get(source.name, source.schema.frame([], []))
        self.batch += 1
        scope = BatchScope("p", self.batch, (), self.store)
        for op in self.pipeline.stream.operators:
            frame = op.apply(scope, frame)
        return frame.reset_index(drop=True)


def batches_of(sources):
    """Batches, each holding records of any subset of ``sources`` (none included)."""
    batch = st.fixed_dictionaries({}, optional={name: records_of(name) for name in sources})
    return st.lists(st.tuples(batch, st.booleans()), min_size=1, max_size=4)


def sources_of(pipeline):
    return [part.name for part in pipeline.source.parts]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_batch_shape_gives_the_declared_columns(shape, data):
    found = shape_catalog()
    pipeline = sp.sql(SHAPES[shape], catalog=found)
    declared = _declared_columns(pipeline, found)
    reference = Reference(shape)
    run = ShapedRun(pipeline)
    for parts, restart in data.draw(batches_of(sources_of(pipeline))):
        out = run.feed_parts(parts)
        assert [c for c in out.columns if not c.startswith("_")] == declared, parts
        reference.check(parts, out)
        if restart:
            run.restart()


def _declared_columns(pipeline, found):
    """The statement's output columns: a table's as the catalog records them, a stream's
    SELECT list."""
    if found.has_table(pipeline.name):
        return list(found.table(pipeline.name).columns)
    return list(pipeline.stream.operators[-1].fn.__self__.names)


class Reference:
    """A brute-force model of a shape's results where one is cheap: a stream's rows batch by
    batch, or the table its changes build (keys with their latest values)."""

    def __init__(self, shape):
        self.shape = shape
        self.tables = {"test_table": {}, "other": {}}  # a TABLE source's latest row per ID
        self.rows = []  # every stream record so far
        self.built = {}  # the table the output's changes built: key -> row

    def check(self, parts, out):
        for name in ("test_table", "other"):
            for record in parts.get(name, []):
                values = {k: v for k, v in record.items() if k != "ID"}
                if all(v is None for v in values.values()):
                    self.tables[name].pop(record["ID"], None)  # a tombstone
                else:
                    self.tables[name][record["ID"]] = values
        events = parts.get("test", [])
        self.rows += parts.get("test", []) + parts.get("events", [])
        check = getattr(self, "_" + self.shape.replace(" ", "_").replace("-", "_"), None)
        if check is not None:
            check(events, out)

    # -- streams: the batch's rows ------------------------------------------------------------
    def _projection(self, events, out):
        want = [(r["ID"], None if r["VALUE"] is None else r["VALUE"] * 2,
                 None if r["NAME"] is None else r["NAME"].upper()) for r in events]
        assert values(out, "ID", "twice", "upper") == want

    def _filter(self, events, out):
        want = [(r["ID"], r["NAME"], r["VALUE"]) for r in events
                if r["VALUE"] is not None and r["VALUE"] > 2]
        assert values(out, "ID", "NAME", "VALUE") == want

    def _stream_table_left_join(self, events, out, inner=False):
        # no event times: a batch's table updates come before its events
        want = []
        for r in events:
            row = self.tables["test_table"].get(r["ID"])
            if row is not None or not inner:
                row = row or {"F1": None, "F2": None}
                want.append((r["ID"], r["NAME"], r["VALUE"], row["F1"], row["F2"]))
        assert values(out, "ID", "NAME", "VALUE", "F1", "F2") == want

    def _stream_table_inner_join(self, events, out):
        self._stream_table_left_join(events, out, inner=True)

    # -- tables: what the changes built ---------------------------------------------------------
    def _apply(self, out, keys):
        for row in out.astype(object).to_dict("records"):
            key = tuple(row[k] for k in keys)
            if row["_change"] == "delete":
                self.built.pop(key, None)
            else:
                self.built[key] = {k: None if pd.isna(v) else v for k, v in row.items()
                                   if not k.startswith("_")}

    def _built(self, *columns):
        return sorted(tuple(row[c] for c in columns) for row in self.built.values())

    def _table_table_join(self, events, out):
        self._apply(out, ("ID",))
        left, right = self.tables["test_table"], self.tables["other"]
        assert self._built("ID", "F1", "G1") == sorted(
            (key, left[key]["F1"], right[key]["G1"]) for key in left.keys() & right.keys())

    def _stream_aggregate(self, events, out):
        self._apply(out, ("NAME",))
        assert self._built("NAME", "n", "total") == _grouped(
            [(r["NAME"], r["VALUE"]) for r in self.rows])

    def _table_aggregate(self, events, out):
        self._apply(out, ("F1",))
        want = _grouped([(row["F1"], row["F2"]) for row in self.tables["test_table"].values()])
        # a group whose last row left it may stay with a count of 0
        assert [row for row in self._built("F1", "n", "total") if row[1] != 0] == want

    def _tumbling_window(self, events, out):
        self._apply(out, ("NAME", "window_start"))
        minute = [(r["NAME"], pd.Timestamp(r["TS"]).floor("1min")) for r in self.rows]
        counts = pd.Series([key for key in minute if key[0] is not None], dtype=object)
        want = sorted((name, start, n) for (name, start), n in counts.value_counts().items())
        assert sorted((r["NAME"], pd.Timestamp(r["window_start"]), r["n"])
                      for r in self.built.values()) == want


def _grouped(pairs):
    """(group, count, sum of the non-null values or None) per non-null group, sorted."""
    groups = {}
    for group, value in pairs:
        if group is not None:
            groups.setdefault(group, []).append(value)
    return sorted((group, len(vals), sum(v for v in vals if v is not None)
                   if any(v is not None for v in vals) else None)
                  for group, vals in groups.items())
