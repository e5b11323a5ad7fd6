"""A local S3-compatible server for development, tests, benchmarks and the examples.

It is moto's server mode (``moto[server]`` on PyPI, installed with the project): one Python
process on loopback that speaks the S3 API, including the conditional write a Delta commit on
S3 relies on (``PutObject`` with ``If-None-Match: *`` fails with 412 when the key exists). Its
buckets live in memory: stopping it loses them, as tests want. moto rather than a MinIO binary
because it installs from PyPI like every other dependency, with nothing to download at run
time, and starts in about a second.

Clients reach it as they reach AWS, through the standard environment (:meth:`LocalS3.env`):
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, which
delta-rs reads directly and lakestream's Spark session turns into ``fs.s3a.*`` settings.

>>> from ops.devservers.s3_server import LocalS3
>>> with LocalS3.start(".s3") as s3:                       # doctest: +SKIP
...     s3.create_bucket("lake")
...     print(s3.endpoint)
http://127.0.0.1:...

From a shell: ``python -m ops.devservers.s3_server start [--dir .s3] [--port 9000] [--bucket lake]``
starts one in the background and prints the environment to use it;
``python -m ops.devservers.s3_server stop [--dir .s3]`` stops it by the pid it recorded.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ConfigError
from .process import LocalServer

__all__ = ["LocalS3", "main"]

_READY_SECONDS = 60  # moto imports in 1-3 s; a busy 2-core machine takes longer
_REGION = "us-east-1"
_ACCESS_KEY = "lakestream-local"
_SECRET_KEY = "lakestream-local-secret"  # moto checks no signature; any key pair works


class LocalS3(LocalServer):
    """A running server: its port, its process and the folder holding its pid file and log."""

    WHAT = "the S3 server"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, folder: str | Path, port: int | None = None) -> LocalS3:
        """Start a server on ``127.0.0.1:port`` (a free port when omitted), its log and pid in
        ``folder``; returns once it answers. Raises ``ConfigError`` with the end of its log if
        it does not come up."""
        return cls.launch(folder, port, lambda folder, port: [
            sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])

    def wait_until_ready(self) -> None:
        """Return once the server answers an S3 request; raise if it died or took too long."""
        self.wait_for_http(self.endpoint + "/", f"the S3 server ({self.folder})", _READY_SECONDS, 0.3)

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (nothing when it exists); a name S3 refuses is a ``ConfigError``
        saying which rule it breaks."""
        check_bucket_name(bucket)
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # BucketAlreadyOwnedByYou
                raise ConfigError(f"creating bucket {bucket!r} on {self.endpoint} failed: "
                                  f"HTTP {exc.code}") from exc

    def env(self) -> dict[str, str]:
        """The standard AWS environment that points clients (delta-rs, Spark's s3a, boto3)
        at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": _ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": _SECRET_KEY, "AWS_REGION": _REGION,
                "AWS_ALLOW_HTTP": "true"}


#: S3's naming rules for general purpose buckets (AWS's "Bucket naming rules")
_BUCKET_CHARACTERS = re.compile(r"[a-z0-9][a-z0-9.-]*[a-z0-9]")
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def check_bucket_name(bucket: str) -> None:
    """Raise a ``ConfigError`` naming the rule ``bucket`` breaks, if S3 would refuse it.

    >>> check_bucket_name("lake")
    >>> check_bucket_name("rk")
    Traceback (most recent call last):
    ...
    state.errors.ConfigError: bucket name 'rk' is refused by S3: 3 to 63 characters (it has 2)
    """
    broken = None
    if not 3 <= len(bucket) <= 63:
        broken = f"3 to 63 characters (it has {len(bucket)})"
    elif not _BUCKET_CHARACTERS.fullmatch(bucket):
        broken = ("lowercase letters, digits, '.' and '-' only, beginning and ending with a "
                  "letter or digit")
    elif ".." in bucket:
        broken = "no two dots in a row"
    elif _looks_like_ip(bucket):
        broken = "not shaped like an IP address"
    elif bucket.startswith(_RESERVED_PREFIXES) or bucket.endswith(_RESERVED_SUFFIXES):
        broken = (f"no reserved prefix {list(_RESERVED_PREFIXES)} or suffix "
                  f"{list(_RESERVED_SUFFIXES)}")
    if broken:
        raise ConfigError(f"bucket name {bucket!r} is refused by S3: {broken}")


def _looks_like_ip(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    """``python -m ops.devservers.s3_server start|stop|status [--dir DIR] [--port N] [--bucket NAME]``."""
    parser = argparse.ArgumentParser(prog="python -m ops.devservers.s3_server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", default=".s3", help="its pid file and log (default .s3)")
    parser.add_argument("--port", type=int, default=9000, help="the S3 port (default 9000)")
    parser.add_argument("--bucket", action="append", default=[],
                        help="a bucket to create once it runs (repeatable)")
    args = parser.parse_args(argv)
    running = LocalS3.attach(args.dir)
    if args.action == "start":
        try:
            running = _started(running, args.dir, args.port, args.bucket)
        except ConfigError as error:
            parser.exit(1, f"python -m ops.devservers.s3_server start: {error}\n")
        print(f"S3 server running at {running.endpoint} (pid {running.pid}); to use it:")
        for key, value in running.env().items():
            print(f"export {key}={value}")
    elif args.action == "stop":
        if running is not None:
            running.stop()
        print("S3 server stopped" if running else f"no S3 server running from {args.dir}")
    else:
        print(f"running at {running.endpoint} (pid {running.pid})" if running else "not running")


def _started(running: LocalS3 | None, folder: str, port: int, buckets: list[str]) -> LocalS3:
    """The server of ``folder`` (started unless ``running``) with ``buckets`` created. The names
    are checked before anything starts; a server this call started is stopped (by its pid) when
    a bucket cannot be made, so a failed command leaves nothing behind."""
    for bucket in buckets:
        check_bucket_name(bucket)
    started = running is None
    server = running or LocalS3.start(folder, port)
    try:
        for bucket in buckets:
            server.create_bucket(bucket)
    except ConfigError:
        if started:
            server.stop()
        raise
    server.process = None  # it outlives this command
    return server


if __name__ == "__main__":
    main()
