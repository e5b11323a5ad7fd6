"""Time in a Spark ``StatefulProcessor`` run by ``transform_with_state``: TTL per variable
(Spark's rules: processing time, each list element and map entry on its own, expired values
invisible in the batch at their expiry and gone from storage once the key is woken), and event
time (rows at or below the watermark dropped before any call, the watermark handed in
``timerValues``)."""

import pandas as pd
import pytest
from pyspark.sql.streaming import StatefulProcessor

import ops as sp
from ops.errors import OperatorError
from ops.operators.processor_schema import variable_columns
from ops.testing import ManualClock, run_records
from state.read.queries import read_state

SCHEMA = {"k": "string", "page": "string", "ts": "timestamp"}


class RecentPages(StatefulProcessor):
    """What a key read before this batch's rows: its last page (a value with a 60 s TTL), the
    pages seen (a list, 60 s per element), visits per page (a map, 60 s per entry), and its
    count of rows ever (no TTL); then the batch's rows written to each."""

    def init(self, handle):
        self.last = handle.getValueState("last", "page string", ttlDurationMs=60_000)
        self.seen = handle.getListState("seen", "page string", ttlDurationMs=60_000)
        self.visits = handle.getMapState("visits", "page string", "n long", ttlDurationMs=60_000)
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows), ignore_index=True)
        read = {"k": key[0], "last": self.last.get()[0] if self.last.exists() else None,
                "seen": ",".join(page for (page,) in self.seen.get()),
                "visits": ",".join(f"{page}={n}" for (page,), (n,) in sorted(self.visits.iterator())),
                "count": self.count.get()[0] if self.count.exists() else 0}
        for page in frame["page"]:
            self.seen.appendValue((page,))
            held = self.visits.getValue((page,))
            self.visits.updateValue((page,), ((held[0] if held else 0) + 1,))
        self.last.update((frame["page"].iloc[-1],))
        self.count.update((read["count"] + len(frame),))
        yield pd.DataFrame([read])


def _pages(mode="ProcessingTime", processor=None, run="driver"):
    return (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1).group_by("k")
            .transform_with_state(processor or RecentPages(),
                                  "k string, last string, seen string, visits string, count long",
                                  time_mode=mode, name="pages")
            .write.to_delta("out")).named("ttl_pages").with_mode(run)


@pytest.mark.parametrize("run", ["driver", pytest.param("distributed", marks=pytest.mark.slow)])
def test_each_value_element_and_entry_expires_on_its_own_and_leaves_storage(spark, tmp_path, run):
    built, clock, warehouse = _pages(run=run), ManualClock("2026-01-01T00:00:00Z"), str(tmp_path)

    def visit(*pages):
        run = run_records(built, [{"k": "a", "page": page} for page in pages], spark=spark,
                          warehouse=warehouse, clock=clock)
        return run.outputs["out"].iloc[-1][["last", "seen", "visits", "count"]].tolist()

    assert visit("home") == [None, "", "", 0]
    clock.advance("30s")
    assert visit("cart") == ["home", "home", "home=1", 1]
    clock.advance("30s")  # "home" was written 60 s ago: expired in this very batch
    assert visit("home") == ["cart", "cart", "cart=1", 2]
    clock.advance("59s")  # the second "home" (written at 60 s) has 1 s left
    assert visit("pay") == ["home", "home", "home=1", 3]
    clock.advance("2min")  # nothing written since 119 s is alive at 239 s: a batch with no
    # input wakes the key at its earliest expiry and rewrites its record without them
    woken = run_records(built, spark=spark, warehouse=warehouse, clock=clock)
    assert woken.reports[-1].batches, "no batch ran for the key's expired values"
    assert {batch.mode for report in woken.reports for batch in report.batches} == {run}
    assert woken.state["pages.count"]["value"].tolist() == [(4,)]  # the one without a TTL
    assert all(woken.state[f"pages.{name}"].empty for name in ("last", "seen", "visits"))
    assert woken.state["pages__timers"].empty  # nothing left to wake it for


class Untimed(RecentPages):
    def init(self, handle):
        self.last = handle.getValueState("last", "page string", ttlDurationMs=0)


@pytest.mark.parametrize("mode, processor, message", [
    ("None", RecentPages(), r"getValueState\('last', ttlDurationMs=60000\): cannot use TTL in "
                            r"time_mode='none'; use time_mode='processing_time'"),
    ("ProcessingTime", Untimed(), "the TTL is a positive number of milliseconds"),
], ids=["no processing time", "not positive"])
def test_a_ttl_spark_refuses_is_refused_when_the_pipeline_is_defined(mode, processor, message):
    """As Spark's driver does, the processor's init is called once to see what it declares."""
    with pytest.raises(sp.PipelineDefinitionError, match=message):
        _pages(mode, processor)


