"""A landing directory of JSON, CSV or Parquet files, each file processed exactly once.

New files are numbered in a manifest table (``_files_<source>``) in arrival order (modification
time, then name) before any batch plans them; a batch then covers a range of manifest numbers,
so a replay reads the very same files. Files must appear whole (write elsewhere, then rename
into the directory); names starting with ``.`` or ``_`` are ignored.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
)

from state import PipelineLayout
from state.lake import tables

from ..columns import ROWTIME
from ..context import RunContext
from ..errors import ConfigError, PipelineDefinitionError
from .base import REJECTED_COLUMNS, Slice, Source
from .records import SPARK_TYPES, RecordSchema

log = logging.getLogger(__name__)

FORMATS = ("json", "csv", "parquet")
MANIFEST_SCHEMA = StructType([
    StructField("seq", LongType(), False),
    StructField("path", StringType(), False),
    StructField("size", LongType(), False),
    StructField("modified_ms", LongType(), False),
])
_CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class LandedFile:
    path: str
    size: int
    modified_ms: int


def list_landed(spark: SparkSession, directory: str) -> list[LandedFile]:
    """Visible files of ``directory`` (any Hadoop file system), oldest first."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session always has one
    path = jvm.org.apache.hadoop.fs.Path(directory)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return []
    found = [LandedFile(status.getPath().toString(), status.getLen(), status.getModificationTime())
             for status in fs.listStatus(path)
             if status.isFile() and not status.getPath().getName().startswith((".", "_"))]
    return sorted(found, key=lambda f: (f.modified_ms, f.path))


