"""What a checkpoint writes for a ``MapState`` of 1,000 entries per key when one entry changes
per batch (issue 66's second target: one entry's bytes per key, not the map's).

A processor fills each key's map with ``--entries`` entries (values spread, so that compression
does not hide their size) in its first batch, then updates
one entry per key per batch. Each batch is checkpointed; for each checkpoint this prints the
bytes its ``_state`` commit added (the Delta log's ``add`` sizes) and their share per key,
beside what one entry's value is worth (its pickled bytes): the ratio is how many entries'
bytes a one-entry update costs.

    .venv/bin/python bench/tws_map_bytes.py                      # 100 keys, 1,000 entries, 4 batches
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from _common import headline, print_table, write_results  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

import ops as sp  # noqa: E402


class EntryPerBatch(StatefulProcessor):
    """A key's map of ``entries`` entries, one of them set to the batch's ``x`` each batch."""

    entries = 1_000

    def init(self, handle):
        self.map = handle.getMapState("entries", "i long", "v long")

    def handleInputRows(self, key, rows, timerValues):
        x = int(pd.concat(list(rows))["x"].iloc[-1])
        if not self.map.exists():  # values that do not compress away (a map of zeros would)
            for i in range(self.entries):
                self.map.updateValue((i,), ((i * 7_919 + key[0] * 104_729) % 1_000_003,))
        else:
            self.map.updateValue((x % self.entries,), (x,))
        yield pd.DataFrame({"k": [key[0]], "x": [x]})


def commit_bytes(table: Path) -> dict[int, int]:
    """Bytes of the files each commit of the Delta table at ``table`` added, by version."""
    added = {}
    for log in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        added[int(log.stem)] = sum(action["add"]["size"] for action in actions if "add" in action)
    return added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--entries", type=int, default=1_000)
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    EntryPerBatch.entries = args.entries
    spark = sp.spark_session()
    warehouse = tempfile.mkdtemp(prefix="bench_tws_map_")
    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"},
                                      max_versions=1).group_by("k")
                .transform_with_state(EntryPerBatch(), "k long, x long", name="entries")
                .write.to_delta("out")).named("tws_map_bytes")
    state = Path(pipeline.layout(warehouse).state)
    one_entry = len(pickle.dumps(((7,), (7,))))
    rows = []
    for batch in range(1, args.batches + 1):
        pipeline.publish(spark, [{"k": k, "x": batch} for k in range(args.keys)], warehouse)
        pipeline.run_once(spark, warehouse)
        written = commit_bytes(state)
        last = written[max(written)]
        rows.append([batch, "fill" if batch == 1 else "one entry", last, last / args.keys,
                     last / args.keys / one_entry])
    print_table(f"MapState of {args.entries:,} entries x {args.keys:,} keys: bytes a "
                f"checkpoint adds to _state (one entry pickled: {one_entry} B)",
                ["batch", "change per key", "bytes", "bytes_per_key", "x one entry"], rows)
    write_results("tws_map_bytes", {"keys": args.keys, "entries": args.entries, "rows": rows})
    updates = [row[4] for row in rows[1:]]
    headline("tws_map_bytes", f"a one-entry update writes {min(updates):.0f}x one entry's "
             "bytes per key")


if __name__ == "__main__":
    main()
