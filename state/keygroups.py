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

from pyspark.sql import Column
from pyspark.sql import functions as F

DEFAULT_KEY_GROUPS = 256
MAX_KEY_GROUPS = 32_768  # Flink's upper bound too: far more groups than any cluster has cores


def key_group(encoded_key: str, groups: int) -> int:
    """The group of an encoded key (see :func:`state.encode_key`)."""
    return zlib.crc32(encoded_key.encode("utf-8")) % groups


def key_group_column(encoded_key: Column, groups: int) -> Column:
    """:func:`key_group` as a Spark column over a column of encoded keys."""
    return F.pmod(F.crc32(encoded_key.cast("binary")), F.lit(groups)).cast("int")


def check_key_groups(groups: int) -> int:
    """``groups`` if it is a valid number of key groups; ``ValueError`` saying the range if not."""
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= MAX_KEY_GROUPS:
        raise ValueError(f"key groups must be an integer from 1 to {MAX_KEY_GROUPS}, got {groups!r}")
    return groups
