"""Dagster resources: the Spark session and the warehouse location."""


import os
from collections.abc import Callable

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from ops import CONNECT_UNSUPPORTED, ConfigError, SparkConfig, lazy_spark_session, spark_session
from state import resolve_warehouse, warehouse_from_env


class SparkResource(dg.ConfigurableResource):
    """Builds (or reuses) the Spark session every pipeline asset runs on."""

    # the environment is read when the resource is made (as ops.spark_session reads it), so a
    # code location started with $LAKESTREAM_SPARK_MASTER set runs there
    master: str = Field(default_factory=SparkConfig.master_from_env,
                        description="local[*], spark://host:port, yarn or k8s://…")
    shuffle_partitions: int = Field(default=4, description="spark.sql.shuffle.partitions")
    conf: dict[str, str] = Field(default_factory=dict,
                                 description="Extra Spark settings, passed through unchanged")
    mode: str | None = Field(
        default_factory=lambda: os.environ.get("LAKESTREAM_MODE") or None,
        description="Where pipelines' operators run unless a run's config says: driver, "
                    "distributed or auto (default: each pipeline's own setting)")

    def session(self) -> SparkSession:
        """The Spark session, started now if it is not running yet."""
        return spark_session(self.config())

    def lazy_session(self, on_start: Callable[[], None] | None = None) -> SparkSession:
        """The Spark session, started only when something first needs it
        (:func:`ops.lazy_spark_session`; ``on_start`` is called just before a JVM starts):
        what the pipeline assets and their checks run on, so a step whose batch needs no
        Spark (driver mode on a local disk or an object store) starts no JVM."""
        return lazy_spark_session(self.config(), on_start=on_start)

    def config(self) -> SparkConfig:
        """The session's settings."""
        return SparkConfig(master=self.master, shuffle_partitions=self.shuffle_partitions,
                           extra=dict(self.conf))


class WarehouseResource(dg.ConfigurableResource):
    """Root folder or URI (s3a://, abfss://, hdfs://) under which every pipeline keeps its tables."""

    path: str = Field(default_factory=warehouse_from_env,
                      description="Warehouse root; local paths are made absolute")

    @property
    def root(self) -> str:
        return resolve_warehouse(self.path)


DEPLOYMENT_ENV = "LAKESTREAM_DEPLOYMENT"
#: Each deployment, and whether it needs the master named in the environment.
_NEEDS_MASTER = {"local": False, "cluster": True}


def resources_for_deployment(deployment: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """The resources of a deployment named by ``$LAKESTREAM_DEPLOYMENT`` (default ``local``).

    ``local``: embedded Spark (``local[*]``, or ``$LAKESTREAM_SPARK_MASTER``); ``cluster``: the
    master in ``$LAKESTREAM_SPARK_MASTER`` (spark://, yarn, k8s://). The warehouse is
    ``$LAKESTREAM_WAREHOUSE`` (default ``./warehouse``) in every deployment. ``connect`` is
    refused with the reason (:data:`ops.CONNECT_UNSUPPORTED`).
    """
    name = deployment or os.environ.get(DEPLOYMENT_ENV, "local")
    if name == "connect":
        raise ConfigError(f"{DEPLOYMENT_ENV}=connect: {CONNECT_UNSUPPORTED}")
    if name not in _NEEDS_MASTER:
        raise ConfigError(f"{DEPLOYMENT_ENV}={name!r}: choose one of {sorted(_NEEDS_MASTER)}")
    if _NEEDS_MASTER[name] and not os.environ.get(SparkConfig.MASTER_SETTING):
        raise ConfigError(f"deployment {name!r} needs ${SparkConfig.MASTER_SETTING} "
                          "(the Spark master address)")
    # both deployments' master is SparkResource's default, read from the environment
    return {"spark": SparkResource(), "warehouse": WarehouseResource()}
