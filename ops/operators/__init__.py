"""Operators: the :class:`Operator` interface and the operators lakestream ships.

One module per operator family: ``basic`` (map, filter), ``aggregates`` (the aggregate
functions), ``grouped`` (group-by aggregation), ``latest`` (``as_table``), ``windows`` and
``sessions`` (event-time windows, sharing ``event_time``), ``joins``, ``projection`` (a
table's SELECT list over its aggregates), ``retraction`` (a table's changes as signed rows),
``spark_processor`` (a Spark ``StatefulProcessor``, with its handle in ``processor_handle``
and its schemas read in ``processor_schema``), ``watermark`` (a stream's event time and
watermark delay, Spark's ``withWatermark``).
"""

from .aggregates import (
    Agg,
    aggregate,
    avg,
    collect_list,
    collect_set,
    count,
    count_distinct,
    latest_by_offset,
    max_,
    max_by,
    min_,
    min_by,
    sum_,
)
from .base import InferredState, Operator, StateDeclaration, StateKind, TableOperator, TimerDeclaration
from .basic import GLOBAL_STATE, STATELESS, Filter, Map
from .grouped import GroupAggregate
from .joins import KeptTableJoin, TableJoin, TableTableJoin
from .latest import LatestByKey
from .projection import TableProjection
from .retraction import ChangesAsRows
from .sessions import Session, SessionAggregate, session
from .spark_processor import TransformWithState
from .stream_join import JoinSide, StreamStreamJoin
from .watermark import EventTimeWatermark, last_watermark
from .windows import Window, WindowAggregate, hopping, tumbling

__all__ = [
    "GLOBAL_STATE", "STATELESS", "Agg", "ChangesAsRows", "EventTimeWatermark", "Filter",
    "GroupAggregate", "JoinSide",
    "KeptTableJoin", "LatestByKey", "Map", "Operator", "Session", "SessionAggregate",
    "InferredState", "StateDeclaration", "StateKind", "StreamStreamJoin", "TableJoin", "TableOperator",
    "TableProjection", "TableTableJoin", "TimerDeclaration", "TransformWithState", "Window",
    "WindowAggregate",
    "aggregate", "avg", "collect_list", "collect_set", "count", "count_distinct", "hopping",
    "latest_by_offset", "last_watermark", "max_", "max_by", "min_", "min_by", "session", "sum_",
    "tumbling",
]
