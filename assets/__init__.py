"""Dagster asset factories: pipelines become assets, materialised by running them."""

from .pipeline_assets import PipelineRunConfig, make_pipeline_asset, run_metadata
from .resources import SparkResource, WarehouseResource

__all__ = ["PipelineRunConfig", "SparkResource", "WarehouseResource", "make_pipeline_asset",
           "run_metadata"]
