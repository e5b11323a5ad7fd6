"""The start the local servers share (``LocalServer.launch``), on a server of the test's own: a
real process (Python's ``http.server``, or one that fails) on loopback, stopped by its pid."""

import sys

import pytest

from ops.devservers.process import LocalServer, free_port, listening
from ops.errors import ConfigError


class FileServer(LocalServer):
    """Python's own HTTP file server, as a local server of the project's."""

    WHAT = "the test's file server"
    PID_FILE = "files.pid"
    LOGS = ("files.log",)
    STOP_GRACE = 5.0

    def wait_until_ready(self) -> None:
        self.wait_for_http(f"http://127.0.0.1:{self.port}/", f"{self.WHAT} in {self.folder}", 30, 0.1)


def serving(folder, port):
    return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(folder),
            str(port)]


@pytest.fixture
def folder(tmp_path):
    """The server's folder (made by the start); whatever server a test left there is stopped."""
    yield tmp_path / "files"
    left = FileServer.attach(tmp_path / "files")
    if left is not None:
        left.stop()


def test_a_launched_server_answers_and_is_found_again_by_its_pid_file(folder):
    server = FileServer.launch(folder, None, serving)
    assert listening(server.port) and server.folder == folder.resolve()
    assert (folder / "files.pid").read_text() == f"{server.pid} {server.port}\n"
    found = FileServer.attach(folder)  # as another command would
    assert (found.pid, found.port, found.process) == (server.pid, server.port, None)
    assert "GET / HTTP" in (folder / "files.log").read_text()  # its output goes to the first log
    # stopped through the process this test started: it reaps it (the pid of an unreaped
    # child would look alive to a stop by pid alone until the grace ran out)
    server.stop()
    assert not listening(server.port) and FileServer.attach(folder) is None
    assert server.process.poll() is not None


def test_a_port_something_listens_on_is_refused_before_anything_starts(folder):
    taken = FileServer.launch(folder / "first", free_port(), serving)
    with pytest.raises(ConfigError) as refused:
        FileServer.launch(folder, taken.port, serving)
    assert str(refused.value) == (f"cannot start the test's file server on 127.0.0.1:{taken.port}: "
                                  "something listens there already (a server still running?)")
    assert not (folder / "files.pid").exists() and not (folder / "files.log").exists()
    taken.stop()


def test_a_server_that_dies_at_start_names_itself_its_log_and_why(folder):
    def failing(folder, port):
        return [sys.executable, "-c", "import sys; sys.exit('no configuration in this folder')"]
    with pytest.raises(ConfigError) as failed:
        FileServer.launch(folder, None, failing)
    log = folder.resolve() / "files.log"
    assert str(failed.value) == (f"the test's file server in {folder.resolve()} exited with code 1: "
                                 f"{log}:\nno configuration in this folder")
    assert not (folder / "files.pid").exists()  # nothing left for another command to find