@dataclass(frozen=True)
class FileSource(Source):
    """Files landing in ``directory``; a batch reads the files numbered ``(start, end]``."""

    name: str
    directory: str
    format: str
    schema: RecordSchema
    max_files: int | None = None
    options: tuple[tuple[str, str], ...] = ()
    #: add ``ROWTIME``: the modification time of the file each record is in (see with_rowtime)
    rowtime: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise PipelineDefinitionError(
                f"file source {self.name!r}: format {self.format!r} is not one of {FORMATS}")
        if self.format != "parquet" and not self.schema.fields:
            raise PipelineDefinitionError(
                f"file source {self.name!r}: {self.format} files need a schema "
                "(field -> long/double/string/boolean/timestamp)")
        if self.max_files is not None and self.max_files < 1:
            raise PipelineDefinitionError(f"max_files must be >= 1, got {self.max_files}")

    def tables(self, layout: PipelineLayout) -> list[str]:
        return [layout.manifest(self.name)]

    def setup(self, ctx: RunContext) -> None:
        tables.ensure(ctx.spark, ctx.layout.manifest(self.name), MANIFEST_SCHEMA)

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = 0 if after is None else int(after)
        latest = self.discover(ctx)
        step = self.max_files or max(1, latest - start)
        slices: list[tuple[Any, Any]] = []
        while start < latest and len(slices) < limit:
            end = min(latest, start + step)
            slices.append((start, end))
            start = end
        return slices

    @property
    def lag_needs_spark(self) -> bool:
        return True  # the manifest is read whole, with Spark

    def lag(self, ctx: RunContext, after: Any) -> int:
        known = set(self._manifest(ctx)["path"])
        unlisted = sum(1 for f in list_landed(ctx.spark, self.directory) if f.path not in known)
        return len(known) + unlisted - (0 if after is None else int(after))

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        """``<files>:<newest mtime>:<newest name>`` of the landing directory."""
        local = tables.local_path(self.directory)
        if local is not None:
            try:
                entries = [e for e in os.scandir(local)
                           if e.is_file() and not e.name.startswith((".", "_"))]
            except FileNotFoundError:
                entries = []
            files = sorted((int(e.stat().st_mtime * 1000), e.name) for e in entries)
        elif spark is not None:
            files = [(f.modified_ms, f.path.rsplit("/", 1)[-1])
                     for f in list_landed(spark, self.directory)]
        else:
            raise ConfigError(f"probing {self.directory} needs a Spark session (not a local path)")
        if not files:
            return None
        return f"{len(files)}:{files[-1][0]}:{files[-1][1]}"

    def discover(self, ctx: RunContext) -> int:
        """Number newly landed files in the manifest; return the highest number."""
        manifest = ctx.layout.manifest(self.name)
        known = self._manifest(ctx)
        last = int(known["seq"].max()) if len(known) else 0
        seen = set(known["path"])
        new = [f for f in list_landed(ctx.spark, self.directory) if f.path not in seen]
        if not new:
            return last
        rows = pd.DataFrame({"seq": range(last + 1, last + 1 + len(new)),
                             "path": [f.path for f in new], "size": [f.size for f in new],
                             "modified_ms": [f.modified_ms for f in new]})
        # Keyed by the first new number: a concurrent discovery of the same numbers is skipped.
        tables.append(tables.to_frame(ctx.spark, rows, MANIFEST_SCHEMA), manifest,
                      txn=(f"{ctx.pipeline}/files:{self.name}", last + 1))
        log.info("%s: %d new file(s) in %s", ctx.pipeline, len(new), self.directory)
        return int(tables.read(ctx.spark, manifest).agg(F.max("seq")).collect()[0][0])

    def _manifest(self, ctx: RunContext) -> pd.DataFrame:
        """``seq, path`` of every file numbered so far (none before the first run)."""
        path = ctx.layout.manifest(self.name)
        if not tables.exists(ctx.spark, path):
            return pd.DataFrame({"seq": pd.Series(dtype="int64"), "path": pd.Series(dtype=object)})
        return tables.read(ctx.spark, path).select("seq", "path").toPandas()

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        manifest = tables.read(ctx.spark, ctx.layout.manifest(self.name))
        entries = (manifest.where((F.col("seq") > int(start)) & (F.col("seq") <= int(end)))
                   .orderBy("seq").select("path", "modified_ms").collect())
        files = [row["path"] for row in entries]
        unreadable = []
        try:
            rows = self._load(ctx.spark, files)
        except Exception:  # find the file(s) at fault; the readable ones go on
            readable = []
            for path in files:
                try:
                    self._load(ctx.spark, [path])
                    readable.append(path)
                except Exception as exc:
                    unreadable.append((path, str(exc).splitlines()[0][:300]))
            rows = self._load(ctx.spark, readable) if readable else pd.DataFrame()
        if self.rowtime and not rows.empty:  # the time the manifest numbered the file by
            modified = {_plain(row["path"]): row["modified_ms"] for row in entries}
            rows[ROWTIME] = pd.to_datetime(rows["_path"].map(lambda p: modified[_plain(p)]),
                                           unit="ms", utc=True)
        good, rejected = self._split(rows)
        rejected = pd.concat([rejected, pd.DataFrame(
            {"position": [p for p, _ in unreadable], "raw": [None] * len(unreadable),
             "reason": [f"unreadable {self.format} file: {m}" for _, m in unreadable]})],
            ignore_index=True)
        return Slice(good=good, rejected=rejected[REJECTED_COLUMNS])

    def with_rowtime(self) -> tuple[Source, str]:
        """ROWTIME is the modification time of the file the record is in."""
        return dataclasses.replace(self, rowtime=True), ROWTIME

    def _load(self, spark: SparkSession, paths: list[str]) -> pd.DataFrame:
        """Rows of ``paths`` in manifest order then file order, with ``_path`` and ``_line``."""
        reader = spark.read.format(self.format).options(**dict(self.options))
        if self.format == "csv":
            reader = reader.option("header", dict(self.options).get("header", "true"))
        if self.schema.fields:
            fields = [StructField(n, SPARK_TYPES[t]) for n, t in self.schema.fields.items()]
            if self.format != "parquet":
                fields.append(StructField(_CORRUPT, StringType()))
                reader = reader.option("mode", "PERMISSIVE").option(
                    "columnNameOfCorruptRecord", _CORRUPT)
            reader = reader.schema(StructType(fields))
        frame: DataFrame = reader.load(paths)
        rows: pd.DataFrame = frame.select("*", F.col("_metadata.file_path").alias("_path"),
                            F.col("_metadata.file_block_start").alias("_block"),
                            F.monotonically_increasing_id().alias("_order")).toPandas()
        if self.format != "parquet" and _CORRUPT in rows:
            # Spark only fills the corrupt column when the schema asks for it; keep it textual
            rows[_CORRUPT] = rows[_CORRUPT].astype(object)
        rank = {_plain(path): n for n, path in enumerate(paths)}
        rows["_rank"] = rows["_path"].map(lambda p: rank[_plain(p)])
        rows = rows.sort_values(["_rank", "_block", "_order"], kind="stable")
        rows["_line"] = rows.groupby("_rank").cumcount() + 1
        return rows.drop(columns=["_block", "_order", "_rank"]).reset_index(drop=True)

    def _split(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Good rows (in order) and rejected ones with a reason and ``file:line`` position."""
        if rows.empty:
            return pd.DataFrame(), Slice.no_rejects()
        reasons = pd.Series(None, index=rows.index, dtype=object)
        if _CORRUPT in rows:
            reasons[rows[_CORRUPT].notna()] = (
                f"malformed {self.format} record (does not match the schema)")
        for key in self.schema.key_fields:
            missing = rows[key].isna() if key in rows else pd.Series(True, index=rows.index)
            reasons[missing & reasons.isna()] = f"key field {key!r} is missing or null"
        bad = reasons.notna()
        data_columns = [c for c in rows.columns if c not in ("_path", "_line", _CORRUPT)]
        rejected = pd.DataFrame({
            "position": (rows.loc[bad, "_path"] + ":" + rows.loc[bad, "_line"].astype(str)).tolist(),
            "reason": reasons[bad].tolist(),
            "raw": [row[_CORRUPT] if isinstance(row.get(_CORRUPT), str)
                    else row[data_columns].to_json() for _, row in rows[bad].iterrows()]})
        return rows.loc[~bad, data_columns].reset_index(drop=True), rejected


def _plain(path: str) -> str:
    """``file:///x`` and ``file:/x`` name the same file."""
    return path.replace("file:///", "file:/", 1)
