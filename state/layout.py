"""Where a pipeline's tables live under the warehouse root."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .errors import StateError

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
DEFAULT_WAREHOUSE = "./warehouse"
#: The environment variable naming the warehouse a pipeline takes when given none.
WAREHOUSE_SETTING = "LAKESTREAM_WAREHOUSE"


def check_name(kind: str, name: str) -> str:
    """Reject names that are unsafe as folder and table names."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise StateError(
            f"{kind} name {name!r} is invalid: use a letter then letters, digits or '_' (max 128)")
    return name


def warehouse_from_env() -> str:
    """The warehouse root as given: ``$LAKESTREAM_WAREHOUSE``, or ``./warehouse`` when it is
    unset or empty (the one reading of it: :func:`resolve_warehouse` and the Dagster
    resource's default both make it)."""
    return os.environ.get(WAREHOUSE_SETTING) or DEFAULT_WAREHOUSE


def resolve_warehouse(warehouse: str | None = None) -> str:
    """The warehouse root: the argument, ``$LAKESTREAM_WAREHOUSE`` or ``./warehouse``.

    Local paths become absolute; URIs such as ``s3a://…`` or ``abfss://…`` pass through unchanged.
    """
    root = warehouse or warehouse_from_env()
    if "://" in root or root.startswith("file:"):
        return root.rstrip("/")
    return os.path.abspath(root)


def default_warehouses() -> str:
    """The warehouse a pipeline given none takes, in words for a message: ``$LAKESTREAM_WAREHOUSE``
    when it is set, else ``./warehouse`` of the working folder.

    >>> "./warehouse" in default_warehouses() or "$LAKESTREAM_WAREHOUSE =" in default_warehouses()
    True
    """
    where = resolve_warehouse()
    if os.environ.get(WAREHOUSE_SETTING):  # set and not empty: warehouse_from_env takes it
        return f"${WAREHOUSE_SETTING} = {where}"
    return f"{DEFAULT_WAREHOUSE} = {where} (${WAREHOUSE_SETTING} is not set)"


@dataclass(frozen=True)
class PipelineLayout:
    """Paths of every table pipeline ``pipeline`` owns under ``warehouse``."""

    warehouse: str
    pipeline: str

    def __post_init__(self) -> None:
        check_name("pipeline", self.pipeline)

    @property
    def root(self) -> str:
        return f"{self.warehouse}/{self.pipeline}"

    @property
    def state(self) -> str:
        return f"{self.root}/_state"

    @property
    def batches(self) -> str:
        return f"{self.root}/_batches"

    @property
    def dead_letters(self) -> str:
        return f"{self.root}/_dead_letters"

    @property
    def failures(self) -> str:
        """Each operator failure of a batch (``ops.runtime.failures``): a batch failing the
        same way twice says how to get past it."""
        return f"{self.root}/_failures"

    @property
    def staging(self) -> str:
        """Scratch folder for Parquet files on their way into a Delta table (never a table)."""
        return f"{self.root}/_staging"

    def inbox(self, callback: str) -> str:
        return f"{self.root}/_inbox_{check_name('callback', callback)}"

    def manifest(self, source: str) -> str:
        """The file source ``source``'s manifest: every landed file, numbered in arrival order."""
        return f"{self.root}/_files_{check_name('source', source)}"

    def table(self, name: str) -> str:
        """A sink or global table owned by the pipeline."""
        return f"{self.root}/{check_name('table', name)}"
