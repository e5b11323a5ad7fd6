"""Reading and compacting a pipeline's state from outside it (notebooks, Dagster ops, tests)."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import SparkSession

import state

from .operators import Map
from .pipeline import Pipeline


def _codec(pipeline: Pipeline, operator: str) -> str:
    for op in pipeline.stream.operators:
        if op.name == operator and isinstance(op, Map):
            return op.codec
    return "json"


def read_state(spark: SparkSession, pipeline: Pipeline, operator: str, as_of: int | None = None,
               warehouse: str | None = None) -> pd.DataFrame:
    """``key, value, checkpoint_id`` of ``operator``'s state as of checkpoint ``as_of``
    (default: the latest), decoded with the operator's codec.

    >>> sp.read_state(spark, pipeline, "running_sum", as_of=3)
    """
    return state.read_state(spark, pipeline.layout(warehouse), operator, as_of,
                            codec=_codec(pipeline, operator))


def changed_keys(spark: SparkSession, pipeline: Pipeline, operator: str, after: int,
                 upto: int | None = None, warehouse: str | None = None) -> pd.DataFrame:
    """Keys of ``operator`` changed after checkpoint ``after`` up to ``upto`` (default: latest)."""
    return state.changed_keys(spark, pipeline.layout(warehouse), operator, after, upto,
                              codec=_codec(pipeline, operator))


def compact(spark: SparkSession, pipeline: Pipeline, warehouse: str | None = None) -> int:
    """Rewrite the pipeline's state changelog to latest-per-key; returns the rows kept."""
    return state.compact(spark, pipeline.layout(warehouse))
