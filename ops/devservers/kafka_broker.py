"""An embedded single-node Kafka broker for development, tests, benchmarks and the examples.

Kafka 4 in KRaft mode (broker and controller in one JVM, no ZooKeeper), run from the Apache
Kafka jars on Maven Central (fetched once into ``.jars/``), listening on loopback only. Its
storage is formatted with Kafka's own storage tool the first time a folder is used, so a broker
started again on the same folder keeps its topics.

>>> from ops.devservers.kafka_broker import EmbeddedKafka
>>> with EmbeddedKafka.start("/tmp/kafka-doc") as kafka:      # doctest: +SKIP
...     print(kafka.bootstrap)
127.0.0.1:...

From a shell: ``python -m ops.devservers.kafka_broker start [--dir .kafka] [--port 9092]`` starts one in the
background and prints its address; ``python -m ops.devservers.kafka_broker stop [--dir .kafka]`` stops it by
the pid it recorded.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from ..errors import ConfigError
from ..spark.jars import kafka_broker_bundle
from .process import LocalServer, free_port, shell_command

_READY_SECONDS = 90  # a cold JVM on a busy 2-core machine; seen up in under 20 s
_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""
_LOG4J = """\
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName={log}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
"""


__all__ = ["EmbeddedKafka", "free_port", "main"]


class EmbeddedKafka(LocalServer):
    """A running broker: its address, its process and the folder holding its data and log."""

    WHAT = "a Kafka broker"
    PID_FILE = "broker.pid"
    LOGS = ("stdout.log", "broker.log")
    STOP_GRACE = 20.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.folder / "broker.log"

    @classmethod
    def start(cls, folder: str | Path, port: int | None = None, heap: str = "512m") -> EmbeddedKafka:
        """Start a broker on ``127.0.0.1:port`` (a free port when omitted) with its data in
        ``folder``; returns once it answers. Raises ``ConfigError`` with the end of its log if
        it does not come up."""
        return cls.launch(folder, port, lambda folder, port: _broker_command(folder, port, heap))

    def wait_until_ready(self) -> None:
        """Return once the broker answers a metadata request; raise if it died or took too long."""
        from confluent_kafka.admin import AdminClient  # only brokers need the client at import

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

        def answers(left: float) -> None:
            admin.list_topics(timeout=2)
            self._start_transactions(left)
        # not up yet: librdkafka says so in many ways
        self.wait_until(answers, f"the Kafka broker in {self.folder}", self.bootstrap, _READY_SECONDS,
                        0.5, (Exception,))

    def _start_transactions(self, seconds: float) -> None:
        """Register a transactional producer once, so the transaction coordinator has loaded
        (its log created) before anyone needs it: a sink's first transaction then starts at once."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 0,
                             "transactional.id": "lakestream.broker-ready"})
        producer.init_transactions(max(1.0, seconds))


def _broker_command(folder: Path, port: int, heap: str) -> list[str]:
    """The broker's command, once its configuration is written in ``folder`` and its storage
    formatted (the first time only: a broker started again on a folder keeps its topics)."""
    (folder / "data").mkdir(exist_ok=True)
    classpath = kafka_broker_bundle().classpath()
    properties = folder / "server.properties"
    properties.write_text(_PROPERTIES.format(port=port, controller=free_port(), data=folder / "data"))
    (folder / "log4j2.properties").write_text(_LOG4J.format(log=folder / "broker.log"))
    if not (folder / "data" / "meta.properties").exists():
        _run_storage_tool(classpath, properties)
    return ["java", f"-Xmx{heap}", f"-Xms{heap}",
            f"-Dlog4j2.configurationFile=file:{folder / 'log4j2.properties'}",
            "-cp", classpath, "kafka.Kafka", str(properties)]


def _run_storage_tool(classpath: str, properties: Path) -> None:
    """Format the broker's storage, as ``kafka-storage.sh format`` would."""
    command = ["java", "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool", "format",
               "--cluster-id", uuid.uuid4().hex[:22], "--config", str(properties)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"formatting Kafka's storage for {properties} failed: "
                          f"{(done.stdout + done.stderr).strip()[-2000:]}")


def main(argv: list[str] | None = None) -> None:
    """``python -m ops.devservers.kafka_broker start|stop|status [--dir DIR] [--port N]``."""
    shell_command(EmbeddedKafka, argv, prog="python -m ops.devservers.kafka_broker",
                  what="Kafka broker", folder=".kafka", port=9092, start=EmbeddedKafka.start,
                  address=lambda broker: broker.bootstrap)


if __name__ == "__main__":
    main()
