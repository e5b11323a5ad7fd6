"""A cold run (a new run over a stored state) reads each of ``_state``'s files at most once for
its batch, whichever checkpoints its keys were last written by, for typed and JSON state, and
gives the totals an oracle gives."""

from collections import Counter

import numpy as np
import pandas as pd

import ops as sp
from state import delta_io
from tests.helpers import sink_rows


def running_sum(op, md, data):
    previous = sp.get(op, md)
    totals = data.groupby("k", sort=False)["x"].sum()
    sp.set(op, md, previous.add(totals, fill_value=0).astype("int64"))
    return data.assign(**{op.name: data["k"].map(previous.add(totals, fill_value=0))})


def pipeline():
    return (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
            .map(running_sum, state=0, name="typed", vectorized=True, state_type=int)
            .map(running_sum, state=0, name="text", vectorized=True, state_type="json")
            .write.to_delta("out")).named("cold_reads")


def test_a_cold_batch_reads_each_state_file_once(spark, warehouse, monkeypatch):
    built = pipeline()
    rng = np.random.default_rng(3)
    oracle: Counter = Counter()
    for first in (0, 300, 600):  # three checkpoints, each writing keys of its own
        batch = pd.DataFrame({"k": np.arange(first, first + 300), "x": rng.integers(1, 9, 300)})
        oracle.update(dict(zip(batch["k"].tolist(), batch["x"].tolist())))
        built.publish(spark, batch, warehouse)
        built.run_once(spark, warehouse)
    state_path = built.layout(warehouse).state

    read: list[str] = []
    real = delta_io.read_data_files

    def counted(path, names, *args, **kwargs):
        if path == state_path:
            read.extend(names)
        return real(path, names, *args, **kwargs)

    monkeypatch.setattr(delta_io, "read_data_files", counted)
    touched = pd.DataFrame({"k": [5, 305, 605, 899, 1_000, 5], "x": [1, 2, 3, 4, 5, 6]})
    built.publish(spark, touched, warehouse)
    built.run_once(spark, warehouse)

    assert read, "the cold run read its keys' state from the files"
    assert max(Counter(read).values()) == 1, Counter(read).most_common(3)
    partitions = {name.split("/")[0] for name in read}
    assert len(partitions) == 2  # each operator read its own partition's files
    for key, x in zip(touched["k"], touched["x"]):
        oracle[key] += x
    last = sink_rows(spark, built, warehouse, "out").tail(len(touched))
    # each row carries its key's total after the batch (a vectorized set per batch)
    after = sorted(oracle[key] for key in touched["k"])
    assert sorted(last["typed"].tolist()) == after == sorted(last["text"].tolist())
