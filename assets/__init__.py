"""Dagster building blocks: pipelines as assets (one per sink besides), their asset checks,
per-pipeline jobs and sensors, lineage between pipelines, operations jobs, maintenance schedules
and the Spark/warehouse resources."""

from .checks import (
    CHECKPOINT_CHECK,
    DEAD_LETTER_CHECK,
    GLOBAL_TABLE_CHECK,
    DeadLetterCheckConfig,
    make_pipeline_checks,
)
from .continuous import ContinuousRunConfig, make_continuous_job
from .lineage import external_inputs, input_locations, output_keys, sink_key, upstream_keys
from .operation_jobs import (
    CheckpointChoice,
    PipelineChoice,
    VacuumChoice,
    make_maintenance_schedules,
    make_operation_jobs,
)
from .pipeline_assets import (
    PipelineRunConfig,
    make_pipeline_asset,
    make_pipeline_assets,
    make_pipeline_job,
    run_metadata,
)
from .resources import SparkResource, WarehouseResource, resources_for_deployment
from .sensors import PIPELINE_TAG, make_pipeline_sensor, needs_sensor

__all__ = [
    "CHECKPOINT_CHECK", "DEAD_LETTER_CHECK", "GLOBAL_TABLE_CHECK", "PIPELINE_TAG", "CheckpointChoice",
    "ContinuousRunConfig", "DeadLetterCheckConfig", "PipelineChoice", "PipelineRunConfig",
    "SparkResource", "VacuumChoice", "WarehouseResource", "external_inputs", "input_locations",
    "make_continuous_job", "make_maintenance_schedules", "make_operation_jobs", "make_pipeline_asset",
    "make_pipeline_assets", "make_pipeline_checks", "make_pipeline_job", "make_pipeline_sensor",
    "needs_sensor", "output_keys", "resources_for_deployment", "run_metadata", "sink_key",
    "upstream_keys",
]
