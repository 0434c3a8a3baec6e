"""`Transition`: one step of the model as a value, with its arguments, as a log line
holds it and as a message names it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Transition:
    """One transition with its arguments. `rank` is set for per-rank transitions."""

    name: str
    args: tuple[tuple[str, Any], ...] = ()
    rank: int | None = None

    @staticmethod
    def make(name: str, rank: int | None = None, **args: Any) -> "Transition":
        # `Transition(name, args, rank)` with the arguments sorted by name and lists frozen,
        # its fields stored straight into the new value's __dict__ (the frozen dataclass's
        # __init__ stores each through object.__setattr__, which the simulator pays for
        # at every step)
        t = _new(Transition)
        d = t.__dict__
        d["name"] = name
        if list in map(type, args.values()):
            d["args"] = tuple(sorted([(k, tuple(v) if isinstance(v, list) else v) for k, v in args.items()]))
        else:  # (no list to freeze: sorted at C speed)
            d["args"] = tuple(sorted(args.items()))
        d["rank"] = rank
        return t

    def arg(self, key: str) -> Any:
        for k, v in self.args:
            if k == key:
                return v
        raise KeyError(key)

    def kwargs(self) -> dict[str, Any]:
        return dict(self.args)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if self.rank is not None:
            d["rank"] = self.rank
        d["args"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.args}
        return d

    def __str__(self) -> str:
        parts = [f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.args]
        if self.rank is not None:
            parts.insert(0, f"r={self.rank}")
        return f"{self.name}({', '.join(parts)})"


_new = object.__new__


def arrive_step(rid: int, tokens: tuple[int, ...] | list[int], out_pages: int, ns: int = 0) -> Transition:
    """The `Arrive` of request `rid` in namespace `ns` (a tenant or adapter: docs/model.md,
    "Namespaces"). The namespace is an argument only when it is not 0, so that a log, a
    digest and a trace module of namespace 0 alone keep the bytes they had without it."""
    if ns:
        return Transition.make("Arrive", rid=rid, tokens=tokens, out_pages=out_pages, ns=ns)
    return Transition.make("Arrive", rid=rid, tokens=tokens, out_pages=out_pages)


def arrive_ns(t: Transition) -> int:
    """The namespace of an `Arrive` (0 when it names none)."""
    for k, v in t.args:
        if k == "ns":
            return v
    return 0
