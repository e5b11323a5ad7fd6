"""Progress where users wait: a line every few seconds while a long step is still running.

A sensor-started run that starts Spark, fetches jars or recovers a large checkpoint can take
minutes, and a log that says nothing for that long looks like a hang. A :class:`Heartbeat`
watches the step a run is on (``doing("recovering")``) from one daemon thread and logs
``still recovering (20 s)`` every ``every`` seconds for as long as that one step lasts; steps
that finish sooner log nothing.

>>> import logging
>>> with Heartbeat(logging.getLogger("demo"), every=10) as beat:
...     beat.doing("starting Spark")
...     beat.doing(None)  # done: nothing more is logged
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

PROGRESS_SECONDS = 10.0  # at most this long without a line while a step runs


class Heartbeat:
    """Logs the current step on ``logger`` every ``every`` seconds while it lasts."""

    def __init__(self, logger: logging.Logger, every: float = PROGRESS_SECONDS):
        self._logger = logger
        self._every = every
        self._lock = threading.Lock()
        self._step: str | None = None
        self._since = 0.0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def doing(self, step: str | None) -> None:
        """The run is now on ``step`` (``None``: on nothing worth reporting)."""
        with self._lock:
            self._step, self._since = step, time.monotonic()
        if step is not None and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="lakestream-heartbeat",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _beat(self) -> None:
        # wakes every `every` seconds; a step that began less than `every` ago stays quiet
        while not self._closed.wait(self._every):
            with self._lock:
                step, since = self._step, self._since
            waited = time.monotonic() - since
            if step is not None and waited >= self._every:
                self._logger.info("still %s (%.0f s)", step, waited)


@contextmanager
def reporting(logger: logging.Logger, step: str, every: float = PROGRESS_SECONDS) -> Iterator[None]:
    """One long step with a heartbeat: ``with reporting(log, "starting Spark"): ...``."""
    with Heartbeat(logger, every) as beat:
        beat.doing(step)
        yield
