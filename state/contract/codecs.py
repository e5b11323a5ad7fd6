"""Encoding of state keys and values as text, so the ``_state`` table stays readable with SQL."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable, Hashable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptStateError, EncodingError

UNKEYED = ""  # the stored key of an operator's unkeyed state; encoded keys are never empty


def encode_key(key: Hashable) -> str:
    """Encode a key deterministically: JSON of the scalar, tuples as JSON arrays.

    ``0`` and ``"0"`` stay distinct (``0`` vs ``"0"`` with quotes); ``None`` means unkeyed.
    """
    if type(key) is int:  # the common case, ~10x cheaper than json.dumps
        return str(key)
    if type(key) is tuple:
        if len(key) == 2 and type(key[0]) is int and type(key[1]) is int:
            return f"[{key[0]},{key[1]}]"  # (key, window start): a windowed batch encodes many
        if all(type(part) is int for part in key):
            return "[" + ",".join(map(str, key)) + "]"
    if key is None:
        return UNKEYED
    if hasattr(key, "item") and not isinstance(key, (str, bytes, tuple)):
        key = key.item()  # numpy scalar -> Python scalar, so 1 and np.int64(1) encode alike
    if isinstance(key, tuple):
        return json.dumps([_plain(part) for part in key], separators=(",", ":"))
    return json.dumps(_plain(key), separators=(",", ":"))


def encode_keys(keys: list[Hashable]) -> list[str]:
    """:func:`encode_key` of every key; ints (the usual vectorized key) in one pass.

    >>> encode_keys([3, 14]), encode_keys([("a", 1)])
    (['3', '14'], ['["a",1]'])
    """
    if set(map(type, keys)) == {int}:
        return list(map(str, keys))
    return list(map(encode_key, keys))


def encoded_integers(keys: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """The integers ``keys`` (encoded keys) are the text of, when every one is exactly an
    ``int64``'s decimal text, as :func:`encode_key` writes an int; else ``None``. Matching
    keys as int64s rather than text is several times faster (reading a batch's stored state).

    >>> encoded_integers(pa.array(["12", "-3"])).tolist(), encoded_integers(pa.array(["12", '"a"']))
    ([12, -3], None)
    >>> encoded_integers(pa.array(["012"]))  # not how an int is written: no two texts meet
    >>> encoded_integers(pa.array([str(-2**63), "0"])).tolist()
    [-9223372036854775808, 0]
    """
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    try:
        numbers = pc.cast(keys, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if numbers.null_count:
        return None
    values = np.asarray(numbers.to_numpy(), dtype=np.int64)
    # each text exactly as long as its number written out: "012" or "+12" would read as 12
    # and meet the key "12" (an int's text is ASCII: bytes are characters)
    magnitudes = np.abs(values).astype(np.uint64)  # abs(int64 min) wraps; as unsigned it is 2**63
    digits = 1 + np.searchsorted(_POWERS_OF_TEN, magnitudes, side="right")
    if not np.array_equal(np.asarray(pc.binary_length(keys).to_numpy()), digits + (values < 0)):
        return None
    return values


_POWERS_OF_TEN = 10 ** np.arange(1, 20, dtype=np.uint64)  # an int64 has at most 19 digits


def decode_key(text: str) -> Hashable:
    """Inverse of :func:`encode_key`."""
    if text == UNKEYED:
        return None
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value


def _plain(part: Any) -> Any:
    if hasattr(part, "item") and not isinstance(part, (str, bytes)):
        part = part.item()
    if isinstance(part, float) and part.is_integer():
        return part  # keep floats as floats: 1.0 and 1 are different keys, as in pandas groupby
    if part is None or isinstance(part, (str, int, float, bool)):
        return part
    raise TypeError(f"key part {part!r} of type {type(part).__name__} is not a string or number")


class Codec(Protocol):
    """Turns state values into text and back."""

    name: str

    def encode(self, value: Any) -> str: ...

    def encode_many(self, values: list[Any]) -> list[str]:
        """:meth:`encode` of every value (a checkpoint encodes tens of thousands at once)."""
        ...

    def decode(self, text: str) -> Any: ...

    def decode_many(self, texts: pa.Array | pa.ChunkedArray) -> list[Any]:
        """:meth:`decode` of every text (a run's first batch decodes every key it touches)."""
        ...


# What the JSON encoder writes for an int that fits 64 bits, and for a float (with a point or an
# exponent: "1.0", "1e+20"): Arrow parses these as Python does, in one pass over the column.
JSON_INT_PATTERN = r"^-?[0-9]{1,18}$"
JSON_FLOAT_PATTERN = r"^-?[0-9]+(\.[0-9]+([eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)$"


class JsonCodec:
    """The default: values readable with SQL (``get_json_object(value, '$.x')``).

    >>> JsonCodec().encode({"acc": {"n": 2, "total": 1.5}, "visible": True})
    '{"acc":{"n":2,"total":1.5},"visible":true}'
    """

    name = "json"

    def encode(self, value: Any) -> str:
        if type(value) is int:  # hot path: counters and sums; same text json.dumps gives
            return str(value)
        return _compact_json(value)

    def encode_many(self, values: list[Any]) -> list[str]:
        if set(map(type, values)) == {int}:  # a vectorized sum or count: the digits, in one pass
            return list(map(str, values))
        return list(map(self.encode, values))

    def decode(self, text: str) -> Any:
        return json.loads(text)

    def decode_many(self, texts: pa.Array | pa.ChunkedArray) -> list[Any]:
        """Numbers (counts, sums: the usual state) parsed as a column; anything else per text.

        >>> JsonCodec().decode_many(pa.array(["3", "-14"])), JsonCodec().decode_many(pa.array(["1.5", "2"]))
        ([3, -14], [1.5, 2])
        """
        if texts.null_count == 0 and len(texts):
            for pattern, kind in ((JSON_INT_PATTERN, pa.int64()), (JSON_FLOAT_PATTERN, pa.float64())):
                if pc.all(pc.match_substring_regex(texts, pattern)).as_py():
                    return pc.cast(texts, kind).to_numpy(zero_copy_only=False).tolist()
        return list(map(json.loads, texts.to_pylist()))


class PickleCodec:
    """Opt-in codec for arbitrary Python objects (stored as base64 pickle: not readable with SQL)."""

    name = "pickle"

    def encode(self, value: Any) -> str:
        return base64.b64encode(pickle.dumps(value, protocol=5)).decode("ascii")

    def encode_many(self, values: list[Any]) -> list[str]:
        return list(map(self.encode, values))

    def decode(self, text: str) -> Any:
        return pickle.loads(base64.b64decode(text))

    def decode_many(self, texts: pa.Array | pa.ChunkedArray) -> list[Any]:
        return list(map(self.decode, texts.to_pylist()))


def _json_default(value: Any) -> Any:
    if getattr(value, "ndim", 0) and hasattr(value, "tolist"):  # numpy arrays (they have item too)
        return value.tolist()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _compact_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), default=_json_default, allow_nan=True)``
    without its cost per call: given options, ``json.dumps`` builds a new encoder for every
    value, two thirds of the time of encoding a window's small state dict (tens of thousands
    per batch). The C encoder the standard library builds inside ``iterencode`` is built here
    once instead, with the same arguments (no check for cycles: a cyclic value fails with a
    ``RecursionError``, which :func:`encode_value` reports as for any value it cannot
    store)."""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(separators=(",", ":"), default=_json_default, allow_nan=True,
                                check_circular=False).encode
    encoder = c_make_encoder(None, _json_default, encode_basestring_ascii, None, ":", ",",
                             False, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return encode_basestring_ascii(value)
        return "".join(encoder(value, 0))

    return encode


_compact_json = _compact_encoder()

CODECS: dict[str, Codec] = {"json": JsonCodec(), "pickle": PickleCodec()}


def codec_named(name: str) -> Codec:
    """The codec called ``name`` (``json`` or ``pickle``)."""
    try:
        return CODECS[name]
    except KeyError:
        raise EncodingError(f"unknown state codec {name!r}; use one of {sorted(CODECS)}") from None


def encode_value(codec: Codec, value: Any, *, operator: str, key: Hashable) -> str:
    """Encode ``value`` or raise an :class:`EncodingError` naming the operator and key."""
    try:
        return codec.encode(value)
    except Exception as exc:
        raise EncodingError(
            f"state of operator {operator!r} for key {key!r} cannot be encoded with the "
            f"{codec.name} codec ({exc}); return JSON-compatible values or use codec='pickle'"
        ) from exc


def decode_values(codec: Codec, texts: pa.Array | pa.ChunkedArray, keys: list[Hashable], *,
                  operator: str) -> list[Any]:
    """:meth:`Codec.decode_many` of stored ``texts``, or a :class:`CorruptStateError` naming
    the operator and the key (of ``keys``, at the same positions) of the first text that
    cannot be decoded."""
    try:
        return codec.decode_many(texts)
    except Exception:
        for key, text in zip(keys, texts.to_pylist()):
            decode_value(codec, text, operator=operator, key=key)
        raise


def decode_value(codec: Codec, text: str, *, operator: str, key: Hashable) -> Any:
    """Decode a stored value or raise a :class:`CorruptStateError` naming the operator and key."""
    try:
        return codec.decode(text)
    except Exception as exc:
        raise CorruptStateError(
            f"state of operator {operator!r} for key {key!r} cannot be decoded with the "
            f"{codec.name} codec ({type(exc).__name__}: {exc}); the stored text starts "
            f"{text[:60]!r}. Was the operator's codec changed? Nothing of this batch was "
            "committed: restore the codec, or reset the pipeline to an older checkpoint."
        ) from exc

