"""Lineage: every sink is an asset downstream of its pipeline, and a pipeline reading another's
table (tables over tables, a Delta sink, a Kafka sink's topic) depends on that sink's asset, and
runs by declarative automation once it is updated."""

import dagster as dg

import ops as sp
from assets import (
    SparkResource,
    WarehouseResource,
    make_pipeline_assets,
    needs_sensor,
    upstream_keys,
)

EVERY_ASSET = dg.AssetSelection.all()  # the tester's default selection warns of a beta parameter


def _deps(assets, name):
    return sorted(dep.asset_key.to_user_string()
                  for dep in assets[name].specs_by_key[dg.AssetKey(name)].deps)


def test_a_table_over_a_table_depends_on_it_and_runs_once_it_is_updated(spark, warehouse):
    catalog = sp.Catalog()
    catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    sold = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
                  catalog=catalog, warehouse=warehouse)
    by_count = sp.sql("CREATE TABLE by_count AS SELECT n, COUNT(*) AS titles FROM sold GROUP BY n",
                      catalog=catalog, warehouse=warehouse)
    assets = make_pipeline_assets([sold, by_count], warehouse=warehouse)
    assert _deps(assets, "by_count") == ["sold/sold"] and _deps(assets, "sold") == []
    assert (needs_sensor(sold, [sold, by_count], warehouse),
            needs_sensor(by_count, [sold, by_count], warehouse)) == (True, False)
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=warehouse)}
    defs = dg.Definitions(assets=list(assets.values()), resources=resources)

    def materialise(instance, name):
        selection = dg.AssetSelection.assets(name).required_multi_asset_neighbors()
        assert dg.materialize(list(assets.values()), selection=selection,
                              instance=instance, resources=resources).success

    sold.publish(spark, [{"title": "A"}, {"title": "A"}, {"title": "B"}], warehouse)
    with dg.instance_for_test() as instance:
        before = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                   asset_selection=EVERY_ASSET)
        assert before.total_requested == 0  # sold/sold is missing
        materialise(instance, "sold")
        after = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                  asset_selection=EVERY_ASSET, cursor=before.cursor)
        assert after.get_num_requested(dg.AssetKey("by_count")) == 1 and after.total_requested == 1
        # what the automation sensor's run then does
        materialise(instance, "by_count")
    table = by_count.read_sink(spark, "by_count", warehouse)
    assert sorted(zip(table["n"], table["titles"])) == [(1, 1), (2, 1)]


def test_delta_sinks_and_kafka_topics_link_pipelines(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    schema = {"k": "string", "x": "long"}
    up = (sp.read.from_callback("in", key="k", schema=schema).write.to_delta("out")
          .write.to_kafka("moved", bootstrap="127.0.0.1:9092").write.to_console()).named("up")
    by_path = (sp.read.from_delta(up.table_path("out", warehouse), key="k")
               .write.to_delta("copy")).named("by_path")
    by_topic = (sp.read.from_kafka("moved", bootstrap="127.0.0.1:9092", schema=schema)
                .write.to_delta("copy")).named("by_topic")
    elsewhere = (sp.read.from_kafka("moved", bootstrap="10.0.0.9:9092", schema=schema)
                 .write.to_delta("copy")).named("elsewhere")
    joined = (sp.read.from_callback("in", key="k", schema=schema)
              .join_table(up.table_path("out", warehouse), on="k").write.to_delta("j")).named("joined")
    pipelines = [up, by_path, by_topic, elsewhere, joined]
    assets = make_pipeline_assets(pipelines, warehouse=warehouse)

    assert sorted(k.to_user_string() for k in assets["up"].keys) == ["up", "up/kafka_moved", "up/out"]
    specs = assets["up"].specs_by_key
    assert specs[dg.AssetKey(["up", "kafka_moved"])].kinds == {"kafka"}
    assert specs[dg.AssetKey(["up", "out"])].kinds == {"delta"}
    assert {key: [d.asset_key for d in specs[key].deps] for key in specs
            if key != dg.AssetKey("up")} == {dg.AssetKey(["up", "kafka_moved"]): [dg.AssetKey("up")],
                                             dg.AssetKey(["up", "out"]): [dg.AssetKey("up")]}
    assert _deps(assets, "by_path") == ["up/out"] and _deps(assets, "by_topic") == ["up/kafka_moved"]
    assert _deps(assets, "elsewhere") == []  # the same topic name on other brokers
    assert upstream_keys(joined, pipelines, warehouse) == [dg.AssetKey(["up", "out"])]
    assert needs_sensor(joined, pipelines, warehouse)  # its own inbox still needs one
    condition = specs_of(assets, "by_topic").automation_condition
    assert condition is not None and condition.get_label() == "eager"
    assert specs_of(assets, "elsewhere").automation_condition is None


def specs_of(assets, name):
    return assets[name].specs_by_key[dg.AssetKey(name)]
