"""Flink's Nexmark answers, run from the project's interpreter: each query in a Flink process
of its own (``bench/nexmark/flink.py`` under ``.venv-peers/flink``), its output read back and
put in the oracle's terms (names, types, which rows), so one check says whether it agrees.

A changelog (``debezium-json``) output is folded into the rows it leaves: each ``c`` adds its
``after``, each ``d`` takes its ``before`` away; the sum of those counts does not depend on
the order of the sink's files.

>>> fold([{"op": "c", "after": {"k": 1}}, {"op": "d", "before": {"k": 1}},
...       {"op": "c", "after": {"k": 2}}])
   k
0  2
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from bench._common import peak_memory
from bench.nexmark import oracle
from bench.nexmark.generator import Events
from bench.nexmark.queries import WINDOW_SECONDS

REPO = Path(__file__).resolve().parents[2]
FLINK_PYTHON = REPO / ".venv-peers" / "flink" / "bin" / "python"
SCRIPT = Path(__file__).resolve().parent / "flink.py"


@dataclass(frozen=True)
class FlinkRun:
    """One query's run on Flink: its rows (in Flink's names), seconds, peak RSS of the process
    tree (the Python client and the mini-cluster's JVM)."""

    rows: pd.DataFrame
    seconds: float
    peak_rss_mb: float


def run(name: str, stream: str, work: str, warm: str | None = None,
        parallelism: int = 2) -> FlinkRun:
    """Query ``name`` on Flink in a process of its own; raises with Flink's error output when
    the job fails."""
    if not FLINK_PYTHON.exists():
        raise FileNotFoundError(f"{FLINK_PYTHON} missing: run bash bench/install_peers")
    command = [str(FLINK_PYTHON), str(SCRIPT), "--stream", stream, "--work", work,
               "--queries", name, "--parallelism", str(parallelism)]
    if warm:
        command += ["--warm", warm]
    measured: dict = {}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with peak_memory(measured, pid=process.pid):
        out, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        raise RuntimeError(f"Flink's {name} failed: {_reason(err)}")
    result = json.loads(out.strip().splitlines()[-1])
    return FlinkRun(read(Path(result["output"]), result["format"]), result["seconds"],
                    measured["peak_rss_mb"])


def _reason(stderr: str) -> str:
    """What went wrong, from a failed run's error output: the last exception's message (a
    Python traceback's last line; a Java exception's inside it)."""
    said = [line for line in stderr.splitlines() if line[:1].strip() and ": " in line]
    return said[-1].rsplit("Exception: ", 1)[-1] if said else stderr[-2000:]


def read(folder: Path, fmt: str) -> pd.DataFrame:
    """The rows a Flink filesystem sink left in ``folder`` (its committed part files)."""
    parts = sorted(p for p in folder.rglob("part-*") if p.is_file())
    if fmt == "parquet":
        tables = [pq.read_table(p).to_pandas() for p in parts]
        return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    changes = [json.loads(line) for p in parts for line in p.read_text().splitlines() if line]
    return fold(changes)


def latest_per_key(rows: pd.DataFrame, key: str) -> pd.DataFrame:
    """An upsert stream's rows: the last one per ``key`` (in the order the sink wrote them;
    one key's rows come from one subtask, so one file, in order)."""
    return rows.drop_duplicates(key, keep="last").reset_index(drop=True)


def fold(changes: list[dict]) -> pd.DataFrame:
    """The rows a debezium-style changelog leaves (see the module's docstring)."""
    counts: Counter = Counter()
    columns: list[str] = []
    for change in changes:
        added = change["op"] == "c"  # Flink writes an update as a "d" then a "c"
        row = change["after"] if added else change["before"]
        columns = columns or list(row)
        counts[tuple(row.values())] += 1 if added else -1
    rows = [key for key, count in counts.items() for _ in range(count)]
    return pd.DataFrame(rows, columns=columns)


def as_oracle(name: str, rows: pd.DataFrame, stream_time: pd.Timestamp) -> pd.DataFrame:
    """Flink's rows of query ``name`` in the oracle's names and types: its sink's column names
    mapped, instants as UTC, decimals as doubles, and (q11) only the sessions the oracle calls
    closed by ``stream_time``, since Flink's final watermark closes every one."""
    out = rows.rename(columns=_NAMES.get(name, {}))
    if name in _UPSERT_KEYS:
        out = latest_per_key(out, _UPSERT_KEYS[name])
    for column in out.columns:
        if out[column].map(lambda v: type(v).__name__).eq("Decimal").any():
            out[column] = out[column].astype("float64")
        elif _is_instant(out[column]):
            out[column] = pd.to_datetime(out[column], utc=True, format="ISO8601")  # ms or none
    return _ADJUST.get(name, lambda frame, _: frame)(out, stream_time)


def expected_of_flink(name: str, batches: list[Events]) -> pd.DataFrame:
    """The oracle's answer to query ``name`` as Flink's text and its end of input have it: its
    sinks declare an average of BIGINT prices as BIGINT (Flink's AVG of a BIGINT truncates);
    what Flink's query does not select is dropped (q8's count, q5's window); and q5's and q7's
    windows are every one, since Flink's final watermark closes those stream time left open."""
    out = (oracle.every_window(name, batches) if name in ("q5", "q7")
           else oracle.answer(name, batches))
    for column in _TRUNCATED.get(name, ()):
        out[column] = out[column].astype("int64")
    return out.drop(columns=[c for c in _NOT_SELECTED.get(name, ()) if c in out.columns])


def _is_instant(values: pd.Series) -> bool:
    return pd.api.types.is_datetime64_any_dtype(values.dtype) or (
        values.dtype == object and values.map(type).eq(str).all() and len(values) > 0
        and values.str.match(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d").all())


def _q8(rows: pd.DataFrame, _: pd.Timestamp) -> pd.DataFrame:
    return rows.assign(stime=rows["stime"].astype("datetime64[ms, UTC]").astype("int64"))


def _q11(rows: pd.DataFrame, stream_time: pd.Timestamp) -> pd.DataFrame:
    gap = pd.Timedelta(seconds=WINDOW_SECONDS)
    out = rows.assign(window_end=rows["window_end"] - gap)  # SESSION_END is the last bid + gap
    return out[out["window_end"] + gap < stream_time]


_NAMES = {"q4": {"id": "category", "final": "avg_final"},
          # q7's INSERT selects auction, price, bidder into the sink's auction, bidder, price
          "q7": {"bidder": "price", "price": "bidder"},
          "q10": {"dt": "day", "hm": "minute"},
          "q11": {"starttime": "window_start", "endtime": "window_end"}}
_ADJUST: dict[str, Callable[[pd.DataFrame, pd.Timestamp], pd.DataFrame]] = {"q8": _q8,
                                                                              "q11": _q11}
#: q9's top-1 per auction reaches its changelog sink as an upsert stream on ``id``: each
#: better bid a ``c`` with no ``d`` of the one it displaces (Flink 2.3 plans this top-1 so;
#: its aggregates, q4, q15–q17, and q18's deduplication do retract)
_UPSERT_KEYS = {"q9": "id"}
_TRUNCATED = {"q4": ("avg_final",), "q17": ("avg_price",)}
_NOT_SELECTED = {"q5": ("window_start",), "q8": ("auctions",)}
