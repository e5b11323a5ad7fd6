"""Processes writing one table at once, for the tests of delta-rs's commits."""

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

#: Appends ``count`` rows to ``path`` as ``writer``, one commit each (argv: path, writer, count).
WRITER = textwrap.dedent("""
    import sys
    import pandas as pd
    from state.lake import direct

    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        rows = pd.DataFrame({"writer": [writer], "i": [i]})
        done = direct.append(rows, path, txn=(writer, i), user_metadata=f"{writer}-{i}",
                             create=direct.NewTable())
        assert done is direct.Outcome.COMMITTED, done
""")

#: Adds columns ``count`` times as ``writer``: one of its own and one every writer adds, each
#: time (argv: path, writer, count).
COLUMN_ADDER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from state import delta_io

    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        assert delta_io.add_columns(path, [pa.field(f"own_{writer}_{i}", pa.int64()),
                                           pa.field(f"shared_{i}", pa.float64())])
""")


def started(script, path, writer, count):
    """``script`` started in a process of its own as ``writer``, writing ``count`` times."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", script, path, writer, str(count)], env=env,
                            stderr=subprocess.PIPE, text=True)


def finished(process):
    """Wait for a process :func:`started` and check it succeeded."""
    assert process.wait(timeout=300) == 0, process.stderr.read()[-2000:]


def racing(script, path, writers, count):
    """``script`` run by one process per writer name at once, each writing ``count`` times."""
    for process in [started(script, path, name, count) for name in writers]:
        finished(process)
