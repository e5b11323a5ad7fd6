"""A class-data-sharing archive for the driver JVM, so a process starts Spark in less time.

A Spark driver loads ~10,000 classes from some 300 jars at its start and through its first
batches: reading, verifying and linking them is most of the 7 s a fresh process waits for its
session, and of why its first batches are slow. Java's application class-data sharing (AppCDS)
keeps those classes, already parsed, in one file the JVM maps at start. Every run that starts a
process of its own gains: a sensor-started run, a ``dagster job execute``, a child process.

The archive is made once, by a training run (``python -m ops.operating.train_class_archive``,
which the install step runs), and used by every session :func:`ops.spark.session.spark_session`
starts after that. The JVM refuses an archive made with another JVM or other jars on its class
path, so the archive's file name carries a digest of both: an upgrade makes a new one instead of
one the JVM would refuse (:func:`archive_path`). ``LAKESTREAM_CLASS_ARCHIVE=off`` starts Spark
without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import pyspark

from .jars import jars_dir

#: The JVM's own notes on an archive it cannot map (another build of it; a jar changed since)
#: are dropped: it then starts as it would without one, which is all the caller can do too.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path(conf: Mapping[str, str]) -> Path:
    """Where the archive for a driver started with ``conf`` lives: ``.jars/class-archive/``, named
    by a digest of the ``java`` that runs it and of every jar it loads (each with its size and
    time)."""
    digest = hashlib.sha1()
    for file in (_java(), *_driver_jars(conf)):  # a JDK updated in place changes its binary
        stat = file.stat() if file.exists() else None
        digest.update(f"{file}:{stat and stat.st_size}:{stat and stat.st_mtime_ns}\n".encode())
    return jars_dir() / "class-archive" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def java_options(conf: Mapping[str, str]) -> str:
    """The driver's JVM options that map the archive, or ``""`` when there is none for ``conf``
    or ``LAKESTREAM_CLASS_ARCHIVE`` is ``off``."""
    if os.environ.get("LAKESTREAM_CLASS_ARCHIVE", "on").lower() in ("off", "0", "false"):
        return ""
    archive = archive_path(conf)
    return f"-XX:SharedArchiveFile={archive} {_QUIET}" if archive.exists() else ""


def training_options(into: Path) -> str:
    """The driver's JVM options that write the classes it loaded into ``into`` when it exits."""
    return f"-XX:ArchiveClassesAtExit={into} {_QUIET}"


def _java() -> Path:
    """The ``java`` PySpark starts: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else Path(shutil.which("java") or "java")
    return found.resolve() if found.exists() else found


def _driver_jars(conf: Mapping[str, str]) -> list[Path]:
    """The jars a driver started with ``conf`` loads from: PySpark's own, the extra class path,
    and ``spark.jars``."""
    listed = [*conf.get("spark.driver.extraClassPath", "").split(os.pathsep),
              *conf.get("spark.jars", "").split(",")]
    shipped = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return shipped + [Path(item) for item in listed if item and Path(item).exists()]
