"""Write what Spark gives for each of ``tests/tws/cases.py``'s cases, batch by batch, into
``tests/tws/expected/<case>.json``: real Spark, ``transformWithStateInPandas`` (or
``transformWithState``) on the RocksDB state store, one input file per micro-batch, two queries
over one checkpoint (a restart between them), the output of each batch taken by
``foreachBatch``.

    .venv/bin/python -m tests.tws.spark_reference               # write every case's file
    .venv/bin/python -m tests.tws.spark_reference last_three    # one
    .venv/bin/python -m tests.tws.spark_reference --check       # Spark still gives them?

The files are checked in: they are the spec the lakestream port is held to, and this script is
how they were made. ``--check`` runs every case again and fails on a case whose rows differ
from its file: run it when a case or Spark changes (45 s; not in the suite, whose tests of the
port will read the files).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from tests.tws.cases import BATCHES, CASES, INPUT_SCHEMA, Case

EXPECTED = Path(__file__).with_name("expected")
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def spark_session() -> SparkSession:
    """A local session of its own (the cases' queries set the RocksDB state store they need)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("tws-reference")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false").getOrCreate())


def write_batch(folder: Path, number: int, rows: list[dict]) -> None:
    """Batch ``number`` as a file of its own, dated so the file source takes it in order."""
    path = folder / f"{number:03d}.json"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))


def query(spark: SparkSession, case: Case, source: Path) -> DataFrame:
    """The case's transformation of the stream of files in ``source``."""
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    if case.watermark:
        stream = stream.withWatermark("ts", case.watermark)
    grouped = stream.groupBy("k")
    initial = (spark.createDataFrame(case.initial_state, "k string, n long").groupBy("k")
               if case.initial_state else None)
    transform = grouped.transformWithStateInPandas if case.form == "pandas" else grouped.transformWithState
    out = transform(case.processor(), case.output_schema, "Append", case.time_mode,
                    initialState=initial, eventTimeColumnName=case.event_time or "")
    if case.then is None:
        return out
    then, schema = case.then
    return out.groupBy("k").transformWithStateInPandas(then(), schema, "Append", "EventTime")


def run_case(spark: SparkSession, case: Case) -> list[dict]:
    """Each micro-batch's id and its output rows (sorted), on the RocksDB state store (set for
    the case's queries only, so any session will do)."""
    before = spark.conf.get(PROVIDER, None)
    spark.conf.set(PROVIDER, ROCKSDB)
    try:
        return _batches(spark, case)
    finally:
        if before is None:
            spark.conf.unset(PROVIDER)
        else:
            spark.conf.set(PROVIDER, before)


def _batches(spark: SparkSession, case: Case) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix=f"tws-{case.name}-"))
    source, outputs = root / "in", []
    source.mkdir()

    def collect(frame: DataFrame, batch_id: int) -> None:
        rows = [{key: _plain(value) for key, value in row.asDict().items()} for row in frame.collect()]
        outputs.append({"batch_id": batch_id, "rows": sorted(rows, key=json.dumps)})

    for part in (BATCHES[:case.restart_after], BATCHES[case.restart_after:]):
        for rows in part:
            write_batch(source, len(list(source.iterdir())), rows)
        running = (query(spark, case, source).writeStream.foreachBatch(collect)
                   .option("checkpointLocation", str(root / "checkpoint"))
                   .trigger(availableNow=True).start())
        running.awaitTermination()
    return outputs


def _plain(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def main(names: list[str], check: bool) -> int:
    """Write (or with ``check``, compare with) each named case's file; the cases that differ."""
    spark = spark_session()
    EXPECTED.mkdir(exist_ok=True)
    differing = 0
    for case in CASES:
        if names and case.name not in names:
            continue
        found = {"case": case.name, "spark": spark.version, "restart_after": case.restart_after,
                 "batches": run_case(spark, case)}
        path = EXPECTED / f"{case.name}.json"
        if check:
            same = json.loads(path.read_text())["batches"] == found["batches"]
            differing += not same
            print(case.name, "same" if same else f"DIFFERS from {path}", flush=True)
        else:
            path.write_text(json.dumps(found, indent=1) + "\n")
            print(case.name, [(b["batch_id"], len(b["rows"])) for b in found["batches"]], flush=True)
    spark.stop()
    return differing


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(1 if main([a for a in arguments if a != "--check"], "--check" in arguments) else 0)
