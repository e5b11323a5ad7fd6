"""Key groups: every key of keyed state belongs to one of G groups, by a stable hash of its
encoded key, so state can be owned, read and moved by group rather than by key or by task.

G is fixed when a pipeline first checkpoints (Flink calls it max parallelism): changing it would
move keys between groups. The hash is CRC-32 of the key's UTF-8 encoding, which Python
(``zlib.crc32``) and Spark SQL (``crc32``) compute alike, so the driver and executors agree.

>>> key_group('"sensor-7"', 256)
107
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

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


def key_group_column(encoded_key: Column, groups: int) -> Column:
    """:func:`key_group` as a Spark column over a column of encoded keys."""
    return F.pmod(F.crc32(encoded_key.cast("binary")), F.lit(groups)).cast("int")


def check_key_groups(groups: int) -> int:
    """``groups`` if it is a valid number of key groups; ``ValueError`` saying the range if not."""
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= MAX_KEY_GROUPS:
        raise ValueError(f"key groups must be an integer from 1 to {MAX_KEY_GROUPS}, got {groups!r}")
    return groups
