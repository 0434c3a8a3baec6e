"""The serial schedule: requests one at a time in file order, prefill only, every copy
finished before the next step (docs/sim.md); the single-tier reference mode when run
with `--tiers l1 --ranks 1 --eviction lru`."""

from __future__ import annotations

from ..transitions import Transition
from . import procedures as proc
from .cluster import Cluster

T = Transition.make


class SerialSchedule:
    """The serial schedule as a part of `Simulation` (kvsm.sim.scheduler), which holds
    the cluster, the workload, the metrics and the fault draws it reads, and the
    admit/settle/sync steps it shares with the timed schedule."""

    def run_serial(self) -> None:
        _run_serial(self)


def _run_serial(sim: "SerialSchedule") -> None:
    """Each request in turn: admitted, its load-backs landed, aborted (an `abort` fault)
    or inserted (under write_back, after writing back until it fits or nothing more
    can be), finished or left uncached, and every write committed."""
    c = sim.cluster
    m = sim.metrics
    for index in range(len(sim.workload.requests)):
        c.tick = index
        live, _, _ = sim.admit(index, index, 0, index)
        _drain_loads(c)
        if sim.draws.abort():
            c.run(proc.abort, index)
            sim.settle(index)
            m.requests_aborted += 1
            m.faults["abort"] += 1
            continue
        ok, _ = c.run(proc.insert, index, sim.wt_backup)
        sim.settle(index)
        while not ok and sim.wb:
            if not c.run(proc.write_back, index):
                break
            m.write_back_waits += 1
            _drain_writes(sim)
            ok, _ = c.run(proc.insert, index, False)
        if ok:
            c.run(proc.finish, index)
            m.requests_finished += 1
        else:
            sim.uncached(live)
        _drain_writes(sim)
    sim.ticks = len(sim.workload.requests)


def _drain_loads(c: Cluster) -> None:
    """Every rank's load-back copies land before the forward pass."""
    for r in range(c.R):
        while c.state.load_done[r] < len(c.state.loads):
            c.rank_step(r, T("LoadDone", rank=r))
    c.learn_loads()


def _drain_writes(sim: "SerialSchedule") -> None:
    """Every rank finishes every submitted write, then a sync point commits them."""
    c = sim.cluster
    c.append_acks()
    for r in range(c.R):
        while c.state.write_done[r] < len(c.state.writes):
            c.rank_step(r, T("WriteDone", rank=r))
    sim.sync()
