"""The state graph TLC dumps (`-dump dot,actionlabels`), read as a stream of states
and labelled edges."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from .errors import TLCError

_DOT_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(?:,style = filled)?\]\s*;?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')
_DOT_ESC = re.compile(r"\\(.)")


def _unescape(m: re.Match[str]) -> str:
    return "\n" if m.group(1) == "n" else m.group(1)


def _undot(s: str) -> str:
    """A dot label's text: `\\n` a newline, `\\c` the character c. (Split at the
    escaped backslashes first, then replace the two escapes TLC writes besides them
    with str.replace: half the time of one regular-expression pass.)"""
    if "\\" not in s:
        return s
    parts = s.split("\\\\")
    for i, part in enumerate(parts):
        if "\\" in part:
            part = part.replace("\\n", "\n").replace('\\"', '"')
            parts[i] = _DOT_ESC.sub(_unescape, part) if "\\" in part else part
    return "\\".join(parts)


def read_dot(path: Path) -> Iterator[tuple[str, Any]]:
    """Stream the state graph of `-dump dot,actionlabels`: ("state", (id, text)) and
    ("edge", (src, dst, action)) items, in file order."""
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.startswith(("strict digraph", "nodesep", "subgraph", "color=", "{rank", "}")):
                continue
            e = _DOT_EDGE.match(line)
            if e is not None:
                yield "edge", (e.group(1), e.group(2), e.group(3))
                continue
            n = _DOT_NODE.match(line)
            if n is not None:
                yield "state", (n.group(1), _undot(n.group(2)))
                continue
            if line.strip():
                raise TLCError(f"{path}:{lineno}: not a line of TLC's dot dump: {line[:80]!r}")
