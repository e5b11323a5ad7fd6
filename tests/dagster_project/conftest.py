"""A real ``dg dev`` (the UI and daemon) on loopback, with the project's instance config, for UI tests."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ops.devservers.kafka_broker import free_port
from tests.spark_settings import child_environment

ROOT = Path(__file__).resolve().parents[2]
WARNINGS = ("DeprecationWarning", "SupersessionWarning", "PreviewWarning", "BetaWarning")


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """Start ``dg dev`` (one for the module's tests: it takes ~20 s to start, and as long to
    stop); yield its port once it answers; stop it (its whole group)."""
    folder = tmp_path_factory.mktemp("dagster_dev")
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = dict(child_environment(str(folder / "warehouse")), DAGSTER_HOME=str(home))
    log = folder / "dg_dev.log"  # a file: a pipe left unread while tests run would fill and stall it
    with open(log, "w") as stderr:
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("dg")), "dev", "-h", "127.0.0.1", "-p", str(port)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "dg dev did not answer within 180 s"
            try:
                graphql(port, "{ version }")
                break
            except OSError:
                time.sleep(1)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    # what a user sees at start: no deprecation, supersession or preview warning
    said = log.read_text()
    assert not [w for w in WARNINGS if w in said], said[-3000:]
