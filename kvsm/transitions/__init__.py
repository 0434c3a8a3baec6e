"""Every transition of the model, by family, and the two functions the rest of kvsm
uses: `enabled(state)` and `apply(state, transition)`.

Each transition is a pure function `(state, transition) -> state` whose guard
raises `Rejected` with a reason before anything is written. A family supplies a
cheap superset of its possibly-enabled instances; `enabled` keeps those whose guard
holds, so there is one source of truth for every guard.
"""

from __future__ import annotations

from typing import Iterator

from ..config import Config
from ..state import ClusterState, Rejected
from .base import REGISTRY, Spec, Transition
from . import request, split, reserve, commit, evict, spill, reload, fault  # noqa: F401  (registration)

# Order of the names by family, as docs/model.md lists them; also the order `enabled` reports them in.
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
    "SpillSubmit",
    "SpillGathered",
    "SpillDone",
    "SpillAck",
    "ReloadMark",
    "ReloadReserve",
    "ReloadDone",
    "ReloadAdmit",
    "ReloadExpire",
    "DiskFail",
    "DiskRecover",
)
assert set(NAMES) == set(REGISTRY), "registry and NAMES disagree"
L3_FAMILIES = ("spill", "reload", "fault")


def names_for(cfg: "Config") -> tuple[str, ...]:
    """The transitions a config can ever enable (the L3 families need an L3 tier)."""
    if cfg.L3:
        return NAMES
    return tuple(n for n in NAMES if REGISTRY[n].family not in L3_FAMILIES)


def apply(state: ClusterState, t: Transition) -> ClusterState:
    spec = REGISTRY.get(t.name)
    if spec is None:
        raise Rejected(f"unknown transition '{t.name}'")
    if spec.per_rank != (t.rank is not None):
        raise Rejected(f"{t.name} {'needs' if spec.per_rank else 'takes no'} rank")
    return spec.apply(state, t)


def successors(state: ClusterState, names: tuple[str, ...] | None = None) -> Iterator[tuple[Transition, ClusterState]]:
    """Every enabled transition with the state it leads to."""
    for name in names if names is not None else names_for(state.config):
        spec = REGISTRY[name]
        for t in spec.candidates(state):
            try:
                yield t, spec.apply(state, t)
            except Rejected:
                continue


def enabled(state: ClusterState) -> list[Transition]:
    return [t for t, _ in successors(state)]


__all__ = ["names_for", "NAMES", "REGISTRY", "Rejected", "Spec", "Transition", "apply", "enabled", "successors"]
