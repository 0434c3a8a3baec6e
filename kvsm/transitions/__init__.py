"""Every transition of the model, by family, and the two functions the rest of kvsm
uses: `enabled(state)` and `apply(state, transition)`.

Each transition is a pure function `(state, transition) -> state` whose guard
raises `Rejected` with a reason before anything is written. A family supplies a
cheap superset of its possibly-enabled instances; `enabled` keeps those whose guard
holds, so there is one source of truth for every guard.
"""

from __future__ import annotations

from typing import Iterator

from ..state import ClusterState, Rejected
from .base import REGISTRY, Spec, Transition
from . import request, split, reserve, commit, evict  # noqa: F401  (registration)

# Order of the names as MODEL.md lists them; also the order `enabled` reports them in.
NAMES = (
    "Arrive",
    "Match",
    "Insert",
    "Finish",
    "Abort",
    "Split",
    "Reserve",
    "WriteDone",
    "Commit",
    "Rollback",
    "EvictDevice",
    "EvictHost",
    "LoadBack",
)
assert set(NAMES) == set(REGISTRY), "registry and NAMES disagree"


def apply(state: ClusterState, t: Transition) -> ClusterState:
    spec = REGISTRY.get(t.name)
    if spec is None:
        raise Rejected(f"unknown transition '{t.name}'")
    if spec.per_rank != (t.rank is not None):
        raise Rejected(f"{t.name} {'needs' if spec.per_rank else 'takes no'} rank")
    return spec.apply(state, t)


def successors(state: ClusterState, names: tuple[str, ...] = NAMES) -> Iterator[tuple[Transition, ClusterState]]:
    """Every enabled transition with the state it leads to."""
    for name in names:
        spec = REGISTRY[name]
        for t in spec.candidates(state):
            try:
                yield t, spec.apply(state, t)
            except Rejected:
                continue


def enabled(state: ClusterState) -> list[Transition]:
    return [t for t, _ in successors(state)]


__all__ = ["NAMES", "REGISTRY", "Rejected", "Spec", "Transition", "apply", "enabled", "successors"]
