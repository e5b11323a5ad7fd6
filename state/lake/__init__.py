"""Delta plumbing: the table operations the engine needs, with Spark (:mod:`.tables`) or
without it (:mod:`.direct`, through :mod:`state.delta_io`), the lazily started Spark session
and the warm-up of a process's first transaction."""

from . import direct, tables
from .sessions import LazySparkSession, spark_started, start_in_background
from .warmup import TransactionWarmer, warming

__all__ = ["LazySparkSession", "TransactionWarmer", "direct", "spark_started", "start_in_background",
           "tables", "warming"]
