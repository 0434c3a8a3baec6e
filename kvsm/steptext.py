"""The one-line step syntax: a transition as `Insert rid=0`, `WriteDone r=1`,
`SpillDone r=0 ok=true`. The corpus reads and writes its cases' steps in it
(kvsm.corpus.format) and the stories print their steps in it (kvsm.render.story)."""

from __future__ import annotations

import re
from typing import Any

from .transitions import REGISTRY, Transition


class StepError(ValueError):
    """A step line that cannot be read; the message says which argument is wrong and why."""


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def step_text(t: Transition) -> str:
    """A transition in the step syntax: its name, `r=RANK` for a per-rank step, then its
    arguments in the order the log format lists them."""
    spec = REGISTRY.get(t.name)
    parts = [t.name]
    if t.rank is not None:
        parts.append(f"r={t.rank}")
    args = dict(t.args)
    order = list(spec.args) if spec is not None else []
    for k in order + sorted(k for k in args if k not in order):
        if k in args:
            parts.append(f"{k}={_value(args[k])}")
    return " ".join(parts)


_ARG = re.compile(r"(\w+)=(\[[^\]]*\]|\S+)")
_INT = re.compile(r"-?\d+")


def parse_step(text: str) -> Transition:
    """A step line -> Transition (StepError: which argument is wrong and why)."""
    head, _, rest = text.strip().partition(" ")
    spec = REGISTRY.get(head)
    if spec is None:
        raise StepError(f"unknown transition or directive '{head}'")
    args: dict[str, Any] = {}
    rank = None
    pos = 0
    rest = rest.strip()
    while pos < len(rest):
        m = _ARG.match(rest, pos)
        if m is None:
            raise StepError(f"{head}: cannot read '{rest[pos:]}' (arguments are name=value)")
        k, v = m.group(1), m.group(2)
        pos = m.end()
        while pos < len(rest) and rest[pos] == " ":
            pos += 1
        if k == "r":
            if not spec.per_rank:
                raise StepError(f"{head} is not a per-rank transition but has r={v}")
            if not _INT.fullmatch(v):
                raise StepError(f"{head}: the rank r must be an integer, got '{v}'")
            rank = int(v)
            continue
        typ = spec.args.get(k)
        if typ is None:
            raise StepError(f"{head} has no argument '{k}' (it takes {', '.join(spec.args) or 'none'})")
        if k in args:
            raise StepError(f"{head}: argument '{k}' is given twice")
        if typ == "int":
            if not _INT.fullmatch(v):
                raise StepError(f"{head} argument '{k}' must be an integer, got '{v}'")
            args[k] = int(v)
        elif typ == "bool":
            if v not in ("true", "false"):
                raise StepError(f"{head} argument '{k}' must be true or false, got '{v}'")
            args[k] = v == "true"
        else:
            inner = v[1:-1].strip() if v.startswith("[") and v.endswith("]") else None
            items = [x.strip() for x in inner.split(",")] if inner else []
            if inner is None or not all(_INT.fullmatch(x) for x in items):
                raise StepError(f"{head} argument '{k}' must be a list of integers like [1,2], got '{v}'")
            args[k] = [int(x) for x in items]
    if spec.per_rank and rank is None:
        raise StepError(f"{head} needs its rank (r=N)")
    missing = [k for k in spec.args if k not in args and k not in spec.optional]
    if missing:
        raise StepError(f"{head} needs argument '{missing[0]}'")
    return Transition.make(head, rank=rank, **args)
