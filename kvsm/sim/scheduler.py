"""The scheduler loop: which transition happens next, decided from one seed.

The simulator never edits state: every change is a model transition applied through
`kvsm.transitions.apply`. Replicated decisions are *procedures* (`procedures.py`);
`Cluster.run` runs each on the log's state and on every rank's replica. Per-rank
events (`WriteDone`, the L3 steps) go through `Cluster.rank_step`. docs/sim.md
describes both schedules precisely:

- `serial` (`serial.py`): requests one at a time in file order, prefill only (the
  single-tier reference mode when run with `--tiers l1 --ranks 1 --eviction lru`);
- `timed`: arrivals at their timestamps (`arrivals.py`), prefill and decode taking
  simulated time, requests overlapping, backups written by each rank's copy engine
  (`copy_engine.py`) and committed at sync points, and the faults of `--faults`
  (every draw in `faults.py`). With L3, each tick also has an L3 collective before the
  batch forms (acks, reload admission, reload reservation, the reload ttl, the spill
  maintainer), and each rank's L3 engine and disk (`disk_engine.py`) take seeded
  times of their own.

This module is the run and the timed loop: the steps both schedules share (admission,
prepared backups, sync points), the requests' lifecycle from arrival to finish, the
L3 collective, and which part handles each event (`events.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..collector import quiet_collector
from ..state import ClusterState
from ..transitions import Transition
from ..transitions.reload import held
from . import procedures as proc
from .arrivals import Arrivals
from .cluster import Cluster
from .copy_engine import CopyEngine
from .disk_engine import DiskEngine
from .events import ABORT, ARRIVE, DISK, FINISH, INSERT, LOAD, WAKE, WRITE, Events
from .faults import FaultDraws
from .metrics import Metrics
from .watch import Watch
from .options import Prepared, Timing
from .serial import SerialSchedule
from .sharing import views_differ
from .shuffle import RandomSchedule
from .stops import SimStuck
from .walker import WalkSchedule

T = Transition.make


@dataclass
class _Live:
    rid: int
    index: int  # position in the workload file
    tokens: tuple[int, ...]
    hits: int = 0
    deadline: int = -1  # tick by which a waiting write_back insert gives up
    matched: bool = True  # with L3 a request waits queued until the batch after its lookup


class Simulation(SerialSchedule, RandomSchedule, WalkSchedule):
    def __init__(
        self,
        prep: Prepared,
        timing: Timing,
        seed: int,
        check: bool = False,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.prep = prep
        self.seed = seed
        self.cfg = prep.cfg
        self.workload = prep.workload
        self.timing = timing
        self.faults = prep.faults
        self.check = check
        # with `check`, the checker, from the first transition's state before (the run may
        # start from another object than the cluster's state now: `untracked`); it stops
        # the run at the first state that breaks an invariant
        self.watch: Watch | None = None
        self.on_progress = on_progress
        self.metrics = Metrics(prep.workload.block_tokens)
        self.writer = None  # a LogWriter, set by the caller before run()
        # every fault of the run; the engines' delays have streams of their own
        self.draws = FaultDraws(prep.faults, seed, self.metrics.faults)
        self.cluster = Cluster(prep.cfg, self._on_apply, prep.replicas)
        self.wt_backup = prep.l2 and prep.cfg.policy == "write_through"
        self.wb = prep.l2 and prep.cfg.policy == "write_back"
        # the reference's production write-through path: backups prepared before the
        # forward pass (Prepare), attached or rolled back at the insert
        self.prepared_path = self.wt_backup and prep.cfg.prepared_backups
        self.prepared: dict[int, int] = {}  # rid -> node id of its prepared backup
        # under carry_host_hit a request's load-back uses the hit its match recorded, after
        # its prepared backup (`proc.load_back`)
        self.carry = prep.l2 and prep.cfg.carry_host_hit
        n = len(prep.workload.requests)
        self.sample_every = max(1, n // 400)
        self.applied = 0  # transitions applied to the log's state
        self.ticks = 0  # scheduler iterations
        self.end_ms = 0
        # the timed schedule's event queue and parts (the serial schedule finishes every
        # write before its sync point and has no clock, so it uses none of them)
        self.events = Events()
        self.arrivals: Arrivals | None = None
        self.copies: CopyEngine | None = None
        self.disks: DiskEngine | None = None
        # request -> how many load-backs must have landed on every rank before its insert
        # (the random schedule checks it; the timed schedule's clock orders them)
        self.load_of: dict[int, int] = {}
        if prep.schedule in ("timed", "random"):
            self.arrivals = Arrivals(prep.workload, timing, self.draws)
            self.copies = CopyEngine(self.cluster, self.events, timing, self.draws, seed)
            if prep.l3:
                self.disks = DiskEngine(self.cluster, self.events, timing, self.draws, seed)
        self.live: dict[int, _Live] = {}  # arrived, not finished nor aborted
        self.waiting: dict[int, _Live] = {}  # write_back inserts waiting for room
        self.queued: list[int] = []  # with L3: arrived, not matched yet (rid order)
        self.bias: float | None = None  # the random schedule's
        if prep.schedule == "random":
            self.init_random()

    def _on_apply(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        self.applied += 1
        if self.writer is not None:
            # the log (and with --check the checker) sees a state before the metrics read
            # it: a state an injected defect broke is reported, not tripped over
            self.writer.write(t, after)
        if self.check:
            if self.watch is None:
                self.watch = Watch(before, True, every=1, count=self.applied - 1)
            self.watch.write(t, after)
        self.metrics.on_transition(t, before, after)

    def run(self) -> None:
        c = self.cluster
        if self.writer is None and not c.replicas and (self.cfg.R == 1 or not views_differ(self.cfg)):
            # nothing reads a digest during the run (no log, no replica to compare with, no
            # rank's own decision to compare with the cluster's): do not maintain the digest
            # sums; the final digest is summed once at the end
            c.log.state = c.log.state.untracked()
        with quiet_collector():  # the run makes no reference cycles worth scanning for
            if self.prep.schedule == "serial":
                self.run_serial()
            elif self.prep.schedule == "random":
                self._run_random()
            elif self.prep.schedule == "walk":
                self.run_walk()
            else:
                self._run_timed()

    # ---- shared steps ----------------------------------------------------------------------------------
    def admit(self, rid: int, req_index: int, out_pages: int, t_ms: int) -> tuple[_Live, int, int]:
        req = self.workload.requests[req_index]
        hit_l1, hit_l2, refused = self.cluster.run(proc.admit, rid, req.hash_ids, out_pages, self.prep.l2, req.ns)
        self._prepare(rid, len(req.hash_ids))
        if self.carry:
            hit_l2, refused = self.cluster.run(proc.load_back, rid)
        self._admitted(rid, req_index, hit_l1, hit_l2, refused, t_ms)
        return _Live(rid=rid, index=req_index, tokens=req.hash_ids, hits=hit_l1 + hit_l2), hit_l1, hit_l2

    def _admitted(self, rid: int, req_index: int, hit_l1: int, hit_l2: int, refused: bool, t_ms: int) -> None:
        req = self.workload.requests[req_index]
        m = self.metrics
        m.admitted(rid, req_index, len(req.hash_ids), req.input_length, hit_l1, hit_l2)
        m.loadbacks_refused += refused
        if m.requests % self.sample_every == 0:
            m.sample(t_ms, self.cluster.state)
        if self.on_progress is not None:
            self.on_progress(m.requests)

    def _prepare(self, rid: int, pages: int) -> None:
        """Under `prepared_backups`, before the forward pass: the backup of the pages the
        request's insert will add, handed to the copy engines (its writes wait for the
        insert to attach it)."""
        if not self.prepared_path:
            return
        nid = self.cluster.run(proc.prepare, rid)
        if nid is not None:
            self.prepared[rid] = nid
            if self.copies is not None:
                length = self.cluster.state.objects[nid].length
                self.copies.submit_prepared(nid, range(pages - length, pages), self.cluster.tick)

    def settle(self, rid: int) -> None:
        """After request `rid`'s insert or abort: its prepared backup was attached (its
        writes may go on) or rolled back (it leaves the copy engines)."""
        nid = self.prepared.pop(rid, None)
        if nid is None or self.copies is None:
            return
        if nid in self.cluster.state.pending:
            self.copies.attach(nid, self.cluster.tick)
        else:
            self.copies.cancel({nid})

    def uncached(self, live: _Live) -> None:
        """The pages did not fit: the request is not cached (its pages count as recomputed)."""
        self.cluster.run(proc.abort, live.rid)
        self.settle(live.rid)
        self.metrics.requests_uncached += 1
        self.metrics.pages_uncached += len(live.tokens) - live.hits

    def sync(self) -> bool:
        """A sync point: the ranks learn each other's landed load-backs; while backups are
        in flight, the commit collective (every rank's `CommitCall`, then `Commit` with the
        MIN over the ranks' finished writes; one step under `commit_call = atomic`); the
        rollback of backups pending too long (never in the serial schedule, whose writes
        all finish before its sync point), and the replicated-digest comparison. Returns
        whether anything was committed or rolled back."""
        c = self.cluster
        changed = False
        c.learn_loads()
        if c.state.writes:
            m = c.learn_min()
            if m if self.cfg.commit_call == "atomic" else c.commit_calls():
                c.run(proc.commit)
                changed = m > 0
            due = self.copies.overdue() if self.copies is not None else ()
            if due:
                c.run(proc.rollback, due)
                self.copies.cancel(set(due))  # type: ignore[union-attr]
                changed = True
        c.check_agreement()
        return changed

    # ---- timed -------------------------------------------------------------------------------------------
    def _run_timed(self) -> None:
        assert self.arrivals is not None and self.copies is not None
        events = self.events
        for tick, kind, rid in self.arrivals.events:
            events.push(tick, kind, rid)
        c = self.cluster
        disk_faults = self.faults.disk
        while events.work:
            tick, batch, work = events.pop_tick()
            c.tick = self.metrics.tick = tick
            self.ticks += 1
            if disk_faults and work:
                self.disks.draw_faults(tick)  # type: ignore[union-attr]
            k = 0
            while k < len(batch) and batch[k].kind <= DISK:
                e = batch[k]
                if e.kind == WRITE:
                    self.copies.write_done(e.payload)
                elif e.kind == LOAD:
                    self.copies.load_done(e.payload)
                else:
                    self.disks.step(e.payload)  # type: ignore[union-attr]
                k += 1
            freed = self.sync()
            for e in batch[k:]:
                if e.kind == FINISH:
                    freed |= self._finish(e.payload)
                elif e.kind == ABORT:
                    freed |= self._abort_fault(e.payload)
                elif e.kind == INSERT:
                    if self.waiting and freed:
                        self._retry_waiting(tick)
                        freed = False
                    self._prefill_done(e.payload, tick)
                elif e.kind == ARRIVE:
                    if self.waiting and freed:
                        self._retry_waiting(tick)
                        freed = False
                    self._arrive(e.payload, tick)
                elif e.kind == WAKE:
                    freed |= bool(self.waiting) and any(w.deadline <= tick for w in self.waiting.values())
            if self.waiting and freed:
                self._retry_waiting(tick)
            if self.prep.l3:
                self._l3_tick(tick)
        self._end_run()

    def _end_run(self) -> None:
        """The last sync point; a run that ends with work in flight is stuck."""
        self.end_ms = self.cluster.tick * self.timing.tick_ms
        self.sync()
        s = self.cluster.state
        if self.live or s.writes or s.loads or s.spills or s.reloads or s.reload_candidates or s.spill_queue:
            held = sorted(w for op in s.reloads for w in op.waiters)
            raise SimStuck(
                f"the run ended with work never let go of: live requests {sorted(self.live)[:5]}"
                + (f" (held by reloads: {held[:5]})" if held else "")
                + f", {len(s.writes)} pending writes, {len(s.loads)} load-backs, {len(s.spills)} spills, "
                f"{len(s.reloads)} reloads, {len(s.spill_queue)} queued spills",
                self.applied,
            )

    def _arrive(self, rid: int, tick: int) -> None:
        index = self.arrivals.index(rid)  # type: ignore[union-attr]
        req = self.workload.requests[index]
        out_pages = self.workload.out_pages(req)
        if self.prep.l3 or (self.bias is not None and self.rng.random() < self.bias):
            # the request waits for the L3 collective of this tick before it can match (the
            # random schedule's: for a later step of the tick or a later tick)
            self.cluster.run(proc.arrive, rid, req.hash_ids, out_pages, self.prep.l3, req.ns)
            self.live[rid] = _Live(rid=rid, index=index, tokens=req.hash_ids, matched=False)
            self.queued.append(rid)
            if not self.prep.l3:
                self.events.push(tick + 1, WAKE, None)  # a tick where it matches, at the latest
            return
        live, hit_l1, hit_l2 = self.admit(rid, index, out_pages, tick * self.timing.tick_ms)
        self.live[rid] = live
        self._prefill(rid, hit_l1, hit_l2, tick)

    def _prefill(self, rid: int, hit_l1: int, hit_l2: int, tick: int) -> None:
        """The forward pass of the pages it missed (and the load-back) ends its prefill."""
        tm = self.timing
        req = self.arrivals.request(rid)  # type: ignore[union-attr]
        miss = len(req.hash_ids) - hit_l1 - hit_l2
        ms = miss * self.workload.block_tokens / tm.prefill_tokens_per_ms
        if hit_l2:
            ms += self.copies.start_load(tick)  # type: ignore[union-attr]
            self.load_of[rid] = self.copies.loads_started  # type: ignore[union-attr]
        self.events.push(tm.after(tick, tick * tm.tick_ms + ms), INSERT, rid)

    def _prefill_done(self, rid: int, tick: int) -> None:
        live = self.live.get(rid)
        if live is None:
            return  # aborted meanwhile
        ok, reserved = self.cluster.run(proc.insert, rid, self.wt_backup)
        if ok:
            self.settle(rid)
            self._decode(live, tick)
            self.copies.submit(reserved, tick)  # type: ignore[union-attr]
        elif self.wb:
            live.deadline = tick + self.timing.tick_at(self.timing.write_back_wait_ms)
            self.waiting[rid] = live
            self.metrics.write_back_waits += 1
            self.events.push(live.deadline, WAKE, None)
            self._write_back_more(live, tick)
        else:
            self._drop_uncached(live)

    def _write_back_more(self, live: _Live, tick: int) -> None:
        reserved = self.cluster.run(proc.write_back, live.rid)
        self.copies.submit(reserved, tick)  # type: ignore[union-attr]
        if not reserved and not self.cluster.state.writes:
            # nothing is being written back and nothing could be: it will never fit
            self.waiting.pop(live.rid, None)
            self._drop_uncached(live)

    def _retry_waiting(self, tick: int) -> None:
        for rid in sorted(self.waiting):
            live = self.waiting[rid]
            ok, _ = self.cluster.run(proc.insert, rid, False)
            if ok:
                del self.waiting[rid]
                self._decode(live, tick)
            elif tick >= live.deadline:
                del self.waiting[rid]
                self._drop_uncached(live)
            else:
                self._write_back_more(live, tick)

    def _drop_uncached(self, live: _Live) -> None:
        self.live.pop(live.rid, None)
        self.uncached(live)

    def _decode(self, live: _Live, tick: int) -> None:
        out = self.workload.requests[live.index].output_length
        self.events.push(tick + max(1, out), FINISH, live.rid)

    def _finish(self, rid: int) -> bool:
        if self.live.pop(rid, None) is None:
            return False
        self.cluster.run(proc.finish, rid)
        self.metrics.requests_finished += 1
        return True

    def _abort_fault(self, rid: int) -> bool:
        live = self.live.pop(rid, None)
        if live is None:
            return False
        self.waiting.pop(rid, None)
        self.cluster.run(proc.abort, rid)
        self.settle(rid)
        if not live.matched:
            # aborted while it waited for the L3 collective or a reload: it counts as a
            # request that hit nothing, so that every request is counted once
            self.queued.remove(rid)
            self._admitted(rid, live.index, 0, 0, False, self.cluster.tick * self.timing.tick_ms)
        self.metrics.requests_aborted += 1
        self.metrics.faults["abort"] += 1
        return True

    def _l3_tick(self, tick: int) -> None:
        """The L3 collective before the batch forms: every rank's L3 progress reaches the
        others (only when something is in flight or marked: an idle tick has no collective),
        the drain and the spill maintainer, then the queued requests that no reload holds
        match, in arrival order."""
        c = self.cluster
        s = c.state
        collective = bool(s.spills or s.reloads or s.reload_candidates)
        if collective:
            c.learn_l3()
        if collective or s.spill_queue:
            spills, reloads = c.run(proc.l3_drain)
            self.disks.start_spills(spills, tick)  # type: ignore[union-attr]
            self.disks.start_reloads(reloads, tick)  # type: ignore[union-attr]
        if collective:
            c.check_agreement(l3_learnt=True)
        s = c.state
        if any(op.waiters for op in s.reloads):
            # the reload ttl counts ticks: visit every tick while a request is held
            self.events.push(tick + 1, WAKE, None)
        self.match_queued(tick)

    def match_queued(self, tick: int) -> None:
        """The queued requests that no reload holds match, in arrival order."""
        c = self.cluster
        still = []
        for rid in self.queued:
            if held(c.state, rid):
                still.append(rid)
                continue
            live = self.live[rid]
            hit_l1, hit_l2, refused = c.run(proc.match, rid, self.prep.l2)
            self._prepare(rid, len(live.tokens))
            if self.carry:
                hit_l2, refused = c.run(proc.load_back, rid)
            live.matched = True
            live.hits = hit_l1 + hit_l2
            self._admitted(rid, live.index, hit_l1, hit_l2, refused, tick * self.timing.tick_ms)
            self._prefill(rid, hit_l1, hit_l2, tick)
        self.queued = still
