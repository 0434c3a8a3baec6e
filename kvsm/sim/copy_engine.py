"""The ranks' copy engines: when each rank's device <-> host copies end.

Each `Reserve` hands the backup to every rank's engine, a FIFO like the model's
`writes`: rank `r` starts when its previous write ends and copies the node's pages in
its lane, taking a seeded time of its own; its `WriteDone(r)` is an event at the tick
the copy ends. A prepared backup (`Prepare`, before the forward pass) joins the FIFO
then, but its `WriteDone(r)` waits until the insert attaches it, and so does every
write behind it on that rank (the reference's `writing_check` defers an unattached
ack); one rolled back leaves the FIFO. Each write of each rank asks for the `stall` and
`slow` faults (`FaultDraws`). Under `ack_append = reference` (each rank appends at a
point of its own) rank `r` appends a write's final ack (`AckAppend(r)`) when its engine
starts the write, at a time of its own (and no later than the copy's end), and its
`WriteDone(r)` is the ack's finish query turning true at the copy's end; under
`"lockstep"` every rank appends it when the write is handed to the engines, in one step
(`Cluster.append_acks`). A backup pending longer than the write timeout is overdue (the
loop rolls it back), and a rolled-back backup leaves the engines that have not written
it yet: a write whose stall or copy has not begun gives its time back, and the writes
behind it move up (each keeps its drawn stall and duration); one that has begun holds
its engine to its end. A load-back is asynchronous as in the model: each rank's load
stream copies the pages in its lane, in load-back order, taking `load_ms_per_page` a
page; its `LoadDone(r)` is an event at the tick its copy ends, and the request's
forward pass (its prefill) ends no earlier than the last rank's copy.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from ..state import lane_of
from ..transitions import Transition
from .cluster import Cluster
from .events import LOAD, WAKE, WRITE, Events
from .faults import FaultDraws
from .options import Timing


@dataclass
class Job:
    """One backup write as one rank's copy engine sees it."""

    rank: int
    node: int
    begin_ms: float = 0.0  # when its engine takes it up: its stall, if drawn, then its copy
    stall_ms: float = 0.0  # the stall drawn before it (0: none)
    copy_ms: float = 0.0  # its drawn duration
    cancelled: bool = False  # rolled back, or moved up (a new Job stands for it): its events are void
    finished: bool = False  # its copy ended (its WriteDone may wait for an attach)
    acked: bool = False  # its rank appended its final ack (ack_append = reference)

    @property
    def start_ms(self) -> float:
        """When its copy starts (after its stall)."""
        return self.begin_ms + self.stall_ms

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.copy_ms


@dataclass
class Ack:
    """The moment rank `job.rank` appends the final ack of write `job` (ack_append =
    reference): when its engine starts the copy."""

    job: Job

    @property
    def rank(self) -> int:
        return self.job.rank


