"""Key groups: every key of keyed state belongs to one of G groups, by a stable hash of its
encoded key, so state can be owned, read and moved by group rather than by key or by task.

G is fixed when a pipeline first checkpoints (Flink calls it max parallelism): changing it would
move keys between groups. The hash is CRC-32 of the key's UTF-8 encoding, which Python
(``zlib.crc32``) and Spark SQL (``crc32``) compute alike, so the driver and executors agree.
A typed state's key (a column of ints or strings, not text: docs/plans/typed-state.md) hashes
the text :func:`state.encode_key` gives it, so its group is the one its JSON-stored key had.

>>> key_group('"sensor-7"', 256)
107
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from .codecs import encode_key

DEFAULT_KEY_GROUPS = 256
MAX_KEY_GROUPS = 32_768  # Flink's upper bound too: far more groups than any cluster has cores


def key_group(encoded_key: str, groups: int) -> int:
    """The group of an encoded key (see :func:`state.encode_key`)."""
    return zlib.crc32(encoded_key.encode("utf-8")) % groups


def key_groups(encoded_keys: Iterable[str] | pa.Array | pa.ChunkedArray, groups: int) -> np.ndarray:
    """:func:`key_group` of every key (text, or an Arrow array of it), as an ``int32`` array,
    hashed with no Python call per key (:func:`crc32_of_texts`: a checkpoint hashes every key it
    changed, 100k and more).

    >>> key_groups(['"sensor-7"', "12", ""], 256).tolist()
    [107, 205, 0]
    """
    if isinstance(encoded_keys, (pa.Array, pa.ChunkedArray)):
        return _text_groups(_plain_array(encoded_keys), groups)
    # a Series or list of str converts to Arrow at once; numpy's fixed-width text slowly
    texts = encoded_keys if isinstance(encoded_keys, (pd.Series, list)) else list(encoded_keys)
    return _text_groups(pa.array(texts, pa.string()), groups)


def typed_key_groups(keys: pa.Array | pa.ChunkedArray, groups: int) -> np.ndarray:
    """:func:`key_groups` of the text :func:`state.encode_key` gives each of ``keys`` (a typed
    state's key column), as an ``int32`` array, without making a Python value of each key:
    an int's text is its digits, a string's is JSON's (quoted, non-ASCII escaped). Nulls are
    refused (``ValueError``): a typed key is never null, and ``None`` is no key's text.

    >>> typed_key_groups(pa.array([12, -3]), 256).tolist(), key_groups(["12", "-3"], 256).tolist()
    ([205, 6], [205, 6])
    >>> typed_key_groups(pa.array(["sensor-7"]), 256).tolist()  # as '"sensor-7"'
    [107]
    """
    if keys.null_count:
        first = pc.index(pc.is_null(keys), True).as_py()
        raise ValueError(f"typed keys cannot be null (position {first} of {len(keys)} is): a "
                         "typed state's key is never null, so it has no key group")
    return _text_groups(_json_texts(_plain_array(keys)), groups)


def _plain_array(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``keys`` as one array of their own type (not chunks, views or a dictionary)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_dictionary(keys.type):
        keys = keys.dictionary_decode()
    if pa.types.is_string_view(keys.type):
        keys = keys.cast(pa.string())
    return keys


def _json_texts(keys: pa.Array) -> pa.Array:
    """:func:`state.encode_key` of every key, as an Arrow string array."""
    if pa.types.is_integer(keys.type):
        return keys.cast(pa.string())  # an int's JSON text is its digits, as Arrow writes them
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        return _quoted(keys)
    if pa.types.is_boolean(keys.type):
        return pc.if_else(keys, "true", "false")
    # floats (repr's text: "1.0", "1e+20"), and what encode_key refuses, as it refuses it
    try:
        return pa.array([encode_key(key) for key in keys.to_pylist()], pa.string())
    except TypeError as refused:
        raise TypeError(f"keys of type {keys.type} have no JSON text to hash: {refused}") from None


# Printable ASCII but '"' and '\': the strings whose JSON text is themselves between quotes
_NEEDS_NO_ESCAPE = r"^[ !#-\[\]-~]*$"


def _quoted(strings: pa.Array) -> pa.Array:
    """JSON's text of each string (``json.dumps``, ASCII only, as :func:`state.encode_key`
    writes it): quoted in one pass when no string needs an escape (the usual ids and names),
    and only the strings that do are encoded one by one."""
    quote, nothing = pa.scalar('"', strings.type), pa.scalar("", strings.type)  # large or not
    quoted = pc.binary_join_element_wise(quote, strings, quote, nothing)
    plain = pc.match_substring_regex(strings, _NEEDS_NO_ESCAPE)
    if pc.all(plain).as_py() is not False:  # True, or None for no strings at all
        return quoted
    escaping = pc.invert(plain)
    escaped = [encode_key(text) for text in strings.filter(escaping).to_pylist()]
    return pc.replace_with_mask(quoted, escaping, pa.array(escaped, strings.type))


def _text_groups(texts: pa.Array, groups: int) -> np.ndarray:
    """:func:`key_groups` of Arrow strings (no nulls)."""
    return (crc32_of_texts(texts) % groups).astype(np.int32)


def _crc_table() -> np.ndarray:
    """zlib's CRC-32 of each byte value: the table its byte-at-a-time update looks up."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1).astype(np.uint32)
    return table


_CRC_TABLE = _crc_table()


def crc32_of_texts(texts: pa.Array) -> np.ndarray:
    """``zlib.crc32`` of each string's UTF-8 bytes (no nulls), as ``uint32``: the byte-at-a-time
    update applied to every string at once, one byte position after another, reading Arrow's
    buffers as they are: a pass per byte of the longest key. For 1M keys of six bytes, 0.035 s,
    where a Python call per key (``map(zlib.crc32, …)``) took 0.09-0.11 s.

    >>> import zlib
    >>> crc32_of_texts(pa.array(["", "12", '"sensor-7"'])).tolist() == [
    ...     zlib.crc32(text.encode()) for text in ["", "12", '"sensor-7"']]
    True
    """
    offsets_type = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    offsets = np.frombuffer(texts.buffers()[1], offsets_type)[texts.offset:texts.offset + len(texts) + 1]
    data_buffer = texts.buffers()[2]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets).astype(np.int64)
    order = np.argsort(-lengths, kind="stable")  # longest first: the strings not done are a prefix
    starts, lengths = offsets[:-1].astype(np.int64)[order], lengths[order]
    going = np.searchsorted(-lengths, -np.arange(lengths[0] if len(lengths) else 0), side="left")
    crc = np.full(len(texts), 0xFFFFFFFF, np.uint32)
    for position, count in enumerate(going.tolist()):  # strings longer than ``position``
        head = crc[:count]
        crc[:count] = _CRC_TABLE[(head ^ data[starts[:count] + position]) & 0xFF] ^ (head >> 8)
    hashed = np.empty(len(texts), np.uint32)
    hashed[order] = crc ^ np.uint32(0xFFFFFFFF)
    return hashed


def key_group_column(encoded_key: Column, groups: int) -> Column:
    """:func:`key_group` as a Spark column over a column of encoded keys."""
    return F.pmod(F.crc32(encoded_key.cast("binary")), F.lit(groups)).cast("int")


def check_key_groups(groups: int) -> int:
    """``groups`` if it is a valid number of key groups; ``ValueError`` saying the range if not."""
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= MAX_KEY_GROUPS:
        raise ValueError(f"key groups must be an integer from 1 to {MAX_KEY_GROUPS}, got {groups!r}")
    return groups
