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
from .transition import Transition, arrive_ns, arrive_step
from .registry import REGISTRY, Spec, rank_views
from . import request, split, prune, reserve, commit, evict, spill, reload, fault  # noqa: F401  (registration)

# Order of the names by family, as docs/model.md lists them; also the order `enabled` reports them in.
NAMES = (
    "Arrive",
    "Match",
    "Insert",
    "Finish",
    "Abort",
    "Split",
    "PruneStaleTail",
    "Reserve",
    "Prepare",
    "AckAppend",
    "AckAppendAll",
    "WriteDone",
    "CommitCall",
    "Commit",
    "Rollback",
    "EvictDevice",
    "EvictHost",
    "LoadBack",
    "LoadDone",
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
    """The transitions a config can ever enable (the L3 families need an L3 tier,
    `Prepare` needs `prepared_backups`, `AckAppend` needs `ack_append = "reference"`, `AckAppendAll` `"lockstep"`, and
    `PruneStaleTail` a `stale_prune` other than `off`)."""
    return tuple(
        n for n in NAMES
        if (cfg.L3 or REGISTRY[n].family not in L3_FAMILIES) and (cfg.prepared_backups or n != "Prepare")
        and (cfg.ack_append == "reference" or n != "AckAppend")
        and (cfg.ack_append == "lockstep" or n != "AckAppendAll")
        and (cfg.stale_prune != "off" or n != "PruneStaleTail")
    )


def apply(state: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """The state after `t`. `view` names the rank whose own decision a deciding
    transition takes (a rank's replica); None is the cluster's step (`Spec.decides`)."""
    spec = REGISTRY.get(t.name)
    if spec is None:
        raise Rejected(f"unknown transition '{t.name}'")
    if spec.per_rank != (t.rank is not None):
        raise Rejected(f"{t.name} {'needs' if spec.per_rank else 'takes no'} rank")
    if view is not None and spec.decides and rank_views(state.config, t.name):
        return spec.apply(state, t, view)
    return spec.apply(state, t)  # every rank decides alike


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


__all__ = ["arrive_ns", "arrive_step", "names_for", "NAMES", "REGISTRY", "Rejected", "Spec", "Transition", "apply", "enabled", "successors"]
