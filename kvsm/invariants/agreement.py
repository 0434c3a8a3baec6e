"""Invariant 13, Agreement: every rank takes the same decision at every replicated step
(the model is collective-free): `diverged` records the first step some rank decided
otherwise than rank 0. The state records it, so the rule over a transition and the
rule over the whole state are one: the state's record read."""

from __future__ import annotations

from typing import Any

from ..state import ClusterState

I = 13


def agreement_violation(s: ClusterState) -> str | None:
    """The rule without its label; None when it holds."""
    if s.diverged is None:
        return None
    name, ranks = s.diverged
    many = len(ranks) > 1
    return f"{name}: rank{'s' if many else ''} {', '.join(map(str, ranks))} decide{'' if many else 's'} it otherwise than rank 0"


def whole(w: Any) -> None:
    why = agreement_violation(w.s)
    if why:
        w.bad(I, why)


def holds(s: ClusterState) -> bool:
    return s.diverged is None
