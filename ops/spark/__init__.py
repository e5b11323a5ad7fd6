"""Spark for lakestream: the session (``session``: Delta, Kafka and S3A settings, started
once), the jars it needs (``jars``: fetched once with Maven into ``.jars/``, and the JVM
source of Delta's conditional-put log store in ``jvm/``), and the heartbeat that logs a line
every 10 s while a long step (a session start, a jar fetch, a batch) lasts."""

from .session import CONNECT_UNSUPPORTED, SparkConfig, lazy_spark_session, s3a_conf, spark_session

__all__ = ["CONNECT_UNSUPPORTED", "SparkConfig", "lazy_spark_session", "s3a_conf", "spark_session"]
