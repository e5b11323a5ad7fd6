"""Delta I/O without Spark or a JVM, through delta-rs (``deltalake``): the one package that calls
it (an import contract in ``pyproject.toml`` says so), for tables on the local file system and
on object stores alike. One module per concern; every name other modules use is here:

- :mod:`~state.delta_io.stores`: which paths delta-rs serves (:func:`serves`), the environment
  that reaches an object store, a store's failure as a :class:`~state.errors.StorageError`;
- :mod:`~state.delta_io.cache`: the snapshot of each table this process opened, brought up to
  date from the commits since (:class:`Snapshots`, :func:`table`);
- :mod:`~state.delta_io.commits`: how a commit is made (``txn``, retries, log checkpoints);
- :mod:`~state.delta_io.appends`: blind appends and the tables they create;
- :mod:`~state.delta_io.file_layout`: the order and row groups of the rows an append writes;
- :mod:`~state.delta_io.columns_added`: nullable columns added in a commit of their own;
- :mod:`~state.delta_io.task_files`: data files written by tasks, committed by the driver;
- :mod:`~state.delta_io.merge`: upserts (delta-rs's MERGE);
- :mod:`~state.delta_io.log`: versions, commit metadata and actions, schemas, the change feed;
- :mod:`~state.delta_io.files`: rows read from data files, pruned by their statistics.

Where delta-rs does not serve a path (:func:`serves`: HDFS and the like, or an object store
with :data:`IO_SETTING` ``spark``), the writes and reads that may be left to Spark answer
``None`` (``False`` for :func:`create`), and the caller goes to Spark.
"""

from .appends import ARROW_TYPES, Creation, append, blind_append_refusal, create
from .cache import (
    RECHECK_SETTING,
    Snapshots,
    Stamp,
    adopt_storage_environment,
    commit_stamp,
    recheck_seconds,
    snapshots,
    table,
)
from .columns_added import add_columns
from .file_layout import FileLayout
from .files import (
    Summary,
    column_rows,
    count_between,
    data_files,
    file_statistics,
    newest_rows,
    read_added,
    read_data_files,
    rows_at_least,
    snapshot,
    summary,
)
from .log import (
    FEED_PROPERTY,
    AddedFile,
    Appended,
    appended,
    appended_in,
    commit_actions,
    commit_times,
    configuration,
    exists,
    feed_enabled,
    feed_on,
    held_version,
    latest_version,
    metadata_at,
    reads_inserts,
    recent_metadata,
    schema_json,
)
from .merge import Upsert, merge_refusal, upsert
from .stores import (
    IO_SETTING,
    OBJECT_STORE_SCHEMES,
    local_path,
    on_object_store,
    serves,
    storage_environment,
    table_files,
)
from .task_files import commit_files, file_schema, takes_files, write_file

__all__ = [
    "ARROW_TYPES", "Creation", "append", "blind_append_refusal", "create", "add_columns", "FileLayout",
    "RECHECK_SETTING", "recheck_seconds", "Snapshots", "Stamp", "commit_stamp",
    "adopt_storage_environment", "snapshots", "table",
    "Summary", "column_rows", "count_between", "summary",
    "data_files", "file_statistics", "newest_rows", "read_added", "read_data_files", "rows_at_least",
    "snapshot", "AddedFile", "Appended", "appended", "appended_in", "FEED_PROPERTY", "commit_actions",
    "commit_times",
    "configuration", "exists", "feed_enabled", "feed_on", "held_version", "latest_version",
    "metadata_at", "reads_inserts", "recent_metadata", "schema_json",
    "Upsert", "merge_refusal", "upsert",
    "IO_SETTING", "OBJECT_STORE_SCHEMES", "local_path", "on_object_store", "serves", "storage_environment",
    "table_files",
    "commit_files", "file_schema", "takes_files", "write_file",
]
