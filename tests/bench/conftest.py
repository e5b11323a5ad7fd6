import pytest

from bench.nexmark import streams
from bench.nexmark.generator import NexmarkConfig


@pytest.fixture(scope="module")
def nexmark(tmp_path_factory):
    """A stream of 2 batches of 2,000 events, 100 per second of event time (20 s a batch, so
    q8's and q11's 10-second windows and sessions close within it)."""
    folder = str(tmp_path_factory.mktemp("nexmark"))
    return folder, streams.write_stream(folder, NexmarkConfig(seed=11, events_per_second=100),
                                        batches=2, size=2_000)
