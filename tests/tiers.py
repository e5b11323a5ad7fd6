"""Writes ``tests/full_tier.txt``: the tests that took more than ``SECONDS`` in any of the runs
given (pytest ``--junitxml`` reports, of a full run or a fast one), which ``bash .ci/test --fast``
leaves out besides the crash tests and ``FULL_TIER_ONLY`` (tests/conftest.py).

    bash .ci/test --junitxml=/tmp/full.xml   # the whole suite, measured
    .venv/bin/python -m tests.tiers /tmp/full.xml
"""

import sys
from pathlib import Path

from tests.timing import test_times

# on the 2-core reference machine, two workers: the fast tier's tests then add up to about five
# minutes of one worker's time (measured: 2026-12-02, 80 tests over it held 70% of the tier's)
SECONDS = 5.0
LIST = Path(__file__).with_name("full_tier.txt")


def slow_tests(*reports: str) -> list[str]:
    """Node ids (``tests/x/test_y.py::name``) of the tests over ``SECONDS`` in any of ``reports``."""
    return sorted({f"{classname.replace('.', '/')}.py::{name}"
                   for report in reports
                   for classname, name, seconds in test_times(report) if seconds > SECONDS})


if __name__ == "__main__":
    tests = slow_tests(*sys.argv[1:])
    LIST.write_text(f"# tests over {SECONDS:.1f} s in a measured run: written by tests/tiers.py\n"
                    + "".join(f"{test}\n" for test in tests))
    print(f"{len(tests)} tests in {LIST}")
