"""The frame condition of each action of the spec: the variables that a conjunct of
its definition leaves unchanged (`/\\ UNCHANGED <<...>>`), read from the spec's text.

An action defined as a list of conjuncts

    A(x) ==
        /\\ guard
        /\\ v' = ...
        /\\ UNCHANGED <<w, hostVars>>

takes only steps in which every variable of that UNCHANGED conjunct keeps its
value: the spec itself says so, whatever else the action does. `kvsm validate`
uses this to compare, after a step of A, only the variables A may change (comparing
a default-config variable such as the 4,096 host pages' contents costs TLC more than
most actions do) while still rejecting a step in which the model changed one that
A leaves unchanged.

The spec names its variables in groups (`treeVars == <<nodes, next_id, clock>>`,
`l3Vars == <<spillVars, reloadVars, diskVars>>`, `vars`): a definition whose body is
a tuple of variables and groups is a group (`groups`), and a name inside UNCHANGED
is a variable or a group, expanded to its variables.

The reading is conservative, so that the sets it gives are never too large: only
conjuncts of the definition's top-level conjunction list count (a conjunct at the
column of the list's first `/\\`), and a conjunct that applies an operator whose own
definition is such a list counts with that operator's frame (CommitFirst in Commit,
MatchTo(Matched(State, rid)) in Match). An operator whose whole body is a disjunction
of operator applications (`LoadBackWith`: the load-back, or where the reference stops)
leaves unchanged what every disjunct leaves unchanged. Any other UNCHANGED inside an IF,
a CASE, a LET, a disjunction or a quantifier says nothing about every step of the action
and is not read.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_DEF = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*==(.*)$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _strip_comments(text: str) -> str:
    text = re.sub(r"\(\*.*?\*\)", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return "\n".join(line.split("\\*", 1)[0].rstrip() for line in text.splitlines())


def definitions(texts: list[str]) -> dict[str, str]:
    """Top-level `Name == body` and `Name(params) == body` definitions of modules,
    each body the text up to the next line that starts in column 0 (comments
    blanked, columns kept)."""
    out: dict[str, str] = {}
    for text in texts:
        lines = _strip_comments(text).splitlines()
        i = 0
        while i < len(lines):
            m = _DEF.match(lines[i])
            if not m:
                i += 1
                continue
            body = [" " * (m.start(3)) + m.group(3)]
            i += 1
            while i < len(lines) and (not lines[i] or lines[i][0] in " \t"):
                body.append(lines[i])
                i += 1
            out[m.group(1)] = "\n".join(body)
    return out


def conjuncts(body: str) -> list[str] | None:
    """The top-level conjuncts of a definition written as a conjunction list, or
    None when it is not one."""
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if not lines:
        return None
    first = lines[0]
    col = len(first) - len(first.lstrip())
    if not first.lstrip().startswith("/\\"):
        return None
    out: list[list[str]] = []
    for ln in lines:
        indent = len(ln) - len(ln.lstrip())
        if indent < col:
            return None
        if indent == col:
            if not ln.lstrip().startswith("/\\"):
                return None  # another operator at the list's column: not a plain list
            out.append([ln.lstrip()[2:]])
        else:
            out[-1].append(ln)
    return [" ".join(x.strip() for x in c) for c in out]


def _tuple_names(expr: str) -> list[str] | None:
    expr = expr.strip()
    if expr.startswith("<<") and expr.endswith(">>"):
        inner = expr[2:-2]
        names = [x.strip() for x in inner.split(",")]
        return names if all(_NAME.fullmatch(n) for n in names) else None
    return [expr] if _NAME.fullmatch(expr) else None


def _expand(name: str, defs: dict[str, str], variables: frozenset[str], seen: frozenset[str] = frozenset()) -> set[str]:
    if name in variables:
        return {name}
    if name in defs and name not in seen:
        names = _tuple_names(defs[name])
        if names is not None:
            return set().union(*(_expand(n, defs, variables, seen | {name}) for n in names))
    raise ValueError(f"UNCHANGED names {name!r}, which is neither a variable nor a group of variables")


def groups(defs: dict[str, str], variables: frozenset[str]) -> dict[str, frozenset[str]]:
    """The named groups of variables: each definition whose body is a tuple of variables
    and groups (`treeVars == <<nodes, next_id, clock>>`, `vars == <<treeVars, ...>>`),
    with the variables it stands for."""
    out = {}
    for name, body in defs.items():
        names = _tuple_names(body)
        if names is None or name in variables or not all(n in variables or n in defs for n in names):
            continue
        try:
            out[name] = frozenset(_expand(name, defs, variables))
        except ValueError:
            continue  # a tuple of other things (constants, operators): not a group
    return out


def unchanged(name: str, defs: dict[str, str], variables: frozenset[str], seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """The variables that the definition of `name` leaves unchanged by a top-level
    conjunct (its own, or that of an operator a top-level conjunct applies)."""
    if name not in defs or name in seen:
        return frozenset()
    parts = conjuncts(defs[name])
    if parts is None:
        ops = _disjuncts(defs[name])
        if ops is None or not all(op in defs for op in ops):
            return frozenset()
        return frozenset.intersection(*(unchanged(op, defs, variables, seen | {name}) for op in ops))
    out: set[str] = set()
    for part in parts:
        part = part.strip()
        if part.startswith("UNCHANGED"):
            names = _tuple_names(part[len("UNCHANGED"):])
            if names is None:
                continue  # not a plain tuple of names: nothing is read from it
            for n in names:
                out |= _expand(n, defs, variables)
            continue
        op = _applied(part)
        if op is not None and op in defs:
            out |= unchanged(op, defs, variables, seen | {name})
    return frozenset(out)


def _disjuncts(body: str) -> list[str] | None:
    """The operators a body applies when it is a disjunction of whole applications,
    `A(args) \\/ B(args)` (at no depth of parentheses), else None."""
    parts, depth, start = [], 0, 0
    text = " ".join(body.split())
    i = 0
    while i < len(text):
        ch = text[i]
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith("\\/", i):
            parts.append(text[start:i])
            start = i + 2
            i += 2
            continue
        i += 1
    parts.append(text[start:])
    parts = [p.strip() for p in parts if p.strip()]
    if len(parts) < 2:
        return None
    ops = [_applied(p) for p in parts]
    return None if any(op is None for op in ops) else ops  # type: ignore[return-value]


def _applied(part: str) -> str | None:
    """The operator a conjunct applies when the whole conjunct is that one
    application, `Op` or `Op(args)`; else None."""
    m = _NAME.match(part)
    if m is None:
        return None
    rest = part[m.end():].strip()
    if not rest:
        return m.group(0)
    if not rest.startswith("("):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return m.group(0) if i == len(rest) - 1 else None
    return None


def _spec_defs(spec: Path) -> dict[str, str]:
    return definitions([(spec / f).read_text() for f in ("KVCache.tla", "KVTree.tla")])


def spec_groups(spec: Path, variables: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """The named groups of variables of the spec in `spec` (the directory of KVCache.tla
    and the modules it extends)."""
    return groups(_spec_defs(spec), frozenset(variables))


@lru_cache(maxsize=4)
def frames(spec: Path, actions: tuple[str, ...], variables: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """For each action of the spec in `spec` (the directory of KVCache.tla and the
    modules it extends), the variables it leaves unchanged."""
    defs = _spec_defs(spec)
    vs = frozenset(variables)
    out = {}
    for a in actions:
        if a not in defs:
            raise ValueError(f"{spec}/KVCache.tla has no action {a}")
        out[a] = unchanged(a, defs, vs)
    return out
