"""TLA+ values as TLC prints them, parsed into Python values and printed back.

The forms: records, functions `(a :> b @@ ...)`, sequences `<<...>>`, sets and
intervals, strings, integers, booleans, and model values (bare identifiers). A state
is read as its `/\\ var = value` conjuncts.
"""

from __future__ import annotations

import re
from typing import Any


class TLAValueError(ValueError):
    """Text that is not a TLA+ value as TLC prints it; the message says where."""


class Record(dict):
    """A TLA+ record (field name -> value); hashable so that it can sit in a set."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class Fcn(dict):
    """A TLA+ function written `(a :> b @@ ...)`; hashable so that it can sit in a set."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class Expr(str):
    """TLA+ text that `to_tla` writes as it is (an expression standing for a value)."""


def as_fcn(v: Any) -> dict:
    """A function value as a dict. TLC prints a function whose domain is 1..n as a
    sequence (and the empty function as `<<>>`), so a sequence is accepted too."""
    if isinstance(v, dict):
        return v
    if isinstance(v, tuple):
        return {i + 1: x for i, x in enumerate(v)}
    raise TLAValueError(f"expected a function, got {to_tla(v)}")


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?\d+)
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<op><<|>>|\|->|:>|@@|\.\.|/\\|[\[\](){},=])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_STR_ESC = re.compile(r"\\(.)")


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos, n = 0, len(text)
    match = _TOKEN.match
    while True:
        m = match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                raise TLAValueError(f"unexpected text at offset {pos}: {text[pos:pos + 30]!r}")
            return out
        pos = m.end()
        kind = m.lastgroup
        if kind == "num":
            out.append(("v", int(m.group("num"))))
        elif kind == "str":
            out.append(("v", _STR_ESC.sub(lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), m.group("str")[1:-1])))
        elif kind == "name":
            w = m.group("name")
            out.append(("v", True) if w == "TRUE" else ("v", False) if w == "FALSE" else ("name", w))
        else:
            out.append((m.group("op"), None))
        if pos >= n:
            return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, what: str) -> TLAValueError:
        near = " ".join(str(t[1] if t[0] in ("v", "name") else t[0]) for t in self.toks[self.i : self.i + 6])
        return TLAValueError(f"{what} at token {self.i} (near {near!r}) in {self.text[:60]!r}...")

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def take(self, kind: str) -> Any:
        if self.peek() != kind:
            raise self.fail(f"expected {kind!r}")
        tok = self.toks[self.i]
        self.i += 1
        return tok[1]

    def value(self) -> Any:
        v = self.primary()
        if self.peek() == "..":
            self.i += 1
            hi = self.primary()
            if not (isinstance(v, int) and isinstance(hi, int)):
                raise self.fail("an interval needs integer bounds")
            return frozenset(range(v, hi + 1))
        return v

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        if self.peek() == close:
            self.i += 1
            return out
        while True:
            out.append(self.value())
            if self.peek() == ",":
                self.i += 1
                continue
            self.take(close)
            return out

    def primary(self) -> Any:
        k = self.peek()
        if k == "v":
            return self.take("v")
        if k == "name":  # a model value
            return self.take("name")
        if k == "<<":
            self.i += 1
            return tuple(self.items(">>"))
        if k == "{":
            self.i += 1
            return frozenset(self.items("}"))
        if k == "[":
            self.i += 1
            rec = Record()
            while True:
                name = self.take("name")
                self.take("|->")
                rec[name] = self.value()
                if self.peek() == ",":
                    self.i += 1
                    continue
                self.take("]")
                return rec
        if k == "(":
            self.i += 1
            first = self.value()
            if self.peek() != ":>":  # a parenthesised value
                self.take(")")
                return first
            f = Fcn()
            self.i += 1
            f[first] = self.value()
            while self.peek() == "@@":
                self.i += 1
                key = self.value()
                self.take(":>")
                f[key] = self.value()
            self.take(")")
            return f
        raise self.fail("expected a value")


def parse_value(text: str) -> Any:
    """One TLA+ value as TLC prints it: int, bool, str, tuple (sequence), frozenset
    (set or interval), `Record`, `Fcn`; a bare identifier (a model value) is a str."""
    p = _Parser(text)
    v = p.value()
    if p.i != len(p.toks):
        raise p.fail("trailing text after a value")
    return v


def parse_state(text: str) -> dict[str, Any]:
    """A state as TLC prints it: `/\\ var = value` conjuncts (a single variable may be
    printed without the leading `/\\`)."""
    return {name: parse_value(v) for name, v in state_parts(text)}


_CONJUNCT = re.compile(r"(?:^|\n)\s*(?:/\\\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")


def state_parts(text: str) -> list[tuple[str, str]]:
    """The `(variable, value text)` pairs of a printed state, values unparsed. TLC
    prints each variable on a line of its own, `/\\ name = value`, a value's further
    lines indented: split at those line starts (half the time of scanning the
    whole text with the conjunct pattern, which is what a state printed otherwise
    gets)."""
    if text.startswith("/\\ "):
        out = []
        for chunk in text[3:].split("\n/\\ "):
            name, eq, value = chunk.partition(" = ")
            if not eq or not name.isidentifier():
                break
            out.append((name, value.strip()))
        else:
            return out
    starts = list(_CONJUNCT.finditer(text))
    if not starts:
        raise TLAValueError(f"not a state: {text[:60]!r}")
    out = []
    for m, nxt in zip(starts, starts[1:] + [None]):
        out.append((m.group(1), text[m.end() : nxt.start() if nxt is not None else len(text)].strip()))
    return out


def to_tla(v: Any) -> str:
    """TLA+ text of a value (the inverse of `parse_value`). Plain dicts are ambiguous
    (record or function) and rejected: wrap them in `Record` or `Fcn`."""
    if isinstance(v, Expr):
        return str(v)
    if v is True:
        return "TRUE"
    if v is False:
        return "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (tuple, list)):
        return "<<" + ", ".join(to_tla(x) for x in v) + ">>"
    if isinstance(v, (set, frozenset)):
        if len(v) > 8 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return _int_set(sorted(v))
        return "{" + ", ".join(to_tla(x) for x in sorted(v, key=_order)) + "}"
    if isinstance(v, Record):
        if not v:
            raise TLAValueError("a TLA+ record needs at least one field")
        return "[" + ", ".join(f"{k} |-> {to_tla(x)}" for k, x in v.items()) + "]"
    if isinstance(v, Fcn):
        if not v:
            return "<<>>"  # the empty function
        return "(" + " @@ ".join(f"{to_tla(k)} :> {to_tla(x)}" for k, x in sorted(v.items(), key=lambda kv: _order(kv[0]))) + ")"
    raise TLAValueError(f"no TLA+ form for {type(v).__name__} {v!r}")


def _int_set(xs: list[int]) -> str:
    """A set of integers as a union of intervals and a set of the rest."""
    runs, singles = [], []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append(f"({xs[i]}..{xs[j]})")
        else:
            singles.extend(xs[i : j + 1])
        i = j + 1
    parts = runs + (["{" + ", ".join(map(str, singles)) + "}"] if singles else [])
    return parts[0] if len(parts) == 1 else "(" + " \\cup ".join(parts) + ")"


def _order(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, int) and not isinstance(v, bool) else (1, 0, repr(v))
