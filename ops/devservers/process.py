"""What the local servers (the Kafka broker, the S3 server, the schema registry) share: one way
to start (:meth:`LocalServer.launch`), ports on loopback, a pid file to find a server again from
another command, and stopping it by its pid."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self, TypeVar

from ..errors import ConfigError


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


@dataclass
class LocalServer:
    """A server this project runs on loopback: its folder (pid file, logs), port and process
    (``None`` when another command started it).

    A kind of server names itself (``WHAT``, for errors), its pid file, its logs (the first is
    where its process's output goes), how long it may take to stop, and how to tell that it
    answers (:meth:`wait_until_ready`); :meth:`launch` starts any of them."""

    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None
    pid: int

    WHAT: ClassVar[str] = "a local server"
    PID_FILE: ClassVar[str] = "server.pid"
    LOGS: ClassVar[tuple[str, ...]] = ("server.log",)
    STOP_GRACE: ClassVar[float] = 10.0

    @classmethod
    def launch(cls, folder: str | Path, port: int | None,
               command: Callable[[Path, int], list[str]]) -> Self:
        """Start a server with its files in ``folder`` (made if missing) on ``127.0.0.1:port``
        (a free port when ``None``): the process ``command(folder, port)`` (which may first
        write what the process reads) in a session of its own, its output appended to the first
        of ``LOGS``, its pid file written; returns once :meth:`wait_until_ready` passes. Raises
        ``ConfigError`` naming the server when ``port`` is taken (before anything starts) or
        when the process dies or does not answer in time (with the end of its logs, each under
        its path); a failed start leaves no process and no pid file behind."""
        folder = Path(folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        if port is not None and listening(port):
            # else the readiness check would be answered by whatever listens there
            raise ConfigError(f"cannot start {cls.WHAT} on 127.0.0.1:{port}: something listens "
                              "there already (a server still running?)")
        port = port or free_port()
        argv = command(folder, port)
        with open(folder / cls.LOGS[0], "ab") as out:
            # a session of its own: what signals the starting terminal (Ctrl-C, hang-up) does
            # not reach it, so a server the ``start`` command left running outlives that shell
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        server = cls(folder, port, process, process.pid)
        server.record()
        try:
            server.wait_until_ready()
        except ConfigError:  # it died, or did not answer and was stopped: nothing to find again
            (folder / cls.PID_FILE).unlink(missing_ok=True)
            raise
        return server

    def wait_until_ready(self) -> None:
        """Return once the server answers; raise ``ConfigError`` if it died or took too long.
        Each kind of server says how it is asked (:meth:`wait_for_http`, :meth:`wait_until`)."""
        raise NotImplementedError(f"{type(self).__name__} says how to tell that it answers")

    @classmethod
    def attach(cls, folder: str | Path) -> Self | None:
        """The server a ``start`` left running with its pid file in ``folder``, if it still runs."""
        folder = Path(folder).resolve()
        try:
            pid, port = (int(n) for n in (folder / cls.PID_FILE).read_text().split())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return cls(folder, port, None, pid)

    def record(self) -> None:
        """Write the pid file that :meth:`attach` reads."""
        (self.folder / self.PID_FILE).write_text(f"{self.pid} {self.port}\n")

    def stop(self, grace: float | None = None) -> None:
        """Stop the server by its pid: SIGTERM, then SIGKILL after ``grace`` seconds."""
        stop(self.pid, self.process, self.STOP_GRACE if grace is None else grace)
        (self.folder / self.PID_FILE).unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def wait_for_http(self, url: str, what: str, seconds: float, pause: float) -> None:
        """Return once ``url`` answers an HTTP request; raise ``ConfigError`` naming ``what``
        if the process died or did not answer within ``seconds`` (then stopped by its pid)."""
        def answers(left: float) -> None:
            with urllib.request.urlopen(url, timeout=2):
                pass
        self.wait_until(answers, what, url, seconds, pause,
                        (urllib.error.URLError, ConnectionError, TimeoutError))

    def wait_until(self, probe: Callable[[float], None], what: str, where: str, seconds: float,
                   pause: float, not_yet: tuple[type[BaseException], ...]) -> None:
        """Return once ``probe`` (given the seconds left) returns without raising one of
        ``not_yet``, trying again every ``pause`` seconds; raise ``ConfigError`` naming ``what``
        if the process died first or ``probe`` did not succeed within ``seconds`` (the process
        is then stopped by its pid; ``where``: what it was asked on, for the message)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ConfigError(f"{what} exited with code {self.process.returncode}: "
                                  f"{self.log_tail()}")
            try:
                probe(deadline - time.monotonic())
                return
            except not_yet:
                time.sleep(pause)
        self.stop()
        raise ConfigError(f"{what} did not answer on {where} within {seconds:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        """The last lines of the server's logs, each under its path, for an error that says
        why it did not start (and where to read the rest)."""
        tails = []
        for name in self.LOGS:
            path = self.folder / name
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-15:]
                tails.append("\n".join([f"{path}:", *lines]))
        return "\n".join(tails) or f"(no log in {self.folder})"


Server = TypeVar("Server", bound=LocalServer)


def shell_command(kind: type[Server], argv: list[str] | None, *, prog: str, what: str,
                  folder: str, port: int, start: Callable[[str, int], Server],
                  address: Callable[[Server], str]) -> None:
    """``<prog> start|stop|status [--dir DIR] [--port N]`` for a server ``what`` of ``kind``:
    ``start`` leaves it running (found again by its pid file in ``--dir``), ``stop`` stops it by
    its pid, ``status`` says where it runs."""
    parser = argparse.ArgumentParser(prog=prog, description=f"the local {what}")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", default=folder, help=f"its files and pid (default {folder})")
    parser.add_argument("--port", type=int, default=port, help=f"its port (default {port})")
    args = parser.parse_args(argv)
    running = kind.attach(args.dir)
    if args.action == "start":
        if running is None:
            running = start(args.dir, args.port)
            running.process = None  # it outlives this command
        print(f"{what} running at {address(running)} (pid {running.pid}, files in {args.dir})")
    elif args.action == "stop":
        if running is not None:
            running.stop()
        print(f"{what} stopped" if running else f"no {what} running from {args.dir}")
    else:
        print(f"running at {address(running)} (pid {running.pid})" if running else "not running")
