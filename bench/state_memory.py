"""Driver memory per million keys of numeric state: what holding them in a run costs.

A store is handed ``--keys`` stored integer totals (as an executor task is, so no Spark is
involved), a run's batch reads every one of them (``get_values``), sets each to a new number
(``set_values``) and encodes the changes for a checkpoint (``changed_rows``), with the state
held as a Python object per key, and as columns (``--columns``: as a vectorized map's
numbers are, read and set as whole Series). The process's
resident memory is sampled after each step (freed memory handed back first); reported is the
growth over the baseline, per million keys. Then the changes are committed to a ``_state``
table as a driver-mode checkpoint does, and its data files' bytes reported per million keys
(what the state costs on disk). Each as JSON text, and typed (``state_type=int``: int64 key and
value columns, Arrow change rows). ``--checkout DIR`` measures another checkout's
store in a child process with this interpreter (before and after, side by side).

    .venv/bin/python bench/state_memory.py --keys 1000000 --checkout /tmp/before
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    """Resident memory now, after handing back what was freed (Arrow's pool, malloc's arenas):
    what the state holds, not what a step allocated for a moment."""
    import ctypes

    import pyarrow as pa
    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def measure(keys: int, columns: bool, typed: bool = False) -> dict:
    import numpy as np
    import pandas as pd

    numbers = np.arange(keys)
    state = _typed_state(numbers, columns) if typed else _json_state(numbers, columns)
    gc.collect()
    base = rss_mb()
    if columns:
        state.get_many(pd.Index(numbers))
        read = rss_mb()
        state.set_many(pd.Series(numbers * 7 + 1, index=numbers))
    else:
        wanted = numbers.tolist()
        state.get_values(wanted)
        read = rss_mb()
        state.set_values(wanted, (numbers * 7 + 1).tolist())
    held = rss_mb()
    changed = state.changed_rows()
    encoded = rss_mb()
    per_million = 1_000_000 / keys
    return {"keys": keys, "read MB/M keys": (read - base) * per_million,
            "read+set MB/M keys": (held - base) * per_million,
            "with encoded changes MB/M keys": (encoded - base) * per_million,
            "_state on disk MB/M keys": stored_bytes(changed) / 2**20 * per_million}


def _json_state(numbers, columns: bool):
    """The state of operator ``sum`` over ``numbers`` stored as JSON text, handed in as an
    executor task gets it."""
    import pandas as pd

    from state import StateStore
    rows = pd.DataFrame({"operator": "sum", "key": numbers.astype(str).astype(object),
                         "value": (numbers * 7).astype(str).astype(object)})
    return StateStore.of_rows(rows).operator("sum", 0, columns=columns)


def _typed_state(numbers, columns: bool):
    """The state of operator ``sum`` over ``numbers`` stored typed (``state_type=int``: int64
    key and value columns), read through a loader over those columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from state.contract.types import declared
    from state.run.encodings import TypedEncoding
    from state.run.store import OperatorState
    stored = pa.table({"k__sum": numbers, "v__sum": numbers * 7})

    def load(keys, key_column, value_columns):
        return stored if keys is None else stored.filter(pc.is_in(stored[key_column], value_set=keys))
    encoding = TypedEncoding("sum", declared(int), key_type=pa.int64(), key_groups=256, loader=load)
    return OperatorState("sum", 0, encoding, columns)


def stored_bytes(changed) -> int:
    """The bytes of the ``_state`` data files a checkpoint writes for ``changed`` (its rows of
    operator ``sum``: text as pandas, or typed as Arrow), committed as a driver-mode run
    commits them (delta-rs, no Spark)."""
    import tempfile

    import pandas as pd
    import pyarrow.compute as pc

    from state import CheckpointLog, PipelineLayout, StateRows, delta_io
    from state.commit.record import new_checkpoint
    rows = StateRows(changed) if isinstance(changed, pd.DataFrame) else StateRows(
        pd.DataFrame(columns=["operator", "key", "value", "deleted"]), (changed,))
    with tempfile.TemporaryDirectory() as warehouse:
        layout = PipelineLayout(warehouse, "memory")
        first = new_checkpoint(None, batch_id=1, offsets={}, tracked={}, markers={}, run_id="bench")
        CheckpointLog(None, layout).commit_changes(first, rows)
        files = delta_io.file_statistics(layout.state)
        return pc.sum(files.filter(pc.equal(files["partition.operator"], "sum"))["size_bytes"]).as_py()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--checkout")
    parser.add_argument("--child", choices=["objects", "columns", "typed objects", "typed columns"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.keys, columns=args.child.endswith("columns"),
                                 typed=args.child.startswith("typed"))))
        return
    arms = [(f"this checkout, {held}", ROOT, held)
            for held in ("objects", "columns", "typed objects", "typed columns")]
    if args.checkout:  # an earlier release holds objects only
        arms.append(("--checkout, objects", Path(args.checkout).resolve(), "objects"))
    for label, checkout, held in arms:
        env = dict(os.environ, PYTHONPATH=str(checkout))
        done = subprocess.run([sys.executable, __file__, "--keys", str(args.keys), "--child", held],
                              env=env, capture_output=True, text=True, check=True, cwd=checkout)
        print(json.dumps({"arm": f"{label} ({checkout})", **json.loads(done.stdout)}))


if __name__ == "__main__":
    main()
