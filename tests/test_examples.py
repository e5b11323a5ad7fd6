"""Every ``>>>`` example in a docstring of the project's packages runs, and shows what it says.

Examples see ``spark`` (the test session) and a fresh warehouse (``$LAKESTREAM_WAREHOUSE`` and the
working directory are a temporary folder), as a user's notebook would.
"""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("state", "ops", "analytics", "assets", "dagster_project")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def module_names() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        root = importlib.import_module(package)
        names += [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")
                  if not info.name.endswith("__main__")]
    return names


def examples(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    return [test for test in doctest.DocTestFinder().find(module, module_name) if test.examples]


WITH_EXAMPLES = [name for name in module_names() if examples(name)]


def test_the_public_api_has_examples():
    assert {"ops", "ops.pipeline", "ops.testing", "ops.sql", "state.faults"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("module_name", WITH_EXAMPLES)
def test_docstring_examples_run(module_name, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in examples(module_name):
        test.globs = {**test.globs, "spark": spark}
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
