"""Tracked variables: small Python values saved with every checkpoint, restored before a restart."""

from __future__ import annotations

import copy
from typing import Any

from ..contract.codecs import PickleCodec, encode_value
from ..layout import check_name

_CODEC = PickleCodec()  # tuples, int dict keys and objects must come back exactly as they were


class Tracked:
    """A named value that survives restarts. Read and write ``.value``; mutate it in place freely.

    Register it with ``pipeline.track(seen)``; what operators leave in ``.value`` is saved at
    every checkpoint and restored before a restarted pipeline runs anything.

    >>> seen = track("seen", {"rows": 0})   # module level
    >>> seen.value["rows"] += 3             # inside an operator
    >>> seen.value
    {'rows': 3}
    """

    def __init__(self, name: str, initial: Any = None):
        self.name = check_name("tracked variable", name)
        self._initial = initial
        self.value = copy.deepcopy(initial)

    def reset(self) -> None:
        """Back to the initial value (a fresh pipeline)."""
        self.value = copy.deepcopy(self._initial)

    def encode(self) -> str:
        return encode_value(_CODEC, self.value, operator=f"tracked:{self.name}", key=None)

    def restore(self, text: str) -> None:
        self.value = _CODEC.decode(text)

    def __repr__(self) -> str:
        return f"Tracked({self.name!r}, {self.value!r})"


def track(name: str, initial: Any = None) -> Tracked:
    """Create a tracked variable ``name`` starting at ``initial``."""
    return Tracked(name, initial)


def save_all(variables: tuple[Tracked, ...]) -> dict[str, str]:
    """Encoded values of ``variables`` for a checkpoint record."""
    return {variable.name: variable.encode() for variable in variables}


def restore_all(variables: tuple[Tracked, ...], saved: dict[str, str]) -> None:
    """Restore each variable from ``saved``; variables absent from it start from their initial."""
    for variable in variables:
        if variable.name in saved:
            variable.restore(saved[variable.name])
        else:
            variable.reset()
