"""Asset checks are definitions of their own: each runs alone (as from the UI's Checks tab) and
says what the warehouse holds, passing and failing for real."""

import dagster as dg
from pyspark.sql import functions as F

import ops as sp
from assets import (
    CHECKPOINT_CHECK,
    DEAD_LETTER_CHECK,
    GLOBAL_TABLE_CHECK,
    SparkResource,
    WarehouseResource,
    make_pipeline_asset,
    make_pipeline_checks,
)
from tests.helpers import spark_jobs


def _resources(warehouse):
    return {"spark": SparkResource(master="local[2]"), "warehouse": WarehouseResource(path=warehouse)}


def _check_key(pipeline, name):
    return dg.AssetCheckKey(dg.AssetKey(pipeline.id), name)


def _run_checks(definitions, instance, warehouse, *keys, run_config=None):
    """Execute only the checks ``keys``, nothing else; their evaluations by check name."""
    result = dg.materialize(definitions, instance=instance, resources=_resources(warehouse),
                            selection=dg.AssetSelection.checks(*keys), run_config=run_config)
    assert result.success
    assert not result.get_asset_materialization_events()  # the asset did not run
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _audited():
    audit = sp.global_table("audit", index="idx")

    def keep(data):
        audit.append(data[["k", "x"]])
        return data

    return (sp.read.from_callback("events", key="k", schema={"k": "string", "x": "long"})
            .map(keep).write.to_delta("out")).named("audited").with_hooks(audit)


def test_checks_run_alone_and_fail_on_a_global_table_row_beyond_its_marker(spark, warehouse):
    pipeline = _audited()
    definitions = [make_pipeline_asset(pipeline), *make_pipeline_checks(pipeline)]
    pipeline.publish(spark, [{"k": "a", "x": 1}, {"k": "b", "x": 2}], warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        ran = dg.materialize(definitions, instance=instance, resources=_resources(warehouse))
        assert ran.success and len(ran.get_asset_check_evaluations()) == 3  # with the asset
        assert all(e.passed for e in ran.get_asset_check_evaluations())

        keys = [_check_key(pipeline, CHECKPOINT_CHECK), _check_key(pipeline, GLOBAL_TABLE_CHECK)]
        alone = _run_checks(definitions, instance, warehouse, *keys)
        assert sorted(alone) == [CHECKPOINT_CHECK, GLOBAL_TABLE_CHECK]
        assert all(e.passed for e in alone.values())
        assert alone[CHECKPOINT_CHECK].metadata["problems"].value == "none"

        # What a run that died after appending, before its checkpoint, leaves behind.
        path = pipeline.layout(warehouse).table("audit")
        (spark.read.format("delta").load(path).limit(1).withColumn("idx", F.lit(99).cast("long"))
         .write.format("delta").mode("append").save(path))
        failed = _run_checks(definitions, instance, warehouse, keys[1])[GLOBAL_TABLE_CHECK]
    assert not failed.passed
    assert failed.metadata["problems"].value == "global table 'audit': 1 row(s) beyond marker 1"


def test_dead_letter_check_alone_reads_the_last_run_that_read_records(spark, warehouse):
    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "string", "x": "long"})
                .write.to_delta("out")).named("lettered")
    asset = make_pipeline_asset(pipeline)
    definitions = [asset, *make_pipeline_checks(pipeline)]
    key = _check_key(pipeline, DEAD_LETTER_CHECK)
    op = f"{pipeline.id}_{DEAD_LETTER_CHECK}"

    def threshold(ratio):
        return {"ops": {op: {"config": {"max_dead_letter_ratio": ratio}}}}

    with dg.DagsterInstance.ephemeral() as instance:
        before = _run_checks(definitions, instance, warehouse, key)[DEAD_LETTER_CHECK]
        assert before.passed and "no materialisation" in before.metadata["window"].value

        pipeline.publish(spark, [{"k": "a", "x": "bad"}, {"k": "a", "x": 1}], warehouse)
        only_asset = dg.AssetSelection.assets(asset).without_checks()
        assert dg.materialize(definitions, instance=instance, resources=_resources(warehouse),
                              selection=only_asset).success
        assert dg.materialize(definitions, instance=instance, resources=_resources(warehouse),
                              selection=only_asset).success  # nothing new: the window stays
        strict = _run_checks(definitions, instance, warehouse, key, run_config=threshold(0.1))
        lenient = _run_checks(definitions, instance, warehouse, key, run_config=threshold(0.6))
    failed = strict[DEAD_LETTER_CHECK]
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.WARN
    assert {name: failed.metadata[name].value for name in ("dead_letters", "rows_in", "ratio")} == \
        {"dead_letters": 1, "rows_in": 2, "ratio": 0.5}
    assert failed.metadata["batches"].value == "1..1"
    assert lenient[DEAD_LETTER_CHECK].passed


def test_checkpoint_check_fails_on_each_broken_invariant_and_runs_no_spark_job(spark, warehouse):
    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "string", "x": "long"})
                .map(_count, state=0).write.to_delta("out")).named("counted")
    definitions = [make_pipeline_asset(pipeline), *make_pipeline_checks(pipeline)]
    key = _check_key(pipeline, CHECKPOINT_CHECK)
    state_path = pipeline.layout(warehouse).state
    records = F.col("operator") == "__checkpoint__"

    def broken_by(rows):  # what a writer that went around the protocol leaves behind
        rows.write.format("delta").mode("append").save(state_path)
        jobs = spark_jobs(spark)
        with dg.DagsterInstance.ephemeral() as instance:  # blocking: the run fails with it
            ran = dg.materialize(definitions, instance=instance, resources=_resources(warehouse),
                                 selection=dg.AssetSelection.checks(key), raise_on_error=False)
        [found] = ran.get_asset_check_evaluations()
        assert spark_jobs(spark) == jobs  # the check read the log and files through delta-rs
        assert not found.passed
        return found.metadata["problems"].value

    pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        assert dg.materialize(definitions, instance=instance, resources=_resources(warehouse)).success
    stored = spark.read.format("delta").load(state_path)
    newer = broken_by(stored.where(~records).withColumn("checkpoint_id", F.lit(2).cast("long")))
    assert newer == "1 state row(s) newer than checkpoint 1"
    twice = broken_by(stored.where(records))
    assert twice.startswith("checkpoint id(s) recorded more than once: [1]")
    gap = stored.where(records).withColumn("checkpoint_id", F.lit(3).cast("long")).withColumn(
        "value", F.regexp_replace("value", '"checkpoint_id":1', '"checkpoint_id":3'))
    assert "2 checkpoint records for ids 1..3" in broken_by(gap)


def _count(op, md, data):
    sp.set(op, md, sp.get(op, md) + len(data))
    return data
