"""State that cannot be decoded fails the batch naming the operator and the key; nothing of the
batch is committed. A codec changed under a checkpoint that records its state's codec is caught
before that, at the run's start; one from an earlier release (no record) gets this far."""

import dataclasses

import pandas as pd
import pytest

import ops as sp
from state import CheckpointLog, CorruptStateError

MESSAGE = r"state of operator 'running_sum' for key 'a' cannot be decoded with the pickle codec"


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def pipeline(codec):
    return (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
            .map(running_sum, state=0, codec=codec, state_type="json")  # values as text
            .write.to_delta("sums")).named("codecs")


def test_a_value_the_codec_cannot_read_names_operator_and_key(spark, warehouse):
    pipeline("json").publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline("json").run_once(spark, warehouse)
    changed = pipeline("pickle")  # the codec changed under stored JSON values
    changed.publish(spark, [{"k": "a", "x": 2}], warehouse)
    with pytest.raises(sp.PipelineChangedError, match="stored with the json codec, now read "
                                                      "with pickle"):
        changed.run_once(spark, warehouse)
    _forget_what_the_checkpoint_means(spark, changed, warehouse)  # as an earlier release wrote it
    with pytest.raises(CorruptStateError, match=MESSAGE):
        changed.run_once(spark, warehouse)
    assert sp.describe(spark, changed, warehouse).checkpoint_id == 2  # nothing committed
    assert changed.read_sink(spark, "sums", warehouse)["total"].tolist() == [1]
    with pytest.raises(CorruptStateError, match=MESSAGE):
        sp.read_state(spark, changed, "running_sum", warehouse=warehouse)
    assert pipeline("json").run_once(spark, warehouse).rows_out == 1  # the right codec goes on
    assert pipeline("json").read_sink(spark, "sums", warehouse)["total"].tolist() == [1, 3]


def _forget_what_the_checkpoint_means(spark, pipeline, warehouse):
    log = CheckpointLog(spark, pipeline.layout(warehouse))
    latest = log.latest()
    log.commit(dataclasses.replace(latest, checkpoint_id=latest.checkpoint_id + 1,
                                   operators=None), pd.DataFrame())
