"""The ranks' L3 engines and disks: when each rank's spill gathers, disk writes and disk
reads end, and when its disk fails and comes back (docs/sim.md, L3 and Faults).

When a spill is submitted, each rank gathers the pages it owns (object-local index
`i mod R`) out of the slab, after its previous gathers, then its disk writes them,
after the disk's earlier operations; a new reload is one disk read per rank. Every
duration is seeded and jittered, from streams of the engine's own, so turning the tier
on changes no L1/L2 write delay and no other fault. Each step is an event at the tick
it ends; the model decides whether it succeeded (`spill_write_ok`, `reload_read_ok`).
Each disk operation asks for the `slow` fault, and each iteration with work for the
`disk` faults (`FaultDraws`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..state import ReloadOp, SpillOp
from ..transitions import Transition
from ..transitions.reload import reload_read_ok
from ..transitions.spill import spill_write_ok
from .cluster import Cluster
from .events import DISK, Events
from .faults import FaultDraws
from .options import Timing

T = Transition.make


@dataclass(frozen=True)
class DiskJob:
    """One step of one rank's L3 engine: gather a spill out of the slab, write it to
    disk, read a reload from disk, or (not work) bring a failed disk back."""

    rank: int
    what: str  # "gather" | "write" | "read" | "recover"
    op: int  # the spill's node id or the reload's key, checked against the model's FIFO


class DiskEngine:
    def __init__(self, cluster: Cluster, events: Events, timing: Timing, draws: FaultDraws, seed: int) -> None:
        self.cluster = cluster
        self.events = events
        self.timing = timing
        self.draws = draws
        self.R = cluster.R
        self.rng = random.Random(f"kvsm-sim:disk-timing:{seed}")
        self.gather_busy_ms = [0.0] * self.R  # each rank's slab -> staging copies
        self.disk_busy_ms = [0.0] * self.R  # each rank's disk, writes and reads in submit order
        self.drawn: int | None = None  # tick of the last disk fault draws
        self.up_since = [0] * self.R  # tick each disk last came back

    def _disk_ms(self, pages: int, per_page: float) -> float:
        """A rank's disk operation on its `pages` pages: jittered, SLOW_FACTOR slower under a slow fault."""
        tm = self.timing
        ms = max(0.1, pages * per_page) * self.rng.uniform(1 - tm.disk_jitter, 1 + tm.disk_jitter)
        return ms * self.draws.disk_slowdown()

    def start_spills(self, ops: tuple[SpillOp, ...], tick: int) -> None:
        """Each rank gathers the pages it owns out of the slab, then its disk writes them,
        after the writes and reads submitted before."""
        tm = self.timing
        R = self.R
        now = tick * tm.tick_ms
        for op in ops:
            n = len(op.hashes)
            for r in range(R):
                owned = len(range(r, n, R))
                start = max(now, self.gather_busy_ms[r])
                gathered = start + max(0.1, owned * tm.gather_ms_per_page) * self.rng.uniform(1 - tm.disk_jitter, 1 + tm.disk_jitter)
                self.gather_busy_ms[r] = gathered
                written = max(gathered, self.disk_busy_ms[r]) + self._disk_ms(owned, tm.disk_write_ms_per_page)
                self.disk_busy_ms[r] = written
                self.events.push(tm.after(tick, gathered), DISK, DiskJob(rank=r, what="gather", op=op.node))
                self.events.push(tm.after(tick, written), DISK, DiskJob(rank=r, what="write", op=op.node))

    def start_reloads(self, ops: tuple[ReloadOp, ...], tick: int) -> None:
        """Each rank's disk reads the pages it owns of each new reload into the slab."""
        tm = self.timing
        R = self.R
        now = tick * tm.tick_ms
        for op in ops:
            n = len(op.hashes)
            for r in range(R):
                done = max(now, self.disk_busy_ms[r]) + self._disk_ms(len(range(r, n, R)), tm.disk_read_ms_per_page)
                self.disk_busy_ms[r] = done
                self.events.push(tm.after(tick, done), DISK, DiskJob(rank=r, what="read", op=op.key))

    def step(self, job: DiskJob) -> None:
        """Rank `job.rank` finishes one L3 step; `ok` is what the rank's state implies."""
        c = self.cluster
        s = c.state
        r = job.rank
        if job.what == "recover":
            c.rank_step(r, T("DiskRecover", rank=r))
            self.up_since[r] = c.tick
            return
        if job.what == "gather":
            k, fifo, name = s.spill_gathered[r], s.spills, "spills"
        elif job.what == "write":
            k, fifo, name = len(s.spill_done[r]), s.spills, "spills"
        else:
            k, fifo, name = len(s.reload_done[r]), s.reloads, "reloads"
        ident = (fifo[k].node if name == "spills" else fifo[k].key) if k < len(fifo) else None  # type: ignore[union-attr]
        if ident != job.op:
            c.device_diverged(r, f"its disk finished the {job.what} of {job.op}, but its model's next one in {name} is {ident}")
        if job.what == "gather":
            c.rank_step(r, T("SpillGathered", rank=r))
        elif job.what == "write":
            c.rank_step(r, T("SpillDone", rank=r, ok=spill_write_ok(s, r)))
        else:
            c.rank_step(r, T("ReloadDone", rank=r, ok=reload_read_ok(s, r)))

    def draw_faults(self, tick: int) -> None:
        """Each working disk fails with probability `disk` per tick, drawn once over the
        ticks it has been up since the previous draws (1 at the first), and comes back
        after a drawn number of ticks. Only iterations with work draw: a tick that only
        brings a disk back must not draw for the others, or disks failing and recovering
        in turn would keep every tick of an idle gap alive (with two or more ranks)."""
        last = self.drawn
        self.drawn = tick
        c = self.cluster
        for r in range(self.R):
            if not c.state.disk_ok[r]:
                continue
            elapsed = 1 if last is None else tick - max(last, self.up_since[r])
            if self.draws.disk_fails(elapsed):
                c.rank_step(r, T("DiskFail", rank=r))
                # a recovery is not work: a run whose only events are recoveries is over
                self.events.push(tick + self.draws.disk_down_ticks(), DISK, DiskJob(rank=r, what="recover", op=0), work=False)
