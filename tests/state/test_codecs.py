"""The state codecs' errors, without a pipeline: a stored text the codec cannot decode names the
operator and the key (the first of many that fails), a value it cannot encode names them too,
and an unknown codec name is refused. (How a run meets them, a codec changed under stored state,
is ``tests/ops/runtime/test_corrupt_state.py``.)"""

import pyarrow as pa
import pytest

from state import CorruptStateError, EncodingError
from state.contract.codecs import codec_named, decode_value, decode_values, encode_value

JSON, PICKLE = codec_named("json"), codec_named("pickle")


@pytest.mark.parametrize("written, read", [(JSON, PICKLE), (PICKLE, JSON)],
                         ids=["json read as pickle", "pickle read as json"])
def test_texts_another_codec_wrote_name_the_operator_and_the_first_key_that_fails(written, read):
    texts = pa.array([read.encode(1), written.encode({"n": 2}), written.encode(3)])
    with pytest.raises(CorruptStateError, match=(
            rf"state of operator 'running_sum' for key 'b' cannot be decoded with the {read.name} "
            r"codec .*the stored text starts .*Nothing of this batch was committed")):
        decode_values(read, texts, ["a", "b", "c"], operator="running_sum")
    assert decode_values(read, texts[:1], ["a"], operator="running_sum") == [1]


def test_one_stored_text_names_its_key_as_stored():
    with pytest.raises(CorruptStateError, match=r"operator 'sums' for key \('a', 1\) .*json codec "
                                                r"\(JSONDecodeError"):
        decode_value(JSON, "not json", operator="sums", key=("a", 1))
    assert decode_value(PICKLE, PICKLE.encode({"a": [1]}), operator="sums", key=("a", 1)) == {"a": [1]}


def test_a_value_the_codec_cannot_encode_names_operator_and_key_and_the_way_out():
    with pytest.raises(EncodingError, match=r"operator 'bad' for key 42 cannot be encoded with the "
                                            r"json codec .*use codec='pickle'"):
        encode_value(JSON, object(), operator="bad", key=42)
    assert encode_value(PICKLE, {1, 2}, operator="bad", key=42) == PICKLE.encode({1, 2})


def test_an_unknown_codec_name_is_refused_naming_the_known_ones():
    with pytest.raises(EncodingError, match=r"unknown state codec 'yaml'; use one of \['json', 'pickle'\]"):
        codec_named("yaml")
