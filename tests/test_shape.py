"""The house's size limits, kept: no module over 500 lines, no class over 300, no function over
60, in the five packages. A room already over its limit is listed in ``OVERSIZE`` with its size
as a ceiling: it may shrink (then lower or drop its line), never grow, and no new room may
cross a limit. ``python3 tests/test_shape.py`` prints every room over its limit."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("state", "ops", "analytics", "assets", "dagster_project")
LIMITS = {"module": 500, "class": 300, "function": 60}

#: Rooms over a limit, each with its size as a ceiling, until they are split. No room is over
#: a limit today.
OVERSIZE: dict[str, int] = {}


def rooms() -> dict[str, tuple[str, int]]:
    """Every module, class and function of the packages: name -> (kind, lines)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            text = path.read_text()
            found[name] = ("module", text.count("\n"))
            for node in ast.walk(ast.parse(text)):
                kind = ("class" if isinstance(node, ast.ClassDef) else "function"
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
                if kind is not None:
                    found[f"{name}:{node.name}"] = (kind, node.end_lineno - node.lineno + 1)
    return found


def over_limits() -> dict[str, int]:
    return {name: size for name, (kind, size) in rooms().items() if size > LIMITS[kind]}


def test_no_room_crosses_its_limit_or_grows_past_its_ceiling():
    over = over_limits()
    new = {name: size for name, size in over.items() if name not in OVERSIZE}
    grown = {name: (size, OVERSIZE[name]) for name, size in over.items()
             if name in OVERSIZE and size > OVERSIZE[name]}
    assert not new, f"over the limits {LIMITS}: {new}; split them"
    assert not grown, f"grown past their ceiling (size, ceiling): {grown}"


def test_the_ceilings_name_rooms_still_over_their_limits():
    """A room split below its limit leaves the list, so that the list says what is left."""
    assert sorted(set(OVERSIZE) - set(over_limits())) == []


if __name__ == "__main__":
    for name, size in sorted(over_limits().items()):
        print(f"{name}: {size}")
