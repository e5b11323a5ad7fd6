"""``dagster dev`` (the UI) loads the code location from workspace.yaml without errors."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(port: int) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                     data=json.dumps({"query": QUERY}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_dagster_dev_loads_the_code_location(tmp_path):
    port = _free_port()
    dagster = str(Path(sys.executable).with_name("dagster"))
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path))
    server = subprocess.Popen([dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                               "-p", str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        entries = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                entries = _graphql(port)["data"]["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    break
            except OSError:
                pass
            assert server.poll() is None, server.stderr.read()[-3000:]
            time.sleep(1)
        assert entries, "dagster dev did not answer within 180 s"
        assert [(e["name"], e["loadStatus"], e["locationOrLoadError"]["__typename"])
                for e in entries] == [("dagster_project", "LOADED", "RepositoryLocation")]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
