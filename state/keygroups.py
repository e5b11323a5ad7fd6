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


def key_groups(encoded_keys: Iterable[str], groups: int) -> np.ndarray:
    """:func:`key_group` of every key, as an ``int32`` array: one pass with no call per key
    (a checkpoint hashes every key it changed, 100k and more).

    >>> key_groups(['"sensor-7"', "12", ""], 256).tolist()
    [107, 205, 0]
    """
    crc32 = zlib.crc32
    hashes = np.fromiter((crc32(key.encode("utf-8")) for key in encoded_keys), np.int64)
    return (hashes % groups).astype(np.int32)


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
    """:func:`key_groups` of Arrow strings: their UTF-8 bytes as they are (a cast to binary
    copies nothing), so no Python string is made and encoded again: nearly twice as fast."""
    crc32 = zlib.crc32
    binary = pa.large_binary() if pa.types.is_large_string(texts.type) else pa.binary()
    hashes = np.fromiter(map(crc32, texts.cast(binary).to_pylist()), np.int64, count=len(texts))
    return (hashes % groups).astype(np.int32)


def key_group_column(encoded_key: Column, groups: int) -> Column:
    """:func:`key_group` as a Spark column over a column of encoded keys."""
    return F.pmod(F.crc32(encoded_key.cast("binary")), F.lit(groups)).cast("int")


def check_key_groups(groups: int) -> int:
    """``groups`` if it is a valid number of key groups; ``ValueError`` saying the range if not."""
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= MAX_KEY_GROUPS:
        raise ValueError(f"key groups must be an integer from 1 to {MAX_KEY_GROUPS}, got {groups!r}")
    return groups
