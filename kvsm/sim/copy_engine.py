"""The ranks' copy engines: when each rank's device <-> host copies end.

Each `Reserve` hands the backup to every rank's engine, a FIFO like the model's
`writes`: rank `r` starts when its previous write ends and copies the node's pages in
its lane, taking a seeded time of its own; its `WriteDone(r)` is an event at the tick
the copy ends. The `stall` and `slow` faults are drawn here, per write and rank, from
the run's fault stream. A backup pending longer than the write timeout is overdue (the
loop rolls it back), and a rolled-back backup leaves the engines that have not written
it yet. A load-back is every rank loading its share of the pages at once.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass

from ..state import lane_of
from ..transitions import Transition
from .cluster import Cluster
from .events import WAKE, WRITE, Events
from .faults import SLOW_FACTOR, STALL_MS, Faults
from .options import Timing


@dataclass
class Job:
    """One backup write as one rank's copy engine sees it."""

    node: int
    cancelled: bool = False


class CopyEngine:
    def __init__(
        self,
        cluster: Cluster,
        events: Events,
        timing: Timing,
        faults: Faults,
        seed: int,
        rng_faults: random.Random,
        fault_counts: Counter,
    ) -> None:
        self.cluster = cluster
        self.events = events
        self.timing = timing
        self.faults = faults
        self.R = cluster.R
        # a stream of its own, so that e.g. adding faults does not change the write delays
        self.rng = random.Random(f"kvsm-sim:timing:{seed}")
        self.rng_faults = rng_faults
        self.fault_counts = fault_counts
        self.jobs: list[deque[Job]] = [deque() for _ in range(self.R)]  # per rank, in `writes` order
        self.busy_ms = [0.0] * self.R  # when each rank's last submitted write ends
        self.reserved_at: dict[int, int] = {}  # node -> tick of its Reserve

    def load_ms(self, pages: int) -> float:
        """A load-back of `pages` pages: the ranks load their lanes' shares in parallel."""
        return -(-pages // self.R) * self.timing.load_ms_per_page

    def submit(self, nodes: tuple[int, ...], tick: int) -> None:
        """Hand each new backup to every rank's copy engine."""
        if not nodes:
            return
        tm = self.timing
        R = self.R
        f = self.faults
        rt, rf = self.rng, self.rng_faults
        now_ms = tick * tm.tick_ms
        s = self.cluster.state
        for nid in nodes:
            self.reserved_at[nid] = tick
            self.events.push(tick + tm.tick_at(tm.write_timeout_ms), WAKE, None)
            lanes = [0] * R
            for p in s.nodes[nid].dev:
                lanes[lane_of(p, R)] += 1
            for r in range(R):
                start = max(now_ms, self.busy_ms[r])
                if f.stall and rf.random() < f.stall:
                    start += STALL_MS
                    self.fault_counts["stall"] += 1
                ms = max(0.1, lanes[r] * tm.write_ms_per_page) * rt.uniform(1 - tm.write_jitter, 1 + tm.write_jitter)
                if f.slow and rf.random() < f.slow:
                    ms *= SLOW_FACTOR
                    self.fault_counts["slow"] += 1
                self.busy_ms[r] = start + ms
                job = Job(nid)
                self.jobs[r].append(job)
                self.events.push(tm.after(tick, start + ms), WRITE, (r, job))

    def write_done(self, r: int, job: Job) -> None:
        """Rank `r`'s write `job` ended (unless it was cancelled meanwhile)."""
        if job.cancelled:
            return
        q = self.jobs[r]
        s = self.cluster.state
        if q[0] is not job or s.writes[s.write_done[r]] != job.node:
            raise RuntimeError(f"simulator bug: rank {r}'s copy engine and the model's writes disagree")
        q.popleft()
        self.cluster.rank_step(r, Transition.make("WriteDone", rank=r))

    def overdue(self) -> tuple[int, ...]:
        """Backups pending longer than the write timeout, in `writes` order."""
        limit = self.cluster.tick - self.timing.tick_at(self.timing.write_timeout_ms)
        return tuple(nid for nid in self.cluster.state.writes if self.reserved_at[nid] <= limit)

    def cancel(self, nodes: set[int]) -> None:
        """Rolled-back backups leave the copy engines that have not written them yet."""
        for r, q in enumerate(self.jobs):
            if any(j.node in nodes for j in q):
                for j in q:
                    if j.node in nodes:
                        j.cancelled = True
                self.jobs[r] = deque(j for j in q if not j.cancelled)
