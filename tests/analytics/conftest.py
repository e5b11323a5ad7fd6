"""A real query-manager server (uvicorn on loopback) over the server-monitoring pipeline."""

import threading
import time
from types import SimpleNamespace

import pytest
import uvicorn

from analytics import QueryManager, QueryServer
from analytics.demo import TABLE, TARGET, cpu_pipeline, register_cpu_analytic
from tests.helpers import free_port

TOKENS = {"t-ann": "ann", "t-bob": "bob"}


@pytest.fixture
def live(spark, warehouse):
    register_cpu_analytic()
    pipeline = cpu_pipeline()
    manager = QueryManager(spark, {TARGET: (pipeline, TABLE)}, warehouse)
    server = QueryServer(manager, TOKENS, poll_seconds=0.2, queue_size=2, grace_seconds=0.5)
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started:
        assert time.monotonic() < deadline, "the server did not start within 30 s"
        time.sleep(0.05)

    def feed(rows):
        pipeline.publish(spark, rows, warehouse)
        pipeline.run_once(spark, warehouse)

    yield SimpleNamespace(url=f"http://127.0.0.1:{port}", server=server, manager=manager, feed=feed)
    runner.should_exit = True
    thread.join(timeout=30)
