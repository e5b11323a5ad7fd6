"""A Spark session that starts when something first needs it.

Most of a driver-mode run on storage delta-rs serves needs no JVM at all: recovery, planning, a
batch's read, its state and its commits all go through delta-rs and pyarrow. Starting Spark
anyway cost a Dagster step 5-20 s for a batch of 0.2 s. A :class:`LazySparkSession` is a
``SparkSession`` to every caller (it passes ``isinstance`` and forwards every attribute), and
only the first attribute that needs the real session starts it, once, for the whole process.

Two things are answered without starting it: :func:`spark_started` (the transaction warmer, which has
nothing to warm before Spark runs, asks), and ``conf.get`` of a setting the session will be
started with (a read converting times asks for ``spark.sql.session.timeZone``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The attributes a lazy session answers itself; every other one is the real session's.
_OWN = frozenset({"started", "start_in_background", "session", "_lazy", "__class__",
                  "__repr__", "__dict__"})


class _Start:
    """Starts the real session once, in the foreground or in a background thread."""

    def __init__(self, start: Callable[[], SparkSession], settings: Mapping[str, str],
                 on_start: Callable[[], None] | None):
        self.start, self.settings, self.on_start = start, dict(settings), on_start
        self.real: SparkSession | None = None
        self.lock = threading.Lock()
        self.background: threading.Thread | None = None

    def session(self) -> SparkSession:
        with self.lock:  # a background start holds it: the caller waits for that one
            if self.real is None:
                if self.on_start is not None and _running() is None:
                    self.on_start()  # a JVM really starts now (none runs in this process)
                self.real = self.start()
            return self.real

    def in_background(self) -> None:
        with self.lock:
            if self.real is not None or self.background is not None:
                return
            self.background = threading.Thread(target=self._start_quietly,
                                               name="lakestream-spark-start", daemon=True)
            self.background.start()

    def _start_quietly(self) -> None:
        try:
            self.session()
        except Exception as exc:  # the first caller that needs it starts it again, and sees why
            log.debug("starting Spark in the background failed: %s", exc)

    @property
    def started(self) -> bool:
        return self.real is not None or _running() is not None


def _running() -> SparkSession | None:
    """The process's running session, if one was started (by anyone)."""
    running = SparkSession._instantiatedSession
    return running if running is not None and running.sparkContext._jsc is not None else None


class LazySparkSession(SparkSession):
    """A ``SparkSession`` whose JVM starts when an attribute of the real session is first used.

    ``start`` makes the real session (``ops.spark_session`` with the run's config);
    ``settings`` are those it will be started with, which ``conf.get`` answers before it starts;
    ``on_start`` is called just before a JVM really starts (a line in a Dagster run's log).

    >>> lazy = LazySparkSession(SparkSession.builder.getOrCreate,
    ...                         {"spark.sql.session.timeZone": "UTC"})
    >>> lazy.conf.get("spark.sql.session.timeZone")  # known before the JVM starts
    'UTC'
    """

    def __init__(self, start: Callable[[], SparkSession], settings: Mapping[str, str],
                 on_start: Callable[[], None] | None = None):
        # SparkSession.__init__ needs a running context: that is exactly what is deferred
        object.__setattr__(self, "_lazy", _Start(start, settings, on_start))

    def __getattribute__(self, name: str) -> Any:
        if name in _OWN:
            return object.__getattribute__(self, name)
        lazy: _Start = object.__getattribute__(self, "_lazy")
        if name == "conf" and not lazy.started:
            return _PlannedConf(lazy)
        return getattr(lazy.session(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.session(), name, value)

    def __repr__(self) -> str:
        lazy: _Start = object.__getattribute__(self, "_lazy")
        return f"LazySparkSession({'started' if lazy.started else 'not started'})"

    @property
    def started(self) -> bool:
        """Whether the real session runs (this one started it, or another caller did)."""
        return self._lazy.started

    def start_in_background(self) -> None:
        """Start the real session in a thread now: the work before its first use (recovery,
        planning) then overlaps the JVM's start instead of waiting for it."""
        self._lazy.in_background()

    def session(self) -> SparkSession:
        """The real session, started now if it is not running yet."""
        return self._lazy.session()


class _PlannedConf:
    """``spark.conf`` of a session not started yet: a setting it will start with is known; any
    other question starts it."""

    def __init__(self, lazy: _Start):
        self._lazy = lazy

    def get(self, key: str, *default: Any) -> Any:
        if key in self._lazy.settings:
            return self._lazy.settings[key]
        return self._lazy.session().conf.get(key, *default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lazy.session().conf, name)


def spark_started(spark: SparkSession | None) -> bool:
    """Whether ``spark`` is a running session (a plain session always is; a lazy one once
    something needed it)."""
    if spark is None:
        return False
    return spark.started if isinstance(spark, LazySparkSession) else True


def start_in_background(spark: SparkSession) -> None:
    """Start ``spark`` in a thread if it is lazy and not started (a run that will need Spark
    says so before its recovery)."""
    if isinstance(spark, LazySparkSession):
        spark.start_in_background()
