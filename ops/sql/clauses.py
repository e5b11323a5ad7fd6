"""ksqlDB's clauses that sqlglot does not know, ``WINDOW …`` and ``EMIT …``: blanked out of a
statement by token position (so what remains keeps every position of the user's text, for
errors that point at it), and the WINDOW clause read into a window definition.

A window without ``GRACE PERIOD`` gets ksqlDB's default grace, :data:`DEFAULT_GRACE` (24 hours,
Kafka Streams' old default that ksqlDB keeps): with ``EMIT FINAL`` a window is emitted a day
after it ends unless a grace period is given.
"""

from __future__ import annotations

from sqlglot.tokens import Tokenizer

from ..errors import PipelineDefinitionError, SqlError
from ..operators import Session, Window, hopping, session, tumbling

#: ksqlDB's grace period for a window whose clause gives none.
DEFAULT_GRACE = "24h"
_UNITS = {"MILLISECOND": "ms", "SECOND": "s", "MINUTE": "min", "HOUR": "h", "DAY": "D"}


def split_clauses(statement: str) -> tuple[str, list | None, str | None]:
    """Blank ksqlDB's ``WINDOW …`` and ``EMIT …`` clauses (unknown to sqlglot) out of the
    statement by token position: the rest (every other character where it was), the WINDOW
    clause's tokens, and the emission (``CHANGES``, ``FINAL``, ``None`` without EMIT)."""
    tokens = Tokenizer().tokenize(statement)
    end, window, emit, cut = len(statement), None, None, None
    for index, token in enumerate(tokens):
        word = token.text.upper()
        if word == "EMIT":
            rest = [t.text.upper() for t in tokens[index + 1:] if t.text != ";"]
            if rest not in (["CHANGES"], ["FINAL"]):
                raise SqlError(f"unsupported emission {statement[token.start:].strip()!r}: "
                               "use EMIT CHANGES or EMIT FINAL")
            emit, end = rest[0], token.start
            break
        if word == "WINDOW" and window is None:
            close = next((i for i in range(index, len(tokens)) if tokens[i].text == ")"), None)
            if close is None:
                raise SqlError(f"unterminated WINDOW clause: {statement[token.start:][:60]!r}")
            window, cut = tokens[index + 1:close + 1], (token.start, tokens[close].end + 1)
    body = statement[:end] + " " * (len(statement) - end)
    if cut is not None:
        body = body[:cut[0]] + " " * (cut[1] - cut[0]) + body[cut[1]:]
    semicolon = body.rstrip().endswith(";")
    return (body.rstrip()[:-1] if semicolon else body.rstrip()), window, emit


def window_of(tokens: list, time: str) -> Window | Session:
    """``TUMBLING (SIZE n unit[, GRACE PERIOD n unit])``, ``HOPPING (SIZE …, ADVANCE BY …
    [, GRACE PERIOD …])`` or ``SESSION (n unit[, GRACE PERIOD …])`` on column ``time``."""
    kind = tokens[0].text.upper()
    if kind not in ("TUMBLING", "HOPPING", "SESSION") or len(tokens) < 3 or tokens[1].text != "(":
        raise SqlError(f"WINDOW must be TUMBLING (…), HOPPING (…) or SESSION (…), not {kind!r}")
    words = [t.text.upper() for t in tokens[2:-1] if t.text != ","]
    if kind == "SESSION":
        words.insert(0, "SIZE")  # SESSION (5 MINUTES …): the gap comes first, unnamed
    spans: dict[str, str] = {}
    position = 0
    while position < len(words):
        name = {"SIZE": "size", "ADVANCE": "advance", "GRACE": "grace"}.get(words[position])
        skip = 2 if words[position] in ("ADVANCE", "GRACE") else 1  # ADVANCE BY, GRACE PERIOD
        if name is None or position + skip + 1 >= len(words):
            raise SqlError(f"cannot read WINDOW {kind} (…) near {' '.join(words[position:])!r}")
        number, unit = words[position + skip], words[position + skip + 1].rstrip("S")
        if not number.isdigit() or unit not in _UNITS:
            raise SqlError(f"WINDOW {kind}: {number} {unit} is not a duration "
                           f"(units: {sorted(_UNITS)})")
        spans[name] = f"{number}{_UNITS[unit]}"
        position += skip + 2
    grace = spans.get("grace", DEFAULT_GRACE)
    try:
        if kind == "TUMBLING" and set(spans) <= {"size", "grace"} and "size" in spans:
            return tumbling(time, spans["size"], grace=grace)
        if kind == "HOPPING" and {"size", "advance"} <= set(spans):
            return hopping(time, spans["size"], spans["advance"], grace=grace)
        if kind == "SESSION" and set(spans) <= {"size", "grace"} and "size" in spans:
            return session(time, spans["size"], grace=grace)
    except PipelineDefinitionError as exc:  # sizes the window itself refuses (zero, advance > size)
        raise SqlError(f"WINDOW {kind} ({' '.join(t.text for t in tokens[2:-1])}): {exc}") from None
    raise SqlError(f"WINDOW {kind} needs SIZE (and ADVANCE BY for HOPPING), got {sorted(spans)}")
