"""The registry of transitions: each transition's `Spec` (how to apply it, its
candidates, its arguments), the guards `register` adds to every replicated or
deciding step, and the rank check of a per-rank step."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from ..config import RANK_VIEW_BUGS, Config
from ..state import ClusterState, Rejected
from .transition import Transition


@dataclass(frozen=True)
class Spec:
    """A transition's definition: how to apply it, which instances might be enabled (a
    cheap superset; the guard in `apply` decides), its argument types, whether it is a
    per-rank step, and whether it is an agreement: a MIN or AND over every rank's
    progress, after which each rank may read what the others wrote (whoever executes
    the log meets all ranks there).

    A replicated step is one every rank takes at the same point of its program, so none
    is enabled while a round of the commit collective is open (some rank has reached its
    call and the round has not completed: that rank waits in the collective and cannot
    take it). `register` adds that guard to every step that is not per-rank, except the
    collective's own completion (`in_round`)."""

    name: str
    family: str
    apply: Callable[..., ClusterState]
    candidates: Callable[[ClusterState], Iterable[Transition]]
    args: dict[str, str]  # name -> "int" | "ints"
    # arguments a log or a step line may leave out (the transition reads their default)
    optional: frozenset[str] = frozenset()
    per_rank: bool = False
    agreement: bool = False
    in_round: bool = False
    # Its outcome is a decision every rank takes from its own replica (victims, host
    # room, an L3 claim): `apply(state, t, view)` is rank `view`'s decision.
    decides: bool = False


REGISTRY: dict[str, Spec] = {}


def register(spec: Spec) -> Spec:
    if spec.decides:
        spec = replace(spec, apply=_every_rank_decides(spec.apply, spec.name))
    if not spec.per_rank and not spec.in_round:
        spec = replace(spec, apply=_after_round(spec.apply))
    REGISTRY[spec.name] = spec
    return spec


# Deciding steps that read a rank-local fact under a knob's reference value, not only
# under a defect in RANK_VIEW_BUGS: step name -> (knob, value)
LOCAL_FACT_KNOBS = {"SpillSubmit": ("own_disk_durable", "reference")}


def rank_views(cfg: Config, name: str) -> bool:
    """Whether ranks may decide step `name` otherwise under `cfg` (each from its own
    replica or its own disk): under a defect in RANK_VIEW_BUGS, or under the reference
    value of a knob that makes the step read a rank-local fact."""
    knob = LOCAL_FACT_KNOBS.get(name)
    return cfg.bug in RANK_VIEW_BUGS or (knob is not None and getattr(cfg, knob[0]) == knob[1])


def cluster_view(cfg: Config) -> int | None:
    """The rank whose decisions the cluster's state follows: rank 0 under a defect that
    lets ranks decide from their own views, else None (every rank decides alike)."""
    return 0 if cfg.bug in RANK_VIEW_BUGS else None


def _every_rank_decides(decide: Callable[..., ClusterState], name: str) -> Callable[..., ClusterState]:
    """`apply(state, t, view=None)` of a deciding transition. With a `view`, that rank's
    decision. Without one, the cluster's step: every rank decides from its own replica
    (where `rank_views` says a rank's view can differ), the state follows
    rank 0, and when some rank decides otherwise (another successor, or none) the state
    records it in `diverged`, the first time (invariant 13)."""

    def apply(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
        if view is not None or not rank_views(s.config, name):
            return decide(s, t, view)
        first = decide(s, t, 0)  # a rejection by rank 0 is the cluster's
        if s.diverged is not None:
            return first
        want = first.replicated_digest()
        others = []
        for r in range(1, s.config.R):
            try:
                if decide(s, t, r).replicated_digest() != want:
                    others.append(r)
            except Rejected:
                others.append(r)
        if not others:
            return first
        return replace(first, diverged=(t.name, tuple(others)), _digest=None)

    apply.__name__ = getattr(decide, "__name__", "apply")
    return apply


def waits_for_round(spec: Spec, s: ClusterState) -> bool:
    """Whether every instance of `spec` is disabled in `s` because a round of the commit
    collective is open (the guard `register` adds to replicated steps)."""
    return not spec.per_rank and not spec.in_round and any(s.commit_round)


def _after_round(apply: Callable[..., ClusterState]) -> Callable[..., ClusterState]:
    def guarded(s: ClusterState, t: Transition, *view: int | None) -> ClusterState:
        if any(s.commit_round):
            waiting = [r for r, c in enumerate(s.commit_round) if c]
            raise Rejected(f"ranks {waiting} are at the commit collective's call; replicated steps wait for the round to complete")
        return apply(s, t, *view)

    guarded.__name__ = getattr(apply, "__name__", "guarded")
    guarded.__wrapped__ = apply  # type: ignore[attr-defined]
    return guarded


def rank_of(s: ClusterState, t: Transition) -> int:
    """The rank of a per-rank transition, which must be one of the config's ranks."""
    r = t.rank
    if r is None or not 0 <= r < s.config.R:
        raise Rejected(f"rank {r} is not one of 0..{s.config.R - 1}")
    return r
