"""Dagster resources: the Spark session and the warehouse location."""


import os

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from ops import SparkConfig, spark_session
from state import resolve_warehouse


class SparkResource(dg.ConfigurableResource):
    """Builds (or reuses) the Spark session every pipeline asset runs on."""

    master: str = Field(
        default_factory=lambda: os.environ.get("LAKESTREAM_SPARK_MASTER", "local[*]"),
        description="local[*], spark://host:port, yarn, k8s://… or a Spark Connect sc://host:port")
    shuffle_partitions: int = Field(default=4, description="spark.sql.shuffle.partitions")
    conf: dict[str, str] = Field(default_factory=dict,
                                 description="Extra Spark settings, passed through unchanged")

    def session(self) -> SparkSession:
        return spark_session(SparkConfig(master=self.master,
                                         shuffle_partitions=self.shuffle_partitions,
                                         extra=dict(self.conf)))


class WarehouseResource(dg.ConfigurableResource):
    """Root folder or URI (s3a://, abfss://, hdfs://) under which every pipeline keeps its tables."""

    path: str = Field(
        default_factory=lambda: os.environ.get("LAKESTREAM_WAREHOUSE", "./warehouse"),
        description="Warehouse root; local paths are made absolute")

    @property
    def root(self) -> str:
        return resolve_warehouse(self.path)
