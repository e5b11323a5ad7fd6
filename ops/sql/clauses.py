"""ksqlDB's clauses that sqlglot does not know, ``WINDOW …``, a join's ``WITHIN …`` and
``EMIT …``: blanked out of a statement by token position (so what remains keeps every position
of the user's text, for errors that point at it), and the WINDOW and WITHIN clauses read.

A window without ``GRACE PERIOD`` gets ksqlDB's default grace, :data:`DEFAULT_GRACE` (24 hours,
Kafka Streams' old default that ksqlDB keeps): with ``EMIT FINAL`` a window is emitted a day
after it ends unless a grace period is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokens import Token, Tokenizer, TokenType

from ..errors import PipelineDefinitionError, SqlError
from ..operators import Session, Window, hopping, session, tumbling

#: ksqlDB's grace period for a window whose clause gives none.
DEFAULT_GRACE = "24h"
_UNITS = {"MILLISECOND": "ms", "SECOND": "s", "MINUTE": "min", "HOUR": "h", "DAY": "D"}


@dataclass(frozen=True)
class Clauses:
    """What :func:`split_clauses` set aside: the WINDOW and WITHIN clauses' tokens and the
    emission (``CHANGES``, ``FINAL``, ``None`` without EMIT)."""

    window: list | None = None
    within: list | None = None
    emit: str | None = None


def split_clauses(statement: str) -> tuple[str, Clauses]:
    """Blank ksqlDB's ``WINDOW …``, ``WITHIN …`` and ``EMIT …`` clauses (unknown to sqlglot)
    out of the statement by token position: the rest (every other character where it was), and
    the clauses."""
    tokens = Tokenizer().tokenize(statement)
    end, window, emit, cut = len(statement), None, None, None
    within, cuts = None, []
    for index, token in enumerate(tokens):
        word = _word(token)
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
            cuts.append(cut)
        if word == "WITHIN" and within is None:
            on = next((i for i in range(index, len(tokens)) if _word(tokens[i]) == "ON"), None)
            if on is None or on == index + 1:
                raise SqlError(f"WITHIN needs a time bound and then ON: {statement[token.start:][:60]!r}")
            within = tokens[index + 1:on]
            cuts.append((token.start, tokens[on - 1].end + 1))
    body = statement[:end] + " " * (len(statement) - end)
    for start, stop in cuts:
        body = body[:start] + " " * (stop - start) + body[stop:]
    semicolon = body.rstrip().endswith(";")
    return (body.rstrip()[:-1] if semicolon else body.rstrip()), Clauses(window, within, emit)


def _word(token: Token) -> str:
    """A token's text as a keyword (upper case); nothing for a string literal or a quoted
    identifier, which never start a clause (``'within'`` is a value, ``"window"`` a column)."""
    return "" if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER) else token.text.upper()


@dataclass(frozen=True)
class Within:
    """A stream–stream join's time bound: a right record may be ``before`` earlier or
    ``after`` later than a left one; records later than ``grace`` are dropped."""

    before: str
    after: str
    grace: str


def within_of(tokens: list) -> Within:
    """``WITHIN n unit``, ``WITHIN (n unit, n unit)`` (before, after), either followed by
    ``GRACE PERIOD n unit`` (else ksqlDB's default grace, :data:`DEFAULT_GRACE`)."""
    words = [t.text.upper() for t in tokens if t.text not in ("(", ")", ",")]
    text = " ".join(t.text for t in tokens)
    grace = DEFAULT_GRACE
    if len(words) >= 4 and words[-4:-2] == ["GRACE", "PERIOD"]:
        grace, words = _duration(words[-2:], "WITHIN … GRACE PERIOD"), words[:-4]
    spans = [_duration(words[i:i + 2], "WITHIN") for i in range(0, len(words), 2)]
    bracketed = bool(tokens) and tokens[0].text == "("
    if len(words) % 2 or len(spans) != (2 if bracketed else 1):
        raise SqlError(f"cannot read WITHIN {text}: use WITHIN n UNIT or WITHIN (n UNIT, n UNIT), "
                       "then GRACE PERIOD n UNIT if you want one")
    return Within(spans[0], spans[-1], grace)


def _duration(words: list[str], clause: str) -> str:
    number, unit = words[0], words[1].rstrip("S") if len(words) > 1 else ""
    if not number.isdigit() or unit not in _UNITS:
        raise SqlError(f"{clause}: {' '.join(words)} is not a duration (units: {sorted(_UNITS)})")
    return f"{number}{_UNITS[unit]}"


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
        spans[name] = _duration(words[position + skip:position + skip + 2], f"WINDOW {kind}")
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
