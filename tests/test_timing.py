"""tests/timing.py: the per-package times .ci/run prints after the suite."""

import doctest

from tests import timing

REPORT = """<testsuites><testsuite name="pytest">
<testcase classname="tests.ops.sql.test_windows" name="a" time="1.5"/>
<testcase classname="tests.ops.sql.test_joins.TestInner" name="b" time="2.0"/>
<testcase classname="tests.test_docs" name="c" time="0.25"/>
</testsuite></testsuites>"""


def test_times_add_up_by_package(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(REPORT)

    assert timing.seconds_by_package(str(report)) == {"tests/ops/sql": (2, 3.5),
                                                      "tests/test_docs.py": (1, 0.25)}
    lines = timing.table(str(report)).splitlines()
    assert lines[1].split() == ["tests/ops/sql", "2", "0:04"]
    assert lines[-1].split() == ["all", "3", "0:04"]


def test_examples():
    assert doctest.testmod(timing).failed == 0
