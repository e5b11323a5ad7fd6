"""Nexmark on Flink SQL: each query's text from the nexmark repository (``flink_sql/``, see
its NOTICE) run on PyFlink's local mini-cluster over the generated stream's Parquet files,
with only the source and sink DDL changed.

Run it with the Flink venv's interpreter (``bench/install_peers``); one JSON line per query
on stdout::

    .venv-peers/flink/bin/python bench/nexmark/flink.py --stream FOLDER --work WORK \\
        --queries q0,q4 [--warm FOLDER] [--parallelism 2]

What changed, and why:

- **Sources**: Nexmark's one ``datagen`` table with views ``person``, ``auction``, ``bid`` is
  three filesystem tables of the same names and columns, each one Parquet file (every batch
  file concatenated in order before anything is timed: one split, read in event order),
  ``WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`` as Nexmark declares it;
  ``side_input`` (q13) reads the generated CSV with today's connector options. (q13 fails
  all the same: its processing-time temporal join needs a lookup source, which the legacy
  filesystem connector it was written for was and Flink 2's filesystem table is not.)
- **Sinks**: each ``blackhole`` (q10: partitioned CSV) sink keeps its columns and becomes a
  filesystem sink: Parquet for a query whose result only appends, ``debezium-json`` (a
  changelog) for one that updates its rows (``UPDATING``: q4, q9, q15–q18, …), which
  Parquet cannot take.
- **q14's** ``count_char`` is the repository's Java UDF; here a Python UDF of the same rule.

Every job: streaming mode, parallelism ``--parallelism``, RocksDB state and an exactly-once
checkpoint every 3 minutes as Nexmark's own configuration has (a run here finishes within
its final checkpoint, which commits the sink's files). At the end of its bounded input Flink
emits every window, the ones no later event closed too. ``seconds``: from submitting the
INSERT (planning and the mini-cluster's start included) until the job finished. With
``--warm`` each query first runs once on that stream, untimed, in the same process.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parents[1]
QUERY_TEXT = Path(__file__).resolve().parent / "flink_sql"
SOURCE_COLUMNS = {
    "person": "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, "
              "state STRING, `dateTime` TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, "
               "reserve BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, "
               "category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
           "`dateTime` TIMESTAMP(3), extra STRING",
}
WATERMARK = "WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND"
_SINK = re.compile(r"CREATE\s+TABLE\s+(nexmark_q\d+)\s*\(", re.IGNORECASE)
#: the queries whose result updates its rows (a top-N, a deduplication, an aggregate of a
#: regular join or of an unwindowed GROUP BY): a Parquet sink takes only appends. (The
#: planner refuses most of them on a Parquet sink, but not q9's top-1, which it then writes
#: as if each update were a new row.)
UPDATING = frozenset({"q4", "q6", "q9", "q15", "q16", "q17", "q18", "q19"})


def concatenated(stream: Path, work: Path) -> dict[str, Path]:
    """Each kind's batch files as one Parquet file under ``work`` (instants as INT96, the
    timestamp encoding Flink's Parquet reader takes), and q13's side input; untimed."""
    inputs = {}
    for kind in SOURCE_COLUMNS:
        files = sorted((stream / "files" / kind).glob("batch-*.parquet"))
        if not files:
            raise SystemExit(f"no batch-*.parquet under {stream / 'files' / kind}")
        table = pa.concat_tables(pq.read_table(path) for path in files)
        inputs[kind] = work / "input" / kind / f"{kind}.parquet"
        inputs[kind].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, inputs[kind], use_deprecated_int96_timestamps=True)
    inputs["side_input"] = stream / "files" / "side_input"
    return inputs


def source_ddl(kind: str, path: Path) -> str:
    if kind == "side_input":
        return ("CREATE TABLE side_input (key BIGINT, `value` STRING) WITH ("
                f"'connector' = 'filesystem', 'path' = '{path.as_uri()}', 'format' = 'csv', "
                "'csv.ignore-parse-errors' = 'true')")  # the CSV's header line
    return (f"CREATE TABLE {kind} ({SOURCE_COLUMNS[kind]}, {WATERMARK}) WITH ("
            f"'connector' = 'filesystem', 'path' = '{path.parent.as_uri()}', 'format' = 'parquet')")


def statements(name: str) -> list[str]:
    """The query file's statements, comments dropped."""
    text = "\n".join(line for line in (QUERY_TEXT / f"{name}.sql").read_text().splitlines()
                     if not line.lstrip().startswith("--"))
    return [part.strip() for part in text.split(";") if part.strip()]


