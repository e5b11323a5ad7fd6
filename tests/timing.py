"""Where a test run's time went, by package: read a pytest ``--junitxml`` report and print each
test folder's summed time (setup, call and teardown of its tests), slowest first, so a
regression of the loop shows in CI's own log (``.ci/run`` prints it after the suite).

    .venv/bin/python -m pytest --junitxml=/tmp/run.xml
    .venv/bin/python -m tests.timing /tmp/run.xml

Under ``pytest -n 2`` (xdist) the packages' times add up to more than the wall time: two
workers' tests ran side by side.
"""

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator


def test_times(report: str) -> Iterator[tuple[str, str, float]]:
    """``(classname, name, seconds)`` of each test case in the junit report at ``report``
    (``tests/tiers.py`` picks the slow ones from these)."""
    for case in ET.parse(report).iter("testcase"):
        yield case.get("classname", ""), case.get("name", ""), float(case.get("time", 0))


def package_of(classname: str) -> str:
    """The test folder a junit ``classname`` (``tests.ops.sql.test_x`` or, for a test class,
    ``tests.ops.sql.test_x.TestY``) belongs to; a module directly under ``tests`` is its own.

    >>> package_of("tests.ops.sql.test_windows"), package_of("tests.test_docs")
    ('tests/ops/sql', 'tests/test_docs.py')
    >>> package_of("tests.state.test_log.TestReplay")
    'tests/state'
    """
    parts = classname.split(".")
    modules = [i for i, part in enumerate(parts) if part.startswith("test_")]
    module = modules[0] if modules else len(parts) - 1
    if module == 1:
        return "/".join(parts[:2]) + ".py"
    return "/".join(parts[:module])


def seconds_by_package(report: str) -> dict[str, tuple[int, float]]:
    """``{package: (tests, seconds)}`` of a junit report."""
    found: dict[str, list[float]] = defaultdict(list)
    for classname, _, seconds in test_times(report):
        found[package_of(classname)].append(seconds)
    return {package: (len(times), sum(times)) for package, times in found.items()}


def table(report: str) -> str:
    """The report's packages, slowest first, as aligned text lines with a total."""
    rows = sorted(seconds_by_package(report).items(), key=lambda item: -item[1][1])
    width = max((len(package) for package, _ in rows), default=10)
    lines = [f"{'package':<{width}}  tests      time"]
    lines += [f"{package:<{width}}  {count:5d}  {_clock(seconds)}"
              for package, (count, seconds) in rows]
    total_tests = sum(count for _, (count, _) in rows)
    total = sum(seconds for _, (_, seconds) in rows)
    return "\n".join([*lines, f"{'all':<{width}}  {total_tests:5d}  {_clock(total)}"])


def _clock(seconds: float) -> str:
    """``_clock(125.4)`` -> ``' 2:05'``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes:5d}:{rest:02d}"


if __name__ == "__main__":
    print(table(sys.argv[1]))
