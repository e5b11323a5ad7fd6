"""What a run that touches a few keys pays to read them from a large ``_state`` that was never
compacted, and what the checkpoint that wrote it paid.

One checkpoint of ``--keys`` keys (one operator, JSON storage) is committed by the driver's
path (delta-rs, no Spark); then the stored values of 10, 100 and 1,000 of its keys, and of all
of them, are read as a cold run's first batch reads them (``state.read.lookup.stored_values``),
each ``--repeats`` times (the median is printed). ``--before DIR`` runs the same in another
checkout (``git worktree add DIR <commit>``), alternating with this one, for figures side by
side in one run. Each arm is a fresh child process per round: nothing is cached between arms.

    .venv/bin/python bench/state_reads.py --keys 1000000 --before /work/wt-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import print_table, write_results  # noqa: E402

ASKED = (10, 100, 1_000)
GROUPS = 256


def measure(keys: int, repeats: int) -> dict[str, float]:
    """In the child: commit one checkpoint of ``keys`` keys, then time the reads."""
    import numpy as np
    import pandas as pd

    import state
    from state import Checkpoint, CheckpointLog, PipelineLayout
    from state.read.lookup import stored_values

    assert Path(state.__file__).is_relative_to(Path.cwd()), f"{state.__file__} is not the arm's"

    texts = np.random.default_rng(3).permutation(keys).astype(str)  # in the order a batch met them
    rows = pd.DataFrame({"operator": "sums", "key": texts, "value": texts, "deleted": False})
    layout = PipelineLayout(tempfile.mkdtemp(prefix="state-reads-"), "reads")
    started = time.perf_counter()
    CheckpointLog(None, layout).commit(  # type: ignore[arg-type]
        Checkpoint(checkpoint_id=1, batch_id=1, run_id="bench", key_groups=GROUPS), rows)
    figures = {"commit_s": time.perf_counter() - started}
    chosen = np.random.default_rng(7)
    for count in (*ASKED, None):
        asked = None if count is None else list(texts[chosen.choice(keys, count, replace=False)])
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            found = stored_values(layout.state, "sums", 1, asked, GROUPS)
            seconds.append(time.perf_counter() - started)
        # a --before checkout's lookup gave the rows themselves; since 2026-12-03, a Found
        rows = found.rows if hasattr(found, "rows") else found
        assert rows is not None and rows.num_rows == (keys if count is None else count)
        figures[f"read_{count or 'all'}_s"] = statistics.median(seconds)
    return figures


def run_arm(checkout: Path, keys: int, repeats: int) -> dict[str, float]:
    """One round of ``checkout``'s state package, in a child process of its own."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, __file__, "--child", "--keys", str(keys), "--repeats",
                           str(repeats)], env=env, cwd=checkout, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each arm")
    parser.add_argument("--before", help="another checkout to run side by side")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.keys, args.repeats)))
        return
    arms = {"now": ROOT, **({"before": Path(args.before).resolve()} if args.before else {})}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for _ in range(args.rounds):  # alternating, so a slower minute of the machine hits both
        for name, checkout in arms.items():
            rounds[name].append(run_arm(checkout, args.keys, args.repeats))
    figures = {name: {key: statistics.median(r[key] for r in found) for key in found[0]}
               for name, found in rounds.items()}
    columns = list(figures["now"])
    rows = [[name, *(f"{figures[name][key]:.4f}" for key in columns)] for name in arms]
    if "before" in figures:
        rows.append(["now / before", *(f"{figures['now'][key] / figures['before'][key]:.2f}"
                                       for key in columns)])
    print_table(f"{args.keys:,} keys in one checkpoint, never compacted (seconds, median of "
                f"{args.rounds} rounds x {args.repeats})", ["arm", *columns], rows)
    write_results("state_reads", {"keys": args.keys, "figures": figures})


if __name__ == "__main__":
    main()
