"""Delta Lake jars for a pip-installed PySpark.

The ``delta-spark`` wheel carries Python code only. Rather than resolving the jars through Ivy at
every session start, they are fetched once with Maven into a project-local folder and handed to
Spark through ``spark.jars``. Without Maven on the machine we fall back to ``spark.jars.packages``.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyspark

from .errors import ConfigError

_PROJECT_ROOT = Path(__file__).resolve().parents[1]
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakestream</groupId><artifactId>delta-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>io.delta</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>io.delta</groupId><artifactId>delta-storage</artifactId><version>{version}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
  </dependencies>
</project>
"""


def delta_coordinates() -> tuple[str, str]:
    """Maven artifact id and version of the Delta jar matching the installed pyspark and delta-spark."""
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"delta-spark_{spark_minor}_2.13", importlib.metadata.version("delta-spark")


def jars_dir() -> Path:
    """Where the jars live: ``$LAKESTREAM_JARS_DIR`` or ``.jars/`` in the project."""
    return Path(os.environ.get("LAKESTREAM_JARS_DIR", _PROJECT_ROOT / ".jars"))


def _expected_jars(folder: Path) -> list[Path]:
    artifact, version = delta_coordinates()
    return [folder / f"{artifact}-{version}.jar", folder / f"delta-storage-{version}.jar"]


def _fetch_with_maven(folder: Path) -> None:
    artifact, version = delta_coordinates()
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM.format(artifact=artifact, version=version))
        staging = Path(tmp) / "jars"
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(
                f"could not fetch io.delta:{artifact}:{version} with Maven into {folder}: "
                f"{(done.stdout + done.stderr).strip()[-2000:]}")
        folder.mkdir(parents=True, exist_ok=True)
        for jar in staging.glob("*.jar"):
            # copy then rename, so a concurrent reader never sees half a jar
            part = folder / (jar.name + ".part")
            shutil.copyfile(jar, part)
            part.replace(folder / jar.name)


def delta_jar_conf() -> dict[str, str]:
    """Spark config entries that put the Delta jars on the classpath, fetching them if needed."""
    folder = jars_dir()
    wanted = _expected_jars(folder)
    if not all(jar.exists() for jar in wanted) and shutil.which("mvn"):
        _fetch_with_maven(folder)
    if all(jar.exists() for jar in wanted):
        return {"spark.jars": ",".join(str(jar) for jar in wanted)}
    artifact, version = delta_coordinates()
    return {"spark.jars.packages": f"io.delta:{artifact}:{version}"}
