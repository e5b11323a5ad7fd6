"""Talking to Kafka: the connection settings a source and a sink share, offsets and partitions.

Positions in Kafka are per partition; lakestream writes them as JSON objects keyed
``"<topic>:<partition>"`` (a colon never appears in a topic name) whose values are the next
offset to read, Kafka's own convention: a slice ``(start, end]`` reads offsets
``start[p] … end[p] - 1`` of each partition ``p``.

>>> part_id("orders", 3), parse_part("orders:3")
('orders:3', ('orders', 3))
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, SourceError, StreamError


class _ClientLog:
    """Where librdkafka's own lines go: debug lines of logger ``ops.kafka.client``. It logs
    every failed connection attempt, many a second while a broker is down; lakestream's own
    error names the brokers once, so these are detail for whoever turns debug logging on."""

    _log = logging.getLogger("ops.kafka.client")

    def log(self, level: int, message: str, *args: Any) -> None:
        self._log.debug(message, *args)


_client_log = _ClientLog()
#: Seconds a call to the brokers may take before lakestream says they are unreachable.
DEFAULT_TIMEOUT = 15.0


def call_within(timeout: float, doing: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, waited for no longer than ``timeout`` seconds (and one of grace), for
    the librdkafka calls that can ignore their own timeout: ``send_offsets_to_transaction``
    waits for good when the group coordinator goes down during the call (librdkafka issue
    5456, still open in 2.16). A call given up on goes on in a daemon thread, and the caller
    gets ``TimeoutError`` naming what was being ``doing``; the call's own error is re-raised.

    >>> call_within(1, "adding", sum, [1, 2])
    3
    >>> call_within(1, "parsing", int, "x")
    Traceback (most recent call last):
    ValueError: invalid literal for int() with base 10: 'x'
    >>> import threading
    >>> call_within(0.1, "waiting for nothing", threading.Event().wait)
    Traceback (most recent call last):
    TimeoutError: waiting for nothing did not return within 0.1 s
    """
    outcome: list[Any] = []
    worker = threading.Thread(target=_call_into, args=(outcome, call, args),
                              name="lakestream-kafka-call", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    if not outcome:
        raise TimeoutError(f"{doing} did not return within {timeout:g} s")
    returned, value = outcome[0]
    if not returned:
        raise value
    return value


def _call_into(outcome: list[Any], call: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """``call(*args)``'s value or error, appended to ``outcome`` (the thread of
    :func:`call_within`). A function of the module, not a closure: a frame of an error
    raised here keeps its function, and a closure's cells (``call``: a method of a producer,
    say) would stay alive with it even once :func:`traceback.clear_frames` cleared the
    frame's variables."""
    try:
        outcome.append((True, call(*args)))
    except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
        outcome.append((False, error))


def part_id(topic: str, partition: int) -> str:
    """The name a topic partition has in positions: ``"<topic>:<partition>"``."""
    return f"{topic}:{partition}"


def parse_part(name: str) -> tuple[str, int]:
    """``"orders:3"`` -> ``("orders", 3)``."""
    topic, _, partition = name.rpartition(":")
    return topic, int(partition)


@dataclass(frozen=True)
class KafkaConnection:
    """Where the brokers are and how to talk to them.

    ``options`` are librdkafka settings passed through unchanged (``security.protocol``,
    ``sasl.*``, ``ssl.*``…); the Spark reader and writer get them too, prefixed ``kafka.``.
    """

    bootstrap: str
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if not self.bootstrap or not all(":" in server for server in self.bootstrap.split(",")):
            raise ConfigError(f"Kafka bootstrap servers must be host:port[,host:port…], got "
                              f"{self.bootstrap!r}")

    def config(self, **more: Any) -> dict[str, Any]:
        """librdkafka settings: the brokers, the user's options, then ``more``."""
        # a request to a broker that went away fails after the timeout, not librdkafka's 60 s
        return {"bootstrap.servers": self.bootstrap, "logger": _client_log,
                "socket.timeout.ms": int(self.timeout * 1000), **dict(self.options), **more}

    def spark_options(self) -> dict[str, str]:
        """The same settings for Spark's Kafka source and sink."""
        return {"kafka.bootstrap.servers": self.bootstrap,
                **{f"kafka.{key}": value for key, value in self.options}}

    def unreachable(self, doing: str, error: BaseException,
                    kind: type[StreamError] = SourceError) -> StreamError:
        """The error for a call that failed: names the brokers and what was being done."""
        return kind(f"Kafka at {self.bootstrap} did not answer while {doing} within "
                    f"{self.timeout:g} s ({error}); is the broker up and reachable from here?")

    def partitions(self, topics: Iterable[str]) -> list[str]:
        """Every partition of ``topics``, as position names, in topic then partition order.
        Raises :class:`SourceError` naming a topic that does not exist."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.config())
        try:
            metadata = admin.list_topics(timeout=self.timeout)
        except Exception as error:  # KafkaException: the brokers did not answer
            raise self.unreachable("listing topics", error) from error
        parts = []
        for topic in topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise SourceError(f"Kafka topic {topic!r} does not exist on {self.bootstrap}"
                                  + (f" ({found.error})" if found is not None and found.error else ""))
            parts += [part_id(topic, p) for p in sorted(found.partitions)]
        return parts

    def offsets(self, parts: Iterable[str], which: str) -> dict[str, int]:
        """The ``"earliest"`` (first kept) or ``"latest"`` (read-committed end: the last
        stable offset, so records of open transactions are not counted) offset of each partition."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()
        wanted = {TopicPartition(*parse_part(p)): spec for p in parts}
        if not wanted:
            return {}
        admin = AdminClient(self.config())
        try:
            answers = admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=self.timeout)
            return {part_id(tp.topic, tp.partition): answer.result().offset
                    for tp, answer in answers.items()}
        except Exception as error:  # KafkaException: unreachable or the topic went away
            raise self.unreachable(f"reading the {which} offsets of {sorted(map(str, parts))}",
                                   error) from error

    def ends(self, topics: Iterable[str]) -> dict[str, int]:
        """The read-committed end offset of every partition of ``topics``."""
        return self.offsets(self.partitions(topics), "latest")


def connection(bootstrap: str, options: Mapping[str, str] | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> KafkaConnection:
    """A :class:`KafkaConnection` from plain arguments (options sorted, so equal ones compare equal)."""
    return KafkaConnection(bootstrap, tuple(sorted((options or {}).items())), timeout)
