"""A Griffe extension of the docs site (``extensions:`` in mkdocs.yml): the project's docstrings
are written in reStructuredText's habits, and this turns those habits into the Markdown that
mkdocstrings renders, before a docstring is parsed.

- a doctest (``>>>`` lines, with their ``...`` continuations and expected output, up to a blank
  line) becomes a fenced ``pycon`` code block; as written it would render as nested quotes;
- a role citing an object, ``:func:`name``` or ``:class:`~module.Name```, becomes the code
  ``name`` (Markdown would show the role's text before the code);
- a paragraph ending in ``::`` before an indented literal block ends in ``:``.

The docstrings themselves stay as they are: ``tests/test_examples.py`` runs their doctests.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj):`~?([^`]+)`")
LITERAL = re.compile(r"::\n\n(?=[ \t]+\S)")


def fence_doctests(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += [f"{indent}```pycon", *block, f"{indent}```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def markdown_docstring(text: str) -> str:
    text = LITERAL.sub(":\n\n", text)
    text = ROLE.sub(lambda match: f"`{match.group(1)}`", text)
    return fence_doctests(text)


class MarkdownDocstrings(griffe.Extension):
    """Rewrites each docstring as it is loaded (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
