"""How a continuous run waits for input and how it is asked to stop.

A continuous run (``pipeline.run_continuously``) is one long-lived process: it keeps its Spark
session, state cache and source connections, and polls its source every trigger interval when
idle, like Spark's ``trigger(processingTime=...)``. A :class:`StopSignal` asks it to stop: the
batch in flight and its checkpoint finish, then the run returns. SIGINT and SIGTERM set it
(Dagster's "terminate" sends SIGINT to the run's process); a second signal interrupts at once.

>>> Trigger.parse("500ms").seconds
0.5
>>> stop = StopSignal()
>>> stop.set("enough"); stop.is_set(), stop.reason
(True, 'enough')
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pandas as pd

from state import ConfigError

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Trigger:
    """How often an idle continuous run asks its source for new input."""

    seconds: float

    @staticmethod
    def parse(value: Any) -> Trigger:
        """``"500ms"``, ``"2s"``, a timedelta or seconds as a number."""
        try:
            seconds = (float(value) if isinstance(value, (int, float))
                       else pd.Timedelta(value).total_seconds())
        except (ValueError, TypeError):
            raise ConfigError(f"trigger={value!r} is not a duration (use '500ms', '2s', a "
                              "timedelta or seconds)") from None
        if not 0 < seconds <= 3600:
            raise ConfigError(f"trigger={value!r} must be more than 0 and at most an hour")
        return Trigger(seconds)


class StopSignal:
    """Asks a continuous run to stop after the batch in flight and its checkpoint."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            log.info("stopping after the batch in flight: %s", reason)
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking at once when asked to stop; whether it was."""
        return self._event.wait(seconds)

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        """While inside, SIGINT and SIGTERM ask for a clean stop; a second one raises
        ``KeyboardInterrupt`` (the run is then recovered like after a crash). Only the main
        thread can take signals: elsewhere this does nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def asked(number: int, frame: FrameType | None) -> None:
            if self.is_set():
                raise KeyboardInterrupt(f"second {signal.Signals(number).name}: stopping now")
            self.set(f"received {signal.Signals(number).name}")

        previous = {number: signal.signal(number, asked) for number in _SIGNALS}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


@dataclass(frozen=True)
class Continuous:
    """A run that polls instead of returning when its source is drained: every ``trigger``
    until ``stop`` is set or, if given, ``until`` (``time.monotonic``) passed."""

    trigger: Trigger
    stop: StopSignal
    until: float | None = None

    def stopping(self) -> bool:
        if self.until is not None and time.monotonic() >= self.until and not self.stop.is_set():
            self.stop.set("the run's time limit passed")
        return self.stop.is_set()

    def idle(self) -> None:
        """Wait one trigger interval (less when the time limit is nearer)."""
        wait = self.trigger.seconds
        if self.until is not None:
            wait = max(0.0, min(wait, self.until - time.monotonic()))
        self.stop.wait(wait)
