"""A continuous run's Prometheus metrics, scraped over HTTP while it reads a Kafka topic."""

import threading
import time

import ops as sp
from ops.kafka_client import create_topic, send_json
from tests.helpers import scraped


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def test_a_continuous_run_serves_its_metrics_over_http(spark, warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic, partitions=2)
    for partition, keys in ((0, "aab"), (1, "bcc")):
        send_json(kafka.bootstrap, topic, [{"k": k, "x": n} for n, k in enumerate(keys, 1)],
                  key="k", partition=partition)
    send_json(kafka.bootstrap, topic, [{"k": "a", "x": "not a number"}], key="k", partition=0)
    pipeline = (sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, schema={"k": "string", "x": "long"},
                                   max_records=3)
                .map(running_sum, state=0).write.to_delta("sums")).named("metered")
    # lag asked once, at the first plan (before any batch ran): a value the test can know
    metrics, stop, outcome = sp.RunMetrics(lag_every_seconds=3600), sp.StopSignal(), {}

    def run():
        try:
            outcome["report"] = pipeline.run_continuously(spark, warehouse, trigger="100ms", stop=stop,
                                                          max_seconds=120, metrics=metrics)
        except BaseException as error:  # the test thread reports it
            outcome["error"] = error

    with metrics.serving() as endpoint:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 90
        by_pipeline = (("pipeline", "metered"),)
        while scraped(endpoint.url).get(("lakestream_rows_in_total", by_pipeline)) != 7:
            assert time.monotonic() < deadline and thread.is_alive(), outcome.get("error")
            time.sleep(0.2)
        while scraped(endpoint.url).get(("lakestream_last_checkpoint_id", by_pipeline), 0) < 1:
            assert time.monotonic() < deadline and thread.is_alive(), outcome.get("error")
            time.sleep(0.2)
        samples = scraped(endpoint.url)
        stop.set("test done")
        thread.join(60)
    assert "error" not in outcome, outcome.get("error")

    def value(name, **labels):
        return samples.get((name, tuple(sorted({"pipeline": "metered", **labels}.items()))))

    assert value("lakestream_rows_out_total") == 6
    assert value("lakestream_dead_letters_total") == 1
    assert value("lakestream_batches_total", mode="driver") == outcome["report"].totals.batches >= 3
    assert value("lakestream_keys_touched_total") >= 3
    assert value("lakestream_batch_seconds_count") == value("lakestream_batches_total", mode="driver")
    assert value("lakestream_checkpoint_seconds_count") >= 1
    assert value("lakestream_last_batch_id") >= 3
    assert value("lakestream_state_keys_held", state="running_sum") == 3  # a, b and c
    assert {labels: lag for (name, labels), lag in samples.items() if name == "lakestream_source_lag"} == {
        (("part", f"{topic}:0"), ("pipeline", "metered"), ("source", "kafka")): 4,
        (("part", f"{topic}:1"), ("pipeline", "metered"), ("source", "kafka")): 3}
