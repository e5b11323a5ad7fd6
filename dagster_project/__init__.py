"""Dagster code location of lakestream: ``dagster dev`` / ``dagster job execute -m dagster_project``."""

import os
from pathlib import Path

# Run history persists in the project unless the user chose another DAGSTER_HOME.
os.environ.setdefault("DAGSTER_HOME", str(Path(__file__).resolve().parents[1] / ".dagster_home"))

from .definitions import defs  # noqa: E402

__all__ = ["defs"]