def sink_ddl(statement: str, output: Path, fmt: str) -> str:
    """The query's sink with its columns as declared and a filesystem connector."""
    found = _SINK.search(statement)
    assert found is not None, statement
    depth, end = 1, found.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(statement[end], 0)
        end += 1
    return (f"{statement[:end]} WITH ('connector' = 'filesystem', "
            f"'path' = '{output.as_uri()}', 'format' = '{fmt}')")


def table_environment(parallelism: int, checkpoints: Path, jars: list[Path]):
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    conf = Configuration()
    for key, value in {
        "python.executable": sys.executable, "python.client.executable": sys.executable,
        "parallelism.default": str(parallelism), "execution.runtime-mode": "STREAMING",
        "execution.checkpointing.interval": "3 min", "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": checkpoints.as_uri(), "state.backend.type": "rocksdb",
        "state.backend.incremental": "true", "table.local-time-zone": "UTC",
        "restart-strategy.type": "none", "pipeline.jars": ";".join(j.as_uri() for j in jars),
    }.items():
        conf.set_string(key, value)
    return TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())


def count_char():
    """q14's UDF: how many times ``character`` occurs in ``s`` (0 for null)."""
    from pyflink.table import DataTypes
    from pyflink.table.udf import udf
    return udf(lambda s, character: 0 if s is None else s.count(character),
               result_type=DataTypes.BIGINT())


def run_query(name: str, inputs: dict[str, Path], work: Path, parallelism: int,
              jars: list[Path]) -> dict:
    """One query, to the end of its input; where its output is and the seconds it took."""
    fmt = "debezium-json" if name in UPDATING else "parquet"
    output = work / "output" / name / fmt
    shutil.rmtree(output, ignore_errors=True)  # a part file left by an earlier run is a row
    env = table_environment(parallelism, work / "checkpoints" / name, jars)
    for kind in SOURCE_COLUMNS:
        env.execute_sql(source_ddl(kind, inputs[kind]))
    env.create_temporary_function("count_char", count_char())
    insert = None
    for statement in statements(name):
        head = statement.split("(")[0].upper().split()
        if head[:2] == ["CREATE", "FUNCTION"]:
            continue  # registered above, in Python
        if head[:3] == ["CREATE", "TABLE", "SIDE_INPUT"]:
            env.execute_sql(source_ddl("side_input", inputs["side_input"]))
        elif _SINK.match(statement):
            env.execute_sql(sink_ddl(statement, output, fmt))
        elif head[0] == "INSERT":
            insert = statement
        else:
            env.execute_sql(statement)
    if insert is None:
        raise SystemExit(f"{QUERY_TEXT / name}.sql has no INSERT")
    started = time.perf_counter()
    env.execute_sql(insert).wait()
    return {"query": name, "seconds": time.perf_counter() - started, "output": str(output),
            "format": fmt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help="a folder bench/nexmark/streams.py wrote")
    parser.add_argument("--work", required=True, help="scratch: input copy, outputs, checkpoints")
    parser.add_argument("--queries", required=True, help="comma-separated names")
    parser.add_argument("--warm", help="a smaller stream each query runs on first, untimed")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    from flink_peer import ensure_jars  # PyFlink's: this venv's only
    jars = ensure_jars()
    work = Path(args.work)
    inputs = concatenated(Path(args.stream), work / "stream")
    warm = concatenated(Path(args.warm), work / "warm") if args.warm else None
    for name in args.queries.split(","):
        if warm is not None:
            run_query(name, warm, work / "warm", args.parallelism, jars)
        print(json.dumps(run_query(name, inputs, work / "stream", args.parallelism, jars)),
              flush=True)


if __name__ == "__main__":
    main()
