"""Configuration reaches Spark unchanged: object-store URIs and storage settings; Spark Connect
is refused with its reason rather than failing half-way."""

import pytest

import ops as sp
from state import PipelineLayout, StorageError, resolve_warehouse
from state.lake import tables

S3_SETTINGS = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
               "spark.hadoop.fs.s3a.path.style.access": "true"}


@pytest.mark.parametrize("uri", ["s3a://lake-bucket/warehouse", "abfss://lake@account.dfs.core.windows.net/wh"])
def test_warehouse_uris_pass_through_to_table_paths(uri):
    assert resolve_warehouse(uri + "/") == uri
    layout = PipelineLayout(resolve_warehouse(uri), "orders")
    assert layout.state == f"{uri}/orders/_state"
    assert tables.local_path(layout.state) is None          # never read as a local folder


def test_storage_settings_reach_the_spark_conf_unchanged():
    conf = sp.SparkConfig(master="spark://127.0.0.1:7077", extra=S3_SETTINGS).to_spark_conf()
    assert {key: conf[key] for key in S3_SETTINGS} == S3_SETTINGS


def test_a_table_in_a_missing_bucket_fails_naming_bucket_and_path_and_leaks_no_secret(spark, s3):
    # the URI reaches the object store untouched (not made into a local path), and the store's
    # refusal comes back naming what is missing, without the credentials it was asked with
    with pytest.raises(StorageError, match="bucket 'no-such-bucket', path 'wh/orders/_state'") as error:
        tables.ensure(spark, "s3a://no-such-bucket/wh/orders/_state", "operator STRING, key STRING")
    assert "NoSuchBucket" in str(error.value)
    assert s3.env()["AWS_SECRET_ACCESS_KEY"] not in str(error.value)
    assert not tables.exists(spark, "s3a://lake/wh/never-written/_state")


def test_spark_connect_is_refused_with_the_reason():
    with pytest.raises(sp.ConfigError, match="Spark Connect .* not supported"):
        sp.SparkConfig(master="sc://127.0.0.1:15002").to_spark_conf()


def test_a_users_jars_join_delta_and_kafka_instead_of_replacing_them():
    conf = sp.SparkConfig(extra={"spark.jars": "/opt/udfs.jar",
                                 "spark.sql.extensions": "com.example.Ext"}).to_spark_conf()
    jars = conf["spark.jars"].split(",")
    assert jars[-1] == "/opt/udfs.jar"
    assert any("delta-spark" in jar for jar in jars) and any("spark-sql-kafka" in jar for jar in jars)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension,com.example.Ext"


def test_asking_a_running_session_for_other_jars_warns_with_what_differs(spark):
    with pytest.warns(RuntimeWarning, match=r"spark\.jars='[^']*/opt/udfs\.jar'"):
        same = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2,
                                               extra={"spark.jars": "/opt/udfs.jar"}))
    assert same is spark
