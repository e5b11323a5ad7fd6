"""Writes ``tests/full_tier.txt``: the tests that took more than ``SECONDS`` in a full run (a
pytest ``--junitxml`` report), which ``bash .ci/test --fast`` leaves out besides the crash tests
and ``FULL_TIER_ONLY`` (tests/conftest.py).

    .venv/bin/python -m pytest --junitxml=/tmp/full.xml   # the whole suite, measured
    .venv/bin/python -m tests.tiers /tmp/full.xml
"""

import sys
from pathlib import Path

from tests.timing import test_times

SECONDS = 3.4  # on the 2-core reference machine: the fast tier then runs in about five minutes
LIST = Path(__file__).with_name("full_tier.txt")


def slow_tests(report: str) -> list[str]:
    """Node ids (``tests/x/test_y.py::name``) of the report's tests over ``SECONDS``."""
    return sorted(f"{classname.replace('.', '/')}.py::{name}"
                  for classname, name, seconds in test_times(report) if seconds > SECONDS)


if __name__ == "__main__":
    tests = slow_tests(sys.argv[1])
    LIST.write_text(f"# tests over {SECONDS:.1f} s in a full run: written by tests/tiers.py\n"
                    + "".join(f"{test}\n" for test in tests))
    print(f"{len(tests)} tests in {LIST}")
