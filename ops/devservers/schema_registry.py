"""A local schema registry for tests and examples: Apicurio Registry, which serves Confluent's
REST API at ``/apis/ccompat/v7``, with its schemas in an in-memory database, listening on
loopback only.

Apicurio publishes a runnable bundle on Maven Central (``apicurio-registry-app``, classifier
``all``), fetched once into ``.jars/`` by ``.ci/install`` (or on the first start). Release
3.0.9 is the last that runs on Java 17.

>>> from ops.devservers.schema_registry import LocalRegistry
>>> with LocalRegistry.start("/tmp/registry-doc") as registry:      # doctest: +SKIP
...     print(registry.url)
http://127.0.0.1:.../apis/ccompat/v7

From a shell: ``python -m ops.devservers.schema_registry start|stop|status [--dir .registry]``.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..errors import ConfigError
from ..spark.jars import jars_dir
from .process import LocalServer, shell_command

#: The Apicurio Registry release run (3.1 and later need Java 21).
APICURIO_VERSION = "3.0.9"
_READY_SECONDS = 90
_API = "/apis/ccompat/v7"

__all__ = ["APICURIO_VERSION", "LocalRegistry", "fetch_registry", "main"]


def fetch_registry() -> Path:
    """The runnable Apicurio jar, fetched with Maven and unpacked into ``.jars/`` once.
    Raises ``ConfigError`` when Maven is missing or the fetch fails."""
    folder = jars_dir() / f"apicurio-registry-{APICURIO_VERSION}"
    runner = folder / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
    if runner.exists():
        return runner
    if shutil.which("mvn") is None:
        raise ConfigError("the local schema registry needs Maven ('mvn') on PATH to fetch "
                          f"Apicurio Registry {APICURIO_VERSION} once")
    with tempfile.TemporaryDirectory() as tmp:
        coordinate = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
        done = subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coordinate}",
                               f"-DoutputDirectory={tmp}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"could not fetch {coordinate} with Maven: "
                              f"{(done.stdout + done.stderr).strip()[-2000:]}")
        staging = Path(tmp) / "unpacked"
        with tarfile.open(next(Path(tmp).glob("*.tar.gz"))) as bundle:
            bundle.extractall(staging, filter="data")
        found = next(staging.rglob(runner.name))
        # moved whole, once unpacked: a folder with the runner jar is always complete
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(found.parent), str(folder))
    return runner


class LocalRegistry(LocalServer):
    """A running registry: its folder (pid, log), port and process."""

    WHAT = "a schema registry"
    PID_FILE = "registry.pid"
    LOGS = ("registry.log",)

    @property
    def url(self) -> str:
        """The URL a ``SchemaRegistryClient`` (``sp.SchemaRegistry``) takes."""
        return f"http://127.0.0.1:{self.port}{_API}"

    @classmethod
    def start(cls, folder: str | Path, port: int | None = None) -> LocalRegistry:
        """Start a registry on ``127.0.0.1:port`` (a free port when omitted); returns once it
        answers. Raises ``ConfigError`` with the end of its log if it does not come up."""
        return cls.launch(folder, port, _registry_command)

    def wait_until_ready(self) -> None:
        """Return once the registry lists its subjects; raise if it died or took too long."""
        self.wait_for_http(f"{self.url}/subjects", f"the schema registry in {self.folder}",
                           _READY_SECONDS, 0.25)


def _registry_command(folder: Path, port: int) -> list[str]:
    """Apicurio on ``127.0.0.1:port``, small: a test's registry holds a few schemas."""
    return ["java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
            "-Dquarkus.http.access-log.enabled=false",
            "-Dapicurio.datasource.jdbc.initial-size=2", "-Dapicurio.datasource.jdbc.min-size=2",
            "-jar", str(fetch_registry())]


def main(argv: list[str] | None = None) -> None:
    """``python -m ops.devservers.schema_registry start|stop|status [--dir DIR] [--port N]``."""
    shell_command(LocalRegistry, argv, prog="python -m ops.devservers.schema_registry",
                  what="schema registry", folder=".registry", port=8081, start=LocalRegistry.start,
                  address=lambda registry: registry.url)


if __name__ == "__main__":
    main()
