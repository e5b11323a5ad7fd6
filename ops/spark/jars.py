"""Jars from Maven Central, fetched once into a project-local folder.

The ``delta-spark`` wheel carries Python code only, and PySpark ships no Kafka connector. Rather
than resolving jars through Ivy at every session start, each :class:`JarBundle` is fetched once
with Maven into its own folder under ``.jars/`` and handed to Spark through ``spark.jars`` (the
broker's bundle is a classpath of its own: see :mod:`ops.devservers.kafka_broker`). Without
Maven on the machine, Spark's jars fall back to ``spark.jars.packages``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyspark

from ..errors import ConfigError
from .heartbeat import reporting

log = logging.getLogger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakestream</groupId><artifactId>{name}-jars</artifactId><version>1</version>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = ("    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
               "<version>{version}</version>{exclusions}</dependency>")
_NO_TRANSITIVE = ("<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>"
                  "</exclusions>")

#: The Kafka release the embedded broker runs (KRaft mode, no ZooKeeper).
KAFKA_BROKER_VERSION = "4.1.1"


@dataclass(frozen=True)
class Artifact:
    """A Maven coordinate; ``transitive`` also fetches what it depends on at runtime."""

    group: str
    name: str
    version: str
    transitive: bool = False

    @property
    def jar(self) -> str:
        return f"{self.name}-{self.version}.jar"

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"


@dataclass(frozen=True)
class JarBundle:
    """Jars fetched together into ``.jars/<folder>`` (``""``: ``.jars`` itself)."""

    name: str
    folder: str
    artifacts: tuple[Artifact, ...]

    def path(self) -> Path:
        return jars_dir() / self.folder if self.folder else jars_dir()

    def jars(self) -> list[Path]:
        """The bundle's jars, fetched with Maven first if any is missing (and Maven is there);
        empty when they are missing and cannot be fetched."""
        wanted = [self.path() / artifact.jar for artifact in self.artifacts]
        if not all(jar.exists() for jar in wanted) and shutil.which("mvn"):
            log.info("fetching the %s jars with Maven into %s", self.name, self.path())
            with reporting(log, f"fetching the {self.name} jars with Maven"):
                _fetch_with_maven(self)
        return wanted if all(jar.exists() for jar in wanted) else []

    def classpath(self) -> str:
        """Every jar of the folder (with what transitive artifacts brought), for ``java -cp``."""
        if not self.jars():
            raise ConfigError(f"the {self.name} jars are not in {self.path()} and Maven ('mvn') "
                              f"is not on PATH to fetch them: install Maven or copy "
                              f"{', '.join(a.coordinate for a in self.artifacts)} there")
        return os.pathsep.join(str(jar) for jar in sorted(self.path().glob("*.jar")))


def jars_dir() -> Path:
    """Where the jars live: ``$LAKESTREAM_JARS_DIR`` or ``.jars/`` in the project."""
    return Path(os.environ.get("LAKESTREAM_JARS_DIR", _PROJECT_ROOT / ".jars"))


def delta_bundle() -> JarBundle:
    """The Delta jar matching the installed pyspark and delta-spark."""
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    version = importlib.metadata.version("delta-spark")
    return JarBundle("Delta Lake", "", (Artifact("io.delta", f"delta-spark_{spark_minor}_2.13", version),
                                         Artifact("io.delta", "delta-storage", version)))


def spark_kafka_bundle() -> JarBundle:
    """Spark's own Kafka source and sink, with the versions its pom names (kafka-clients,
    commons-pool2); the rest they need ships with PySpark."""
    spark = pyspark.__version__
    return JarBundle("Spark Kafka connector", "spark-kafka", (
        Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", spark),
        Artifact("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", spark),
        Artifact("org.apache.kafka", "kafka-clients", "3.9.2"),
        Artifact("org.apache.commons", "commons-pool2", "2.13.1")))


def s3a_bundle() -> JarBundle:
    """Hadoop's ``s3a`` connector at the version of the Hadoop client PySpark ships, with the AWS
    SDK bundle and the rest of what it needs at run time (its pom's compile and runtime scope)."""
    version = hadoop_version()
    return JarBundle("Hadoop S3A connector", f"hadoop-aws-{version}", (
        Artifact("org.apache.hadoop", "hadoop-aws", version, transitive=True),))


def hadoop_version() -> str:
    """The version of the Hadoop client jars PySpark ships (``hadoop-client-api-<v>.jar``)."""
    found = sorted(Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar"))
    if not found:
        raise ConfigError(f"no hadoop-client-api jar in {Path(pyspark.__file__).parent / 'jars'}: "
                          "is PySpark installed whole?")
    return found[-1].name[len("hadoop-client-api-"):-len(".jar")]


def kafka_broker_bundle() -> JarBundle:
    """A Kafka broker with everything it runs on, and a log4j binding for its logs."""
    return JarBundle("Kafka broker", f"kafka-broker-{KAFKA_BROKER_VERSION}", (
        Artifact("org.apache.kafka", "kafka_2.13", KAFKA_BROKER_VERSION, transitive=True),
        Artifact("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3", transitive=True),
        # kafka_2.13 brings slf4j 1.7, which the log4j 2 binding (slf4j 2) cannot serve
        Artifact("org.slf4j", "slf4j-api", "2.0.17")))


def _fetch_with_maven(bundle: JarBundle) -> None:
    folder = bundle.path()
    dependencies = "\n".join(
        _DEPENDENCY.format(group=a.group, artifact=a.name, version=a.version,
                           exclusions="" if a.transitive else _NO_TRANSITIVE)
        for a in bundle.artifacts)
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM.format(name=bundle.folder or "delta", dependencies=dependencies))
        staging = Path(tmp) / "jars"
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(
                f"could not fetch the {bundle.name} jars "
                f"({', '.join(a.coordinate for a in bundle.artifacts)}) with Maven into {folder}: "
                f"{(done.stdout + done.stderr).strip()[-2000:]}")
        pinned = {a.name for a in bundle.artifacts}
        folder.mkdir(parents=True, exist_ok=True)
        for jar in staging.glob("*.jar"):
            if _older_copy_of_pinned(jar.name, pinned, bundle):
                continue
            # copy then rename, so a concurrent reader never sees half a jar
            part = folder / (jar.name + ".part")
            shutil.copyfile(jar, part)
            part.replace(folder / jar.name)


def _older_copy_of_pinned(jar: str, pinned: set[str], bundle: JarBundle) -> bool:
    """Whether ``jar`` is another version of an artifact the bundle pins (Maven copies both
    when a transitive dependency names an older one)."""
    wanted = {a.jar for a in bundle.artifacts}
    return jar not in wanted and any(jar.startswith(name + "-") and jar[len(name) + 1:][:1].isdigit()
                                     for name in pinned)


_LOG_STORE_SOURCE = Path(__file__).with_name("jvm") / "ConditionalPutLogStore.java"
#: Delta's log store for S3 that commits with a conditional put (``ops/jvm``).
LOG_STORE_CLASS = "io.lakestream.delta.ConditionalPutLogStore"


def log_store_jar() -> Path | None:
    """The conditional-put Delta log store for S3 (:data:`LOG_STORE_CLASS`), compiled once with
    ``javac`` against the Delta storage and Hadoop client jars into ``.jars/log-store/``, named
    by its source's hash; ``None`` when the Delta jars are not fetched or there is no ``javac``
    (Delta's own single-driver log store then commits to S3)."""
    storage = next((jar for jar in delta_bundle().jars() if jar.name.startswith("delta-storage-")), None)
    if storage is None or not _LOG_STORE_SOURCE.exists():
        return None
    digest = hashlib.sha1(_LOG_STORE_SOURCE.read_bytes() + storage.name.encode()).hexdigest()[:12]
    jar = jars_dir() / "log-store" / f"conditional-put-log-store-{digest}.jar"
    if jar.exists():
        return jar
    if not shutil.which("javac"):
        log.warning("no javac on PATH: Delta commits to S3 through Spark use Delta's single-driver "
                    "log store (see the docs, Running on S3)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        classpath = os.pathsep.join([str(storage), str(Path(pyspark.__file__).parent / "jars" / "*")])
        done = subprocess.run(["javac", "-nowarn", "-d", tmp, "-cp", classpath, str(_LOG_STORE_SOURCE)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"compiling {_LOG_STORE_SOURCE} failed: {done.stderr.strip()[-2000:]}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        part = jar.with_suffix(".part")
        with zipfile.ZipFile(part, "w") as archive:
            for compiled in Path(tmp).rglob("*.class"):
                archive.write(compiled, compiled.relative_to(tmp).as_posix())
        part.replace(jar)  # whole or not at all, for a concurrent reader
    for older in jar.parent.glob("conditional-put-log-store-*.jar"):
        if older != jar:
            older.unlink(missing_ok=True)  # built from an earlier source
    return jar


def spark_jar_conf() -> dict[str, str]:
    """Spark config entries that put the Delta, Kafka connector and S3A jars on the classpath,
    fetching them if needed (``spark.jars``; else ``spark.jars.packages`` for Spark to resolve).

    The S3A jars (700 MB, most of it the AWS SDK bundle) go on the driver's and executors'
    class path from where they lie instead: through ``spark.jars`` every executor would copy
    them at start. A cluster's nodes have them at the same path (one machine, or an image
    built with ``.ci/install``), or their own S3 connector, as Spark deployments usually do.
    Delta's commits to S3 go through :data:`LOG_STORE_CLASS` (:func:`log_store_jar`).
    """
    bundles = [delta_bundle(), spark_kafka_bundle()]
    fetched = [bundle.jars() for bundle in bundles]
    conf = ({"spark.jars": ",".join(str(jar) for jars in fetched for jar in jars)} if all(fetched)
            else {"spark.jars.packages": ",".join(a.coordinate for b in bundles for a in b.artifacts)})
    store = log_store_jar() if all(fetched) else None
    if store is not None:
        conf["spark.jars"] += f",{store}"
        conf.update({f"spark.delta.logStore.{scheme}.impl": LOG_STORE_CLASS for scheme in ("s3", "s3a")})
    s3a = s3a_bundle()
    if s3a.jars():
        path = os.pathsep.join(str(jar) for jar in sorted(s3a.path().glob("*.jar")))
        conf.update({"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path})
    return conf
