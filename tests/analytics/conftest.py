"""A real query-manager server (uvicorn on loopback) over the server-monitoring pipeline, which a
test can restart on the same port (a new manager over the same warehouse)."""

import threading
import time

import pytest
import uvicorn

from analytics import QueryManager, QueryServer, Registry
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic
from ops.devservers.kafka_broker import free_port

TOKENS = {"t-ann": "ann", "t-bob": "bob"}
SERVER_DEFAULTS = {"poll_seconds": 0.05, "queue_size": 2, "grace_seconds": 0.5}


class Live:
    """The pipeline, and a server over it at ``url``; ``feed`` runs one batch."""

    def __init__(self, spark, warehouse, **options):
        self.registry = Registry()  # its own: what other tests register elsewhere is not seen here
        register_cpu_analytic(self.registry)
        self.spark, self.warehouse = spark, warehouse
        self.pipeline = cpu_pipeline()
        self.options = {**SERVER_DEFAULTS, **options}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runner = None
        self.start()

    def start(self):
        self.manager = QueryManager(self.spark, {TARGET: (self.pipeline, TABLE)}, self.warehouse,
                                    registry=self.registry)
        self.server = QueryServer(self.manager, TOKENS, **self.options)
        self.runner = uvicorn.Server(uvicorn.Config(self.server.app(), host="127.0.0.1",
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.runner.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.runner.started:
            assert time.monotonic() < deadline, "the server did not start within 30 s"
            time.sleep(0.05)

    def stop(self):
        """Stop the server (its open streams end; their clients will reconnect) and manager."""
        self.runner.should_exit = True
        time.sleep(0.3)  # uvicorn stops listening first: the streams' clients cannot come back
        self.server.end_streams()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the server did not stop within 30 s"
        self.manager.close()

    def restart(self):
        self.stop()
        self.start()

    def feed(self, rows):
        self.pipeline.publish(self.spark, rows, self.warehouse)
        self.pipeline.run_once(self.spark, self.warehouse)


@pytest.fixture
def make_live(spark, warehouse):
    """``make_live(**server_options)``: a started :class:`Live`, stopped after the test."""
    made = []

    def make(**options):
        made.append(Live(spark, warehouse, **options))
        return made[-1]

    yield make
    for live in made:
        live.stop()


@pytest.fixture
def live(make_live):
    return make_live()
