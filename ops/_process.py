"""What the local servers (the Kafka broker, the S3 server) share: ports on loopback and
stopping a process by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts connections on ``127.0.0.1:port``."""
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    """Whether the process ``pid`` (started here as ``process``, or by another command) runs."""
    if process is not None:
        return process.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(pid: int, process: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL after ``grace`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid, process):
        time.sleep(0.2)
    if alive(pid, process):
        os.kill(pid, signal.SIGKILL)
        if process is not None:
            process.wait(10)
