"""The one place a Spark session is built: local by default, a cluster or Spark Connect by config."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pyspark.sql import SparkSession

from state.lake import LazySparkSession

from ..errors import ConfigError
from . import class_archive
from .heartbeat import reporting
from .jars import spark_jar_conf

log = logging.getLogger(__name__)

_LOG4J = Path(__file__).with_name("log4j2.properties")
#: Settings that are comma-separated lists: a user's entries join lakestream's (Delta and the
#: Kafka connector stay on the classpath) instead of replacing them.
_LISTS = ("spark.jars", "spark.jars.packages", "spark.sql.extensions")
#: Settings that are space-separated lists of JVM options: a user's come after lakestream's (the
#: quiet log configuration, the class archive), so the JVM takes theirs where both name one.
_OPTIONS = ("spark.driver.extraJavaOptions",)
#: Settings a running session cannot change: asking for other values gets a warning.
_FIXED_AT_START = ("spark.master", "spark.jars", "spark.jars.packages", "spark.sql.extensions",
                   "spark.driver.extraJavaOptions", "spark.driver.extraClassPath")

CONNECT_UNSUPPORTED = (
    "Spark Connect (sc://…) is not supported: lakestream uses Delta's table API (MERGE, DELETE, "
    "history, VACUUM), which on a Connect session needs Delta's Connect server plugin, and "
    "delta-connect-server is not published for Delta 4.4.0 / Spark 4.2; it also lists files "
    "through the driver's Hadoop file system, which a Connect client has no access to. Point "
    "LAKESTREAM_SPARK_MASTER at the cluster itself (spark://…, yarn, k8s://…) instead.")


@dataclass(frozen=True)
class SparkConfig:
    """How to reach Spark.

    ``master`` is ``local[*]``/``local[N]``, ``spark://host:port`` (standalone), ``yarn`` or
    ``k8s://…``; Spark Connect (``sc://…``) is refused with the reason, see
    :data:`CONNECT_UNSUPPORTED`. ``extra`` passes any other Spark setting through unchanged (for
    example ``spark.hadoop.fs.s3a.*``).
    """

    #: The environment variable naming the master, and the master when it is not set.
    MASTER_SETTING: ClassVar[str] = "LAKESTREAM_SPARK_MASTER"
    DEFAULT_MASTER: ClassVar[str] = "local[*]"

    master: str = DEFAULT_MASTER
    app_name: str = "lakestream"
    shuffle_partitions: int = 4
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def master_from_env(cls) -> str:
        """The master ``$LAKESTREAM_SPARK_MASTER`` names (default ``local[*]``): the one reading
        of it, which :meth:`from_env` and the Dagster resource's default both make."""
        return os.environ.get(cls.MASTER_SETTING, cls.DEFAULT_MASTER)

    @classmethod
    def from_env(cls) -> SparkConfig:
        """Read ``LAKESTREAM_SPARK_MASTER`` and ``LAKESTREAM_SHUFFLE_PARTITIONS``."""
        partitions = os.environ.get("LAKESTREAM_SHUFFLE_PARTITIONS", "4")
        if not partitions.isdigit() or int(partitions) < 1:
            raise ConfigError(
                f"LAKESTREAM_SHUFFLE_PARTITIONS must be a positive integer, got {partitions!r}")
        return cls(master=cls.master_from_env(), shuffle_partitions=int(partitions))

    def to_spark_conf(self) -> dict[str, str]:
        """Settings for the session: Delta, Arrow, loopback driver, quiet logs."""
        if self.master.startswith("sc://"):
            raise ConfigError(f"{self.master!r}: {CONNECT_UNSUPPORTED}")
        if not (self.master.startswith(("local", "spark://", "yarn", "k8s://", "mesos://"))):
            raise ConfigError(
                f"Spark master {self.master!r} is not local[…], spark://…, yarn or k8s://…")
        conf = {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            # Batches move between pandas and Spark through Arrow; 10k-row record batches (the
            # default) made a 1M-row batch cost 100 round trips. Measured: -15% run time.
            "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
            "spark.sql.session.timeZone": "UTC",
            # Delta rebuilds table snapshots with this many tasks; 50 is far too many for small logs.
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J}",
        }
        if self.master.startswith("local"):
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
        elif self.master.startswith("spark://"):
            conf["spark.driver.host"] = os.environ.get("LAKESTREAM_DRIVER_HOST", "127.0.0.1")
        conf.update(spark_jar_conf())
        conf.update(s3a_conf(os.environ))
        conf["spark.driver.extraJavaOptions"] += f" {class_archive.java_options(conf)}".rstrip()
        for key, value in self.extra.items():
            if key in conf and key in _LISTS:
                value = _merged(conf[key], value)
            elif key in conf and key in _OPTIONS:
                value = f"{conf[key]} {value}"
            conf[key] = value
        return conf


