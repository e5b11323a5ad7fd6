"""The files a peer system (PyFlink, Bytewax) reads and writes in ``bench/peers.py``, and the
result line it prints. Only pandas and pyarrow: the peers import this from their own virtual
envs (``bench/install_peers``), where neither Spark nor lakestream is installed.

Input: a folder of ``batch-00000.parquet``, ``batch-00001.parquet``… (the same frames, in the
same order, that lakestream and Spark read as one Delta commit each). Rows of the running sum
are ``k, x, seq``; rows of the windowed workload also have ``ts`` (milliseconds since the epoch,
UTC). ``seq`` numbers every event of the input once, in input order.

Output: a folder of Parquet files, any names. Running sum: ``seq, k, total`` (one row per
event); windows: ``k, window_start`` (milliseconds since the epoch), ``n, total``.

    >>> import tempfile, pandas as pd
    >>> folder = tempfile.mkdtemp()
    >>> write_input([pd.DataFrame({"k": [1, 1], "x": [2, 3], "seq": [0, 1]})], folder)
    1
    >>> [len(frame) for frame in read_input(folder)]
    [2]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

RUNNING_SUM_COLUMNS = ("seq", "k", "total")
WINDOW_COLUMNS = ("k", "window_start", "n", "total")


def write_input(frames, folder: str) -> int:
    """One Parquet file per frame, in order; a ``ts`` column of timestamps is stored as epoch
    milliseconds. Returns the number of files."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    count = 0
    for count, frame in enumerate(frames, start=1):
        if "ts" in frame and not pd.api.types.is_integer_dtype(frame["ts"]):
            frame = frame.assign(ts=_epoch_ms(frame["ts"]))
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False),
                       f"{folder}/batch-{count - 1:05d}.parquet")
    return count


def input_files(folder: str) -> list[Path]:
    """The input's batch files, in order."""
    return sorted(Path(folder).glob("batch-*.parquet"))


def read_input(folder: str):
    """The input's frames, one per batch file, in order."""
    for path in input_files(folder):
        yield pq.read_table(path).to_pandas()


def read_output(folder: str, columns=RUNNING_SUM_COLUMNS) -> pd.DataFrame:
    """Every Parquet file under ``folder`` (recursively: sinks write sub-folders), ``columns``
    as int64, sorted by them."""
    files = sorted(p for p in Path(folder).rglob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
    frame = pd.concat([pq.read_table(p).to_pandas() for p in files], ignore_index=True)
    if "window_start" in frame and not pd.api.types.is_integer_dtype(frame["window_start"]):
        frame["window_start"] = _epoch_ms(frame["window_start"])
    return frame[list(columns)].astype("int64").sort_values(list(columns), ignore_index=True)


def print_result(**result) -> None:
    """The peer's last line on stdout: one JSON object (events, seconds, latencies, versions)."""
    print("RESULT " + json.dumps(result, default=float), flush=True)
    sys.stdout.flush()


def parse_result(stdout: str) -> dict:
    """The result a peer printed with :func:`print_result`."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise ValueError(f"the peer printed no RESULT line; its output ended with: {stdout[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _epoch_ms(values: pd.Series):
    stamps = pd.to_datetime(values, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
