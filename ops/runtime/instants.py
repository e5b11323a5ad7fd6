"""Times in the pandas frames Spark hands to executor tasks, made what driver mode gives.

Spark holds a ``timestamp`` column (``TimestampType``) as instants, but its Arrow-to-pandas
conversion, which gives ``mapInPandas`` and ``applyInPandas`` functions their rows, turns them
into naive wall-clock times of the session time zone (``spark.sql.session.timeZone``). Driver
mode gives an operator a source's ``timestamp`` field as UTC instants (``datetime64[ns, UTC]``:
:class:`~ops.sources.records.RecordSchema`). Left naive on executors, a function saw other values
than on the driver, event times were read as UTC wall clocks (hours off in another zone), and
what a function returned (naive) became a ``timestamp_ntz`` column in Spark: a Delta sink that
driver mode had made (``timestamp``) then refused distributed mode's rows. :class:`Instants`
turns them back where a task first gets its rows. A ``timestamp_ntz`` column is naive in both
modes: left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import TimestampType

from ..sources import delta_inserts


@dataclass(frozen=True)
class Instants:
    """The columns of a frame that Spark holds as instants, and the time zone its pandas
    conversion shows them in (read on the driver: the executors' pandas has only the times).

    >>> times = pd.DataFrame({"ts": pd.to_datetime(["2026-07-01 02:00"]), "x": [1]})
    >>> Instants(("ts",), "Europe/Berlin").restored(times)["ts"].iloc[0]
    Timestamp('2026-07-01 00:00:00+0000', tz='UTC')
    """

    columns: tuple[str, ...] = ()
    time_zone: str = "UTC"

    @classmethod
    def of(cls, frame: DataFrame) -> Instants:
        """The instant columns of ``frame``'s schema (top-level ones: nested times are left to
        Spark, as driver mode has no typed form of them either) and its session's time zone."""
        columns = tuple(f.name for f in frame.schema.fields if isinstance(f.dataType, TimestampType))
        if not columns:
            return cls()
        zone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
        assert zone is not None  # a built-in setting: get() returns its value or raises
        return cls(columns, zone)

    def restored(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` (a frame Spark made for this call, changed in place: copying a task's
        million rows would cost more than the conversion) with the instant columns as UTC
        instants."""
        for name in self.columns:
            if name in rows.columns:
                rows[name] = delta_inserts.utc_instants(rows[name], self.time_zone)
        return rows

    def each(self, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """:meth:`restored` over a ``mapInPandas`` function's chunks."""
        return (self.restored(chunk) for chunk in chunks)