class CountOnTime(StatefulProcessor):
    """Rows per key and the watermark each batch started with."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        total = (self.count.get()[0] if self.count.exists() else 0) + sum(map(len, rows))
        self.count.update((total,))
        yield pd.DataFrame({"k": [key[0]], "total": [total],
                            "watermark": [timerValues.getCurrentWatermarkInMs()]})


def test_event_time_drops_rows_at_or_below_the_watermark_before_any_call(spark, tmp_path):
    built = (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1)
             .with_watermark("ts", "2 seconds").group_by("k")
             .transform_with_state(CountOnTime(), "k string, total long, watermark long",
                                   time_mode="event_time")
             .write.to_delta("out")).named("late_rows")
    midnight = pd.Timestamp("2026-01-01T00:00:00Z").value // 1_000_000

    def batch(*rows):
        return [{"k": k, "page": "p", "ts": f"2026-01-01T00:00:{at:02d}Z"} for k, at in rows]

    run_records(built, batch(("a", 10), ("b", 3)), spark=spark, warehouse=str(tmp_path))
    run = run_records(built, batch(("a", 8), ("b", 9), ("b", 5)), spark=spark,
                      warehouse=str(tmp_path))  # the watermark is 8 s: a's 8 and b's 5 are late
    out = run.outputs["out"]
    assert out[["k", "total", "watermark"]].values.tolist() == [
        ["a", 1, 0], ["b", 1, 0], ["b", 2, midnight + 8_000]]  # 0: Spark's before any event


def test_with_watermark_names_a_missing_column_and_a_bad_delay(spark, tmp_path):
    stream = sp.read.from_callback("in", key="k", schema=SCHEMA)
    with pytest.raises(sp.PipelineDefinitionError, match=r"delay='soon' is not a duration"):
        stream.with_watermark("ts", "soon")
    built = (stream.with_watermark("when", "1s").group_by("k")
             .transform_with_state(CountOnTime(), "k string, total long, watermark long",
                                   time_mode="event_time").write.to_delta("out")).named("no_when")
    with pytest.raises(OperatorError, match=r"no event time column 'when' in the rows"):
        run_records(built, [{"k": "a", "page": "p", "ts": "2026-01-01T00:00:00Z"}], spark=spark,
                    warehouse=str(tmp_path))


def versioned(dropping: bool):
    """A processor whose second version deletes its variable ``old`` (Spark's way to retire
    one), keeping ``count``; one class name for both, as a redeployed processor keeps it."""

    class Versioned(StatefulProcessor):
        def init(self, handle):
            if dropping:
                handle.deleteIfExists("old")
            else:
                self.old = handle.getValueState("old", "page string")
            self.count = handle.getValueState("count", "n long")

        def handleInputRows(self, key, rows, timerValues):
            frame = pd.concat(list(rows), ignore_index=True)
            if not dropping:
                self.old.update((frame["page"].iloc[-1],))
            if key[0] != "c":
                self.count.update(((self.count.get()[0] if self.count.exists() else 0)
                                   + len(frame),))
            yield pd.DataFrame({"k": [key[0]], "n": [len(frame)]})

    return Versioned()


def _versioned(dropping, mode="driver"):
    return (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1).group_by("k")
            .transform_with_state(versioned(dropping), "k string, n long", name="visits")
            .write.to_delta("out")).named("versioned").with_mode(mode)


def test_delete_if_exists_drops_the_variable_from_every_key(spark, tmp_path):
    warehouse = str(tmp_path)
    rows = [{"k": k, "page": "home"} for k in "abc"]
    first = run_records(_versioned(False), rows, spark=spark, warehouse=warehouse)
    assert sorted(first.state["visits.old"]["key"]) == ["a", "b", "c"]
    second = run_records(_versioned(True), [{"k": "a", "page": "cart"}], spark=spark,
                         warehouse=warehouse)  # only a has rows: b and c are swept too
    held = dict(zip(second.state["visits.count"]["key"], second.state["visits.count"]["value"]))
    assert held == {"a": (2,), "b": (1,)}
    layout = _versioned(True).layout(warehouse)
    old = read_state(spark, layout, "visits.old",
                     entries=variable_columns("visits", "old", "page string", ttl=False))
    assert old.empty  # every key's "old" is gone


def test_delete_if_exists_outside_init_or_on_executors_is_refused(spark, tmp_path):
    with pytest.raises(sp.ConfigError, match=r"deletes state variables of every key "
                                             r"\(deleteIfExists\('old',\)\), which runs on the driver"):
        run_records(_versioned(True, mode="distributed"), [{"k": "a", "page": "p"}], spark=spark,
                    warehouse=str(tmp_path))

    class Late(CountOnTime):
        def handleInputRows(self, key, rows, timerValues):
            self.handle.deleteIfExists("count")
            yield from ()

        def init(self, handle):
            self.handle = handle

    built = (sp.read.from_callback("in", key="k", schema=SCHEMA).group_by("k")
             .transform_with_state(Late(), "k string").write.to_delta("out")).named("late_delete")
    with pytest.raises(OperatorError, match=r"deleteIfExists\('count'\): a variable is deleted "
                                            r"in init\(\)"):
        run_records(built, [{"k": "a", "page": "p"}], spark=spark, warehouse=str(tmp_path))
