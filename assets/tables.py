"""What a sink asset's materialisation says about its table: Dagster's standard metadata
(``dagster/row_count``, ``dagster/column_schema``, ``dagster/uri``) and a preview of its newest rows.
"""

import math
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from ops import DeltaSink, KafkaSink, RunReport, Sink, TableSink
from state import PipelineLayout
from state.lake import tables

# Dagster's standard keys (dagster's TableMetadataSet and UriMetadataSet name them; neither class
# is exported at the top of the dagster package in 1.13).
ROW_COUNT = "dagster/row_count"
COLUMN_SCHEMA = "dagster/column_schema"
URI = "dagster/uri"
PREVIEW_ROWS = 10


def sink_metadata(session: SparkSession, sink: Sink, layout: PipelineLayout,
                  report: RunReport) -> dict[str, Any]:
    """The materialisation metadata of ``sink``'s asset after the run ``report`` describes."""
    if isinstance(sink, KafkaSink):
        return {URI: f"kafka://{sink.connection.bootstrap}/{sink.topic}", "topic": sink.topic,
                "rows_sent": report.rows_out, "last_batch_id": report.last_batch_id or 0}
    assert isinstance(sink, (TableSink, DeltaSink))
    metadata = table_metadata(session, sink.location(layout))
    if isinstance(sink, TableSink):
        metadata["changelog"] = dg.MetadataValue.path(sink.changelog(layout))
    return metadata


def table_metadata(session: SparkSession, path: str) -> dict[str, Any]:
    """Row count, column schema and a preview of the newest rows of the Delta table at
    ``path`` (only its location before the first write creates it): from the table's log and
    newest files, with no Spark job where delta-rs serves it (:func:`state.lake.tables.summary`)."""
    metadata: dict[str, Any] = {URI: path, "table": dg.MetadataValue.path(path)}
    found = tables.summary(session, path, PREVIEW_ROWS)
    if found is None:
        return {**metadata, ROW_COUNT: 0}
    schema = column_schema(found.schema)
    metadata[ROW_COUNT] = found.rows
    metadata[COLUMN_SCHEMA] = schema
    metadata["preview"] = preview(found.newest, schema)
    return metadata


def column_schema(schema: StructType) -> dg.TableSchema:
    """The columns of ``schema`` with their Spark SQL types.

    >>> from pyspark.sql.types import LongType, StringType, StructField
    >>> schema = StructType([StructField("k", StringType()), StructField("n", LongType())])
    >>> [column.type for column in column_schema(schema).columns]
    ['string', 'bigint']
    """
    return dg.TableSchema(columns=[dg.TableColumn(field.name, field.dataType.simpleString(),
                                                  constraints=dg.TableColumnConstraints(
                                                      nullable=field.nullable))
                                   for field in schema.fields])


def preview(rows: pd.DataFrame, schema: dg.TableSchema) -> dg.TableMetadataValue:
    """``rows`` as a table the UI shows (values it cannot show as they are become text).

    >>> preview(pd.DataFrame({"k": ["a"], "n": [1]}), dg.TableSchema(columns=[
    ...     dg.TableColumn("k", "string"), dg.TableColumn("n", "bigint")])).records[0].data
    {'k': 'a', 'n': 1}
    """
    return dg.MetadataValue.table(
        records=[dg.TableRecord({name: _cell(value) for name, value in row.items()})
                 for row in rows.to_dict(orient="records")],
        schema=schema)


def _cell(value: Any) -> str | int | float | bool | None:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
