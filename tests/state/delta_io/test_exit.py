"""A process whose commits hand log checkpoints to the background thread (on an object store)
ends cleanly: it does not die of SIGSEGV or SIGABRT after its work, as it did (about half of
such exits) when the interpreter finalized while that thread was inside delta-rs."""

import subprocess
import sys
import textwrap

from state import delta_io
from tests.spark_settings import ROOT

# Every commit of a table with checkpointInterval=1 hands its log checkpoint to the background,
# so at the last commit's return the thread is writing one, or about to.
CHILD = textwrap.dedent("""
    import sys
    import pandas as pd
    from state import delta_io
    from state.delta_io import Creation
    path, commits = sys.argv[1], int(sys.argv[2])
    create = Creation(fields=({"name": "n", "type": "long"},),
                      properties=(("delta.checkpointInterval", "1"),))
    for n in range(commits):
        assert delta_io.append(pd.DataFrame({"n": [n]}), path, create=create) is True
    print("DONE", flush=True)
""")
EXITS = 6


def test_a_process_ending_while_a_log_checkpoint_is_written_exits_cleanly(s3_warehouse):
    for attempt in range(EXITS):
        path = f"{s3_warehouse}/exits_{attempt}"
        done = subprocess.run([sys.executable, "-c", CHILD, path, "12"], cwd=ROOT, timeout=300,
                              capture_output=True, text=True)
        assert (done.returncode, done.stdout.strip()) == (0, "DONE"), (attempt, done.stderr[-3000:])
    version, rows = delta_io.snapshot(path)  # and its commits are all there
    assert (version, sorted(rows.column("n").to_pylist())) == (11, list(range(12)))
