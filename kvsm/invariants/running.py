"""Invariant 14, Running: the reference never stops at a `raise` or an `assert` (the
scheduler process would die). `halted` records the step at which a path the model takes
at the reference's value reaches one (a load-back's owner-lane eviction under
`write_back_evict = "deferred"`, whose re-check of a planned parent finds a deferred
child still on L1; a device eviction under `evict_write_back = "sync"` whose write-back
finds no host run). The state records it, so the rule over a transition and the rule
over the whole state are one: the state's record read."""

from __future__ import annotations

from typing import Any

from ..state import ClusterState

I = 14

# What the reference raises or asserts at each step that can set `halted`.
STOPS = {
    "LoadBack": "the owner-lane eviction's re-check of a planned victim raises 'plan diverged before reservation' "
    "(a child it deferred for its write-back is still on L1)",
    "EvictDevice": "evict() asserts that every node it wrote back is backed, and this victim's write-back found no "
    "host run after evict-to-fit (write_backup returned 0)",
}


def running_violation(s: ClusterState) -> str | None:
    """The rule without its label; None when it holds."""
    if s.halted is None:
        return None
    return f"{s.halted}: {STOPS.get(s.halted, 'the reference stops here')}"


def whole(w: Any) -> None:
    why = running_violation(w.s)
    if why:
        w.bad(I, why)


def holds(s: ClusterState) -> bool:
    return s.halted is None
