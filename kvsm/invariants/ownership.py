"""Invariant 11, Ownership, of a transition: the effects that produced a state
(`kvsm.effects`) make each rank touch only its own device pages, its own pages of an L2
object and its own disk, and a per-rank transition of rank `rank` does only that
rank's work. O(effects). A rule over a transition only: there is no whole-state form."""

from __future__ import annotations

from .. import effects as fx
from ..state import ClusterState, lane_of
from .common import label

I = 11


def _performer(e: fx.Effect, R: int) -> int | None:
    """The rank that executes an effect: the one it names, else the owner of its device
    page; None for a host free, which every rank shares page by page."""
    if isinstance(e, (fx.Fill, fx.PoisonDev)):
        return lane_of(e.page, R)
    if isinstance(e, fx.Load):
        return lane_of(e.page, R)
    if isinstance(e, fx.PoisonHost):
        return None
    return e.rank


def step_violations(rank: int | None, s: ClusterState) -> list[str]:
    """Invariant 11 over the effects of the transition that produced `s` (`rank` is that
    transition's rank, None for a replicated one)."""
    R = s.config.R
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(label(I, msg))

    for e in s.effects:
        who = _performer(e, R)
        if who is not None and not 0 <= who < R:
            bad(f"{e.kind} names rank {who}, not one of 0..{R - 1}")
            continue
        if rank is not None and who != rank:
            bad(f"a step of rank {rank} emits {e!r}, which is {'shared by every rank' if who is None else f'work of rank {who}'}")
        if isinstance(e, fx.Store) and lane_of(e.page, R) != e.rank:
            bad(f"rank {e.rank} stores device page {e.page}, which lives in lane {lane_of(e.page, R)}")
        elif isinstance(e, fx.SpillGather):
            for host_page, _ in e.pages:
                if lane_of(host_page - e.base, R) != e.rank:
                    bad(f"rank {e.rank} gathers host page {host_page}, index {host_page - e.base} of its object, owned by rank {lane_of(host_page - e.base, R)}")
        elif isinstance(e, fx.ReloadRead):
            for host_page, _ in e.pages:
                if lane_of(host_page - e.base, R) != e.rank:
                    bad(f"rank {e.rank} reads into host page {host_page}, index {host_page - e.base} of its object, owned by rank {lane_of(host_page - e.base, R)}")
    return out
