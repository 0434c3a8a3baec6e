"""The fault family: `DiskFail(r)`, `DiskRecover(r)`: rank r's disk starts or stops
failing. While it fails, that rank's spill writes and reload reads are not ok."""

from __future__ import annotations

from typing import Iterable

from ..state import ClusterState, Rejected
from ..tx import Tx
from .transition import Transition
from .registry import Spec, rank_of, register
from .spill import need_l3


def _set_disk(s: ClusterState, t: Transition, ok: bool) -> ClusterState:
    need_l3(s)
    r = rank_of(s, t)
    if s.disk_ok[r] == ok:
        raise Rejected(f"rank {r}'s disk is already {'working' if ok else 'failing'}")
    if not ok and s.config.max_disk_faults and s.disk_faults >= s.config.max_disk_faults:
        if s.config.max_disk_faults < 0:
            raise Rejected("the config allows no disk fault (max_disk_faults = -1)")
        raise Rejected(f"all {s.config.max_disk_faults} disk faults of the config have happened")
    tx = Tx(s)
    tx.disk_ok[r] = ok
    if not ok:
        tx.disk_faults += 1
    return tx.commit()


def disk_fail(s: ClusterState, t: Transition) -> ClusterState:
    return _set_disk(s, t, False)


def disk_recover(s: ClusterState, t: Transition) -> ClusterState:
    return _set_disk(s, t, True)


def disk_fail_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        if s.config.max_disk_faults and s.disk_faults >= s.config.max_disk_faults:
            return
        for r in range(s.config.R):
            if s.disk_ok[r]:
                yield Transition.make("DiskFail", rank=r)


def disk_recover_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        for r in range(s.config.R):
            if not s.disk_ok[r]:
                yield Transition.make("DiskRecover", rank=r)


register(Spec(name="DiskFail", family="fault", apply=disk_fail, candidates=disk_fail_candidates, args={}, per_rank=True))
register(Spec(name="DiskRecover", family="fault", apply=disk_recover, candidates=disk_recover_candidates, args={}, per_rank=True))