def s3a_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """Spark's ``fs.s3a.*`` settings from the standard AWS environment, so Spark and delta-rs
    (which reads that environment itself) reach the same store: the endpoint
    (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; then path-style requests, as S3-compatible
    servers want), the region, and ``s3://`` served by S3A too. Credentials are not copied:
    S3A's default provider chain reads the same environment (then profiles, web identity,
    instance roles), so they never enter Spark's configuration, its logs or its UI.

    >>> conf = s3a_conf({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    >>> conf["spark.hadoop.fs.s3a.endpoint"], conf["spark.hadoop.fs.s3a.connection.ssl.enabled"]
    ('http://127.0.0.1:9000', 'false')
    """
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf.update({"spark.hadoop.fs.s3a.endpoint": endpoint,
                     "spark.hadoop.fs.s3a.path.style.access": "true",
                     "spark.hadoop.fs.s3a.connection.ssl.enabled":
                         "false" if endpoint.startswith("http://") else "true"})
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


def spark_session(config: SparkConfig | None = None) -> SparkSession:
    """Return the (shared) Spark session for ``config``, or for the environment when omitted.

    A process has one Spark session: when one is running already, it is returned, and any
    setting of ``config`` that it was started with otherwise (the master, jars, extensions) is
    named in a warning, since it cannot take effect until that session stops.

    >>> spark = spark_session()              # local[*], Delta configured, jars fetched once
    """
    config = config or SparkConfig.from_env()
    # Python workers must run this interpreter, which has pandas and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = config.to_spark_conf()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # what getOrCreate() would hand back: the process's session, from whichever thread made it
    running = SparkSession._instantiatedSession
    if running is not None and running.sparkContext._jsc is not None:
        _warn_if_started_otherwise(running, {"spark.master": config.master, **conf})
    builder = SparkSession.builder.appName(config.app_name).master(config.master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if running is None or running.sparkContext._jsc is None:
        log.info("starting Spark (%s); the first start in a process takes 10-30 s", config.master)
    with reporting(log, "starting Spark"):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def lazy_spark_session(config: SparkConfig | None = None, *,
                       on_start: Callable[[], None] | None = None) -> LazySparkSession:
    """:func:`spark_session` for ``config``, started only when something first needs it.

    A driver-mode run on storage delta-rs serves (a local disk, S3, GCS, Azure) needs no JVM:
    handed a lazy session, it never starts one, and a run that does need Spark (distributed
    mode, a table only Spark reads, a Spark sink) starts it on the way, once per process. What
    Dagster's pipeline assets and checks run on; ``spark_session()`` still starts at once.
    ``on_start`` is called just before a JVM really starts.

    >>> spark = lazy_spark_session()         # no JVM yet
    >>> # pipeline.run_once(spark)           # starts one only if the run needs it
    """
    config = config or SparkConfig.from_env()
    settings = config.to_spark_conf()  # checked now: a bad master fails here, not at first use
    return LazySparkSession(lambda: spark_session(config), settings, on_start)


def _merged(ours: str, theirs: str) -> str:
    """Two comma-separated lists as one, ours first, without repeats."""
    items = [item.strip() for item in f"{ours},{theirs}".split(",") if item.strip()]
    return ",".join(dict.fromkeys(items))


def _warn_if_started_otherwise(spark: SparkSession, wanted: dict[str, str]) -> None:
    """Warn when the running session was started with other values of settings it cannot change."""
    differing = [f"{key}={wanted[key]!r} (running: {spark.conf.get(key, None)!r})"
                 for key in _FIXED_AT_START
                 if key in wanted and spark.conf.get(key, None) != wanted[key]]
    if differing:
        message = ("a Spark session is running already and is returned as it is; these settings "
                   "differ from the ones asked for and cannot change until it stops "
                   f"(spark.stop()): {'; '.join(differing)}")
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
