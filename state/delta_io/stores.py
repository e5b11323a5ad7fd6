"""Where delta-rs reaches a table: which paths it serves (a local disk, the object stores it
speaks), the environment a process reaches an object store with, and a store's failure told as
a :class:`StorageError` naming the bucket and path.

On an object store (``s3://``, ``s3a://``; delta-rs also reads ``gs://``, ``abfss://``,
``az://``) delta-rs speaks the Delta protocol from this process in a few requests: opening a
table is a ``LIST`` of its log plus the commits since its checkpoint, following it is a ``LIST``
from the version it knows, an append is a Parquet ``PUT`` and the commit file's ``PUT`` with
``If-None-Match: *``, so two writers can never both write one version. On a local disk delta-rs
commits with an atomic create of the commit file, which fails as the conditional put does.
Every table elsewhere (``hdfs://`` and the like) is Spark's.

Credentials, endpoint and region come from the standard AWS environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_PROFILE`` …), which delta-rs reads itself; nothing here handles a secret, and errors
carry the store's words with the bucket and path, never the request's credentials.

>>> on_object_store("s3a://lake/wh/p/_state"), on_object_store("hdfs://nn/wh"), on_object_store("/tmp/wh")
(True, False, False)
>>> serves("/tmp/wh/t"), serves("file:///tmp/wh/t"), serves("hdfs://nn/wh/t")
(True, True, False)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlparse

import pyarrow.fs
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from ..errors import StorageError

T = TypeVar("T")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Per scheme, the prefix of the environment variables its object-store client reads its
# settings (credentials included) from: a task reaching an S3 table is given AWS's, not Azure's.
_STORE_VARIABLES = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_",
                    "abfs": "AZURE_", "abfss": "AZURE_", "az": "AZURE_", "azure": "AZURE_"}
#: The object stores delta-rs reaches (HDFS and the like stay with Spark).
OBJECT_STORE_SCHEMES = frozenset(_STORE_VARIABLES)
#: ``spark`` turns this package off for the pipeline's own appends and log reads on object
#: stores (they go through Spark, as before delta-rs): for comparing the two, or as a way out
#: should a store and delta-rs not get along.
IO_SETTING = "LAKESTREAM_OBJECT_STORE_IO"


def storage_environment(path: str, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """What this process reaches ``path``'s object store with: that store's variables in its
    ``environment`` (default: its own; credentials included, none of another store's) and
    :data:`IO_SETTING`, for a process that must reach the table as this one does (an
    executor's Python worker, whose environment is the one its JVM started with); empty for
    a local path.

    >>> seen = {"AWS_REGION": "eu-west-1", "AZURE_STORAGE_ACCOUNT_NAME": "other", "HOME": "/root"}
    >>> storage_environment("s3a://lake/wh/p/_state", seen), storage_environment("/tmp/wh", seen)
    ({'AWS_REGION': 'eu-west-1'}, {})
    """
    seen = os.environ if environment is None else environment
    if not on_object_store(path, seen):
        return {}
    prefix = _STORE_VARIABLES[urlparse(path).scheme]
    return {name: value for name, value in seen.items() if name.startswith(prefix) or name == IO_SETTING}


def on_object_store(path: str, environment: Mapping[str, str] | None = None) -> bool:
    """Whether ``path`` is a URI of an object store this package serves, as ``environment``
    (default: this process's) sets :data:`IO_SETTING`."""
    setting = (os.environ if environment is None else environment).get(IO_SETTING, "delta-rs")
    return urlparse(path).scheme in OBJECT_STORE_SCHEMES and setting != "spark"


def local_path(path: str) -> str | None:
    """The file-system path of a local path or ``file:`` URI; ``None`` for other URIs.

    >>> local_path("file:///tmp/wh"), local_path("s3a://lake/wh")
    ('/tmp/wh', None)
    """
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    return None if "://" in path else path


def serves(path: str) -> bool:
    """Whether this package reads and writes the table at ``path``: on the local file system,
    or on an object store it serves. The one place that tells delta-rs's tables from Spark's:
    the reads that answer ``None`` for a table delta-rs does not serve ask it themselves."""
    return local_path(path) is not None or on_object_store(path)


def location(path: str) -> str:
    """``path`` as delta-rs opens it: an absolute path for a local table."""
    local = local_path(path)
    return path if local is None else os.path.abspath(local)


def calling(path: str, doing: str, call: Callable[[], T]) -> T:
    """``call()``, with an object store's failure raised as :class:`StorageError` naming the
    bucket, the path and what was being done (a missing table passes as it is)."""
    try:
        return call()
    except (TableNotFoundError, CommitFailedError):
        raise  # not a failure of the store: no table there / another writer's commit won
    except (OSError, DeltaError) as exc:
        raise StorageError(describe(path, doing, exc)) from exc


def describe(path: str, doing: str, error: BaseException) -> str:
    """A one-paragraph account of a failed call: the path (and an object store's bucket), what
    was being done, and the store's own words (without terminal colours or the request's
    headers)."""
    words = " ".join(_ANSI.sub("", str(error)).split())
    if local_path(path) is not None:
        return f"{doing} {path} failed: {words[:600]}"
    where = urlparse(path)
    return (f"{doing} {path} failed (bucket {where.netloc!r}, path {where.path.lstrip('/')!r}): "
            f"{words[:600]}. Check that the bucket exists, the endpoint (AWS_ENDPOINT_URL) "
            "answers and the credentials in the AWS environment may read and write it.")


def table_files(path: str, known_sizes: Mapping[str, int] | None = None) -> pyarrow.fs.FileSystem:
    """The files of the table at ``path`` (an object store's URI or a local path), by their
    paths in the table's folder as its log gives them: what reads a commit's JSON or the data
    files an append added, reaching the store as delta-rs does (the same settings).
    ``known_sizes``: the sizes of files the log gave (its ``add`` actions), which an object
    store is then not asked for (a ``HEAD`` each) when they are opened."""
    local = local_path(path)
    if local is not None:
        return pyarrow.fs.SubTreeFileSystem(os.path.abspath(local), pyarrow.fs.LocalFileSystem())
    return pyarrow.fs.PyFileSystem(DeltaStorageHandler(location(path), known_sizes=dict(known_sizes or {})))
