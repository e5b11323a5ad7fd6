"""Dagster building blocks: pipelines as assets, per-pipeline jobs and sensors, asset checks,
operations jobs, maintenance schedules and the Spark/warehouse resources."""

from .checks import CHECKPOINT_CHECK, DEAD_LETTER_CHECK, GLOBAL_TABLE_CHECK
from .operation_jobs import (
    CheckpointChoice,
    PipelineChoice,
    VacuumChoice,
    make_maintenance_schedules,
    make_operation_jobs,
)
from .pipeline_assets import PipelineRunConfig, make_pipeline_asset, make_pipeline_job, run_metadata
from .resources import SparkResource, WarehouseResource, resources_for_deployment
from .sensors import PIPELINE_TAG, make_pipeline_sensor

__all__ = [
    "CHECKPOINT_CHECK", "DEAD_LETTER_CHECK", "GLOBAL_TABLE_CHECK", "PIPELINE_TAG",
    "CheckpointChoice", "PipelineChoice", "PipelineRunConfig", "SparkResource", "VacuumChoice",
    "WarehouseResource", "make_maintenance_schedules", "make_operation_jobs",
    "make_pipeline_asset", "make_pipeline_job", "make_pipeline_sensor",
    "resources_for_deployment", "run_metadata",
]
