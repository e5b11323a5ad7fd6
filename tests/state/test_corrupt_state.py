"""State that cannot be decoded fails the batch naming the operator and the key; nothing of the
batch is committed."""

import pytest

import ops as sp
from state import CorruptStateError

MESSAGE = r"state of operator 'running_sum' for key 'a' cannot be decoded with the pickle codec"


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def pipeline(codec):
    return (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
            .map(running_sum, state=0, codec=codec).write.to_delta("sums")).named("codecs")


def test_a_value_the_codec_cannot_read_names_operator_and_key(spark, warehouse):
    pipeline("json").publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline("json").run_once(spark, warehouse)
    changed = pipeline("pickle")  # the codec changed under stored JSON values
    changed.publish(spark, [{"k": "a", "x": 2}], warehouse)
    with pytest.raises(CorruptStateError, match=MESSAGE):
        changed.run_once(spark, warehouse)
    assert sp.describe(spark, changed, warehouse).checkpoint_id == 1  # nothing committed
    assert changed.read_sink(spark, "sums", warehouse)["total"].tolist() == [1]
    with pytest.raises(CorruptStateError, match=MESSAGE):
        sp.read_state(spark, changed, "running_sum", warehouse=warehouse)
    assert pipeline("json").run_once(spark, warehouse).rows_out == 1  # the right codec goes on
    assert pipeline("json").read_sink(spark, "sums", warehouse)["total"].tolist() == [1, 3]