class CopyEngine:
    def __init__(
        self,
        cluster: Cluster,
        events: Events,
        timing: Timing,
        draws: FaultDraws,
        seed: int,
    ) -> None:
        self.cluster = cluster
        self.events = events
        self.timing = timing
        self.draws = draws
        self.R = cluster.R
        # a stream of its own, so that e.g. adding faults does not change the write delays
        self.rng = random.Random(f"kvsm-sim:timing:{seed}")
        self.jobs: list[deque[Job]] = [deque() for _ in range(self.R)]  # per rank, in `writes` order
        self.busy_ms = [0.0] * self.R  # when each rank's last submitted write ends
        self.held_ms = [0.0] * self.R  # until when a rolled-back write it had taken up holds each engine
        self.load_busy_ms = [0.0] * self.R  # when each rank's last load-back copy ends
        self.reserved_at: dict[int, int] = {}  # node -> tick of its Reserve
        self.loads_started = 0  # load-backs handed to the load streams
        # ack_append = reference: each rank appends its acks at times of its own
        self.per_rank_acks = cluster.cfg.ack_append == "reference"

    def start_load(self, tick: int) -> float:
        """The load-back the model just issued (the newest of its `loads`) goes to every
        rank's load stream; returns the milliseconds from now until the last rank's copy
        ends (the ranks load their lanes' shares in parallel)."""
        tm = self.timing
        R = self.R
        now_ms = tick * tm.tick_ms
        op = self.cluster.state.loads[-1]
        self.loads_started += 1
        lanes = [0] * R
        for p, _ in op.pages:
            lanes[lane_of(p, R)] += 1
        end = now_ms
        for r in range(R):
            done = max(now_ms, self.load_busy_ms[r]) + lanes[r] * tm.load_ms_per_page
            self.load_busy_ms[r] = done
            end = max(end, done)
            self.events.push(tm.after(tick, done), LOAD, r)
        return end - now_ms

    def load_done(self, r: int) -> None:
        """Rank `r`'s oldest load-back copy it has not finished ended."""
        self.cluster.rank_step(r, Transition.make("LoadDone", rank=r))

    def submit(self, nodes: tuple[int, ...], tick: int) -> None:
        """Hand each new backup to every rank's copy engine."""
        s = self.cluster.state
        for nid in nodes:
            self.reserved_at[nid] = tick
            self.events.push(tick + self.timing.tick_at(self.timing.write_timeout_ms), WAKE, None)
            lanes = [0] * self.R
            for p in s.nodes[nid].dev:
                lanes[lane_of(p, self.R)] += 1
            self._enqueue(nid, lanes, tick)
        self._lockstep_acks()

    def _lockstep_acks(self) -> None:
        """Under `ack_append = lockstep` every rank appends the new writes' acks now."""
        if self.cluster.cfg.ack_append == "lockstep":
            self.cluster.append_acks()

    def submit_prepared(self, nid: int, positions: range, tick: int) -> None:
        """Hand a prepared backup to every rank's copy engine: the pages at `positions` of
        its request (page k in lane k mod R), written during the forward pass."""
        lanes = [0] * self.R
        for k in positions:
            lanes[lane_of(k, self.R)] += 1
        self._enqueue(nid, lanes, tick)
        self._lockstep_acks()

    def attach(self, nid: int, tick: int) -> None:
        """The insert attached prepared backup `nid`: its timeout counts from now, and the
        writes it held back on each rank are done."""
        self.reserved_at[nid] = tick
        self.events.push(tick + self.timing.tick_at(self.timing.write_timeout_ms), WAKE, None)
        for r in range(self.R):
            self._drain(r)

    def _enqueue(self, nid: int, lanes: list[int], tick: int) -> None:
        """Rank r copies lanes[r] pages after its previous write, in a drawn time."""
        tm = self.timing
        rt = self.rng
        now_ms = tick * tm.tick_ms
        for r in range(self.R):
            begin = max(now_ms, self.busy_ms[r])
            stall = self.draws.stall_ms()
            ms = max(0.1, lanes[r] * tm.write_ms_per_page) * rt.uniform(1 - tm.write_jitter, 1 + tm.write_jitter)
            ms *= self.draws.write_slowdown()
            job = Job(rank=r, node=nid, begin_ms=begin, stall_ms=stall, copy_ms=ms)
            self.jobs[r].append(job)
            self._schedule(job, tick)

    def _schedule(self, job: Job, tick: int) -> None:
        """The events of `job` (its ack when its copy starts, its end), from tick `tick`."""
        tm = self.timing
        self.busy_ms[job.rank] = job.end_ms
        if self.per_rank_acks:
            self.events.push(tm.after(tick, job.start_ms), WRITE, Ack(job))
        self.events.push(tm.after(tick, job.end_ms), WRITE, job)

    def write_done(self, job: Job | Ack) -> None:
        """Rank `job.rank`'s write `job` ended (unless it was cancelled meanwhile), or, for
        an `Ack`, its engine started it and the rank appends its ack."""
        if isinstance(job, Ack):
            self._ack(job.job)
            return
        if job.cancelled:
            return
        job.finished = True
        self._drain(job.rank)

    def _ack(self, job: Job) -> None:
        """Rank `job.rank` appends the acks of its writes up to `job`, in its FIFO's order
        (a cancelled write's ack is never appended)."""
        if job.cancelled or job.acked:
            return
        for j in self.jobs[job.rank]:
            if not j.acked:
                self.cluster.append_ack(job.rank)
                j.acked = True
            if j is job:
                return

    def _drain(self, r: int) -> None:
        """Rank `r`'s `WriteDone`s for the finished writes at the head of its FIFO, up to
        one not attached yet."""
        q = self.jobs[r]
        while q and q[0].finished:
            s = self.cluster.state
            job = q[0]
            if job.node not in s.pending:
                return  # a prepared backup waiting for its insert
            k = s.write_done[r]
            if k >= len(s.writes) or s.writes[k] != job.node:
                next_write = f"node {s.writes[k]}" if k < len(s.writes) else "nothing (all are counted done)"
                self.cluster.device_diverged(
                    r, f"its copy engine finished the write of node {job.node}, but its model's count of finished writes "
                    f"({k}) has the next write of rank {r} at {next_write}"
                )
            if self.per_rank_acks and not job.acked:
                self._ack(job)  # an ack is appended no later than its copy ends
            q.popleft()
            self.cluster.rank_step(r, Transition.make("WriteDone", rank=r))

    def overdue(self) -> tuple[int, ...]:
        """Backups pending longer than the write timeout, in `writes` order (a prepared
        backup not attached yet is not pending: its insert or abort settles it)."""
        limit = self.cluster.tick - self.timing.tick_at(self.timing.write_timeout_ms)
        s = self.cluster.state
        return tuple(nid for nid in s.writes if nid in s.pending and self.reserved_at[nid] <= limit)

    def cancel(self, nodes: set[int]) -> None:
        """Rolled-back backups leave the copy engines that have not written them yet (and
        the writes they held back on a rank are done)."""
        for r, q in enumerate(self.jobs):
            if any(j.node in nodes for j in q):
                for j in q:
                    if j.node in nodes:
                        j.cancelled = True
                self._move_up(r, q)
                self._drain(r)

    def _move_up(self, r: int, q: deque[Job]) -> None:
        """Rank `r`'s FIFO `q` without its cancelled writes. A write its engine has taken up
        (its stall or copy began), cancelled or not, holds the engine to its end; each
        write not taken up yet begins when the engine is free, keeping its drawn stall and
        duration (a new `Job` with new events stands for it when it moves; the old one's
        events are void). A cancelled write that was not taken up costs no time: its
        stall was to come before it, and it will not come."""
        tick = self.cluster.tick
        now_ms = tick * self.timing.tick_ms
        free = max(now_ms, self.held_ms[r])
        for j in q:
            if j.begin_ms <= now_ms:  # taken up: the engine is its until its end
                free = max(free, j.end_ms)
                if j.cancelled:  # it leaves the FIFO, not the engine
                    self.held_ms[r] = max(self.held_ms[r], j.end_ms)
        kept: deque[Job] = deque()
        for j in q:
            if j.cancelled:
                continue
            if j.begin_ms <= now_ms or j.begin_ms == free:
                kept.append(j)
                free = max(free, j.end_ms)
                continue
            moved = Job(rank=r, node=j.node, begin_ms=free, stall_ms=j.stall_ms, copy_ms=j.copy_ms, acked=j.acked)
            j.cancelled = True
            kept.append(moved)
            self._schedule(moved, tick)
            free = moved.end_ms
        self.jobs[r] = kept
        self.busy_ms[r] = free
