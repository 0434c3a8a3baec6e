"""The scheduler loop: which transition happens next, decided from one seed.

The simulator never edits state: every change is a model transition applied through
`kvsm.transitions.apply`. Replicated decisions are *procedures* (the functions of a
`View` below); `Cluster.run` runs each on the log's state and on every rank's replica.
Per-rank events (`WriteDone`) go through `Cluster.rank_step`. docs/sim.md describes
both schedules precisely:

- `serial`: requests one at a time in file order, prefill only (the single-tier
  reference mode when run with `--tiers l1 --ranks 1 --eviction lru`);
- `timed`: arrivals at their timestamps, prefill and decode taking simulated time,
  requests overlapping, backups written by each rank with its own seeded delays and
  committed at sync points, and the faults of `--faults`. With L3, each tick also
  has an L3 collective before the batch forms (acks, reload admission, reload
  reservation, the reload ttl, the spill maintainer), and each rank's spill gathers,
  disk writes and disk reads take seeded times of their own.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..invariants import violations
from ..state import ClusterState, ReloadOp, Rejected, SpillOp
from ..transitions import Transition
from ..transitions.evict import host_run
from ..transitions.reload import held, reload_read_ok, reload_target
from ..transitions.reserve import reserve_fits
from ..transitions.spill import spill_write_ok
from .cluster import Cluster, View
from .faults import BURST_SIZE, DISK_DOWN_TICKS, SLOW_FACTOR, STALL_MS
from .metrics import Metrics
from .metrics import depth as _depth
from .options import Prepared, Timing

T = Transition.make


class SimInvariantError(RuntimeError):
    """`--check` found a violated invariant; the message names the transition."""


# ---- replicated procedures: each decides from one rank's view only ------------------------------


def arrive(v: View, rid: int, tokens: tuple[int, ...], out_pages: int, l3: bool) -> None:
    """Arrive; with L3, mark the request for an L3 lookup if its key misses the tree
    below a whole node (the reference's lookup on entry to the waiting queue; the model
    allows one per request)."""
    s = v.apply(T("Arrive", rid=rid, tokens=tokens, out_pages=out_pages))
    if l3 and reload_target(s, rid) is not None:
        v.apply(T("ReloadMark", rid=rid))


def admit(v: View, rid: int, tokens: tuple[int, ...], out_pages: int, l2: bool) -> tuple[int, int, bool]:
    """Arrive and match at once (no L3 lookup to wait for)."""
    arrive(v, rid, tokens, out_pages, False)
    return match(v, rid, l2)


def match(v: View, rid: int, l2: bool) -> tuple[int, int, bool]:
    """Match; load the host hit back when it is worth it (at least the config's
    `load_back_threshold` tokens). Returns (L1 hit pages, pages loaded back, whether a
    worthwhile load-back was refused for lack of device room)."""
    s = v.apply(T("Match", rid=rid))
    hit_l1 = _depth(s, s.requests[rid].node)
    if l2:
        _, pages = host_run(s, rid)
        cfg = s.config
        if pages and pages * cfg.P >= cfg.load_back_threshold:
            try:
                v.apply(T("LoadBack", rid=rid))
            except Rejected:
                return hit_l1, 0, True
            return hit_l1, pages, False
    return hit_l1, 0, False


def insert(v: View, rid: int, backup: bool) -> tuple[bool, tuple[int, ...]]:
    """The forward pass is done: Insert (evicting as needed). With `backup`
    (write_through), Reserve every node of the request's path that became eligible,
    root to leaf, as the reference's insert does on each hit; a Reserve that cannot
    find host room still evicts the host leaves of its snapshot (`fits = false`, the
    reference's evict-to-fit) and is tried again on the node's next hit. Returns
    whether the request was cached and the nodes whose backup started."""
    try:
        s = v.apply(T("Insert", rid=rid))
    except Rejected:
        return False, ()
    if not backup:
        return True, ()
    reserved = []
    for nid in reversed(s.path_to_root(s.requests[rid].node)):
        if nid in v.state.backup_index:
            if try_reserve(v, nid):
                reserved.append(nid)
    return True, tuple(reserved)


def try_reserve(v: View, nid: int) -> bool:
    """Reserve eligible node `nid`; whether it fit. One that does not fit is a step
    (`fits = false`) only when it has host leaves to evict."""
    fits = reserve_fits(v.state, nid)
    if fits or v.state.host_index:
        v.apply(T("Reserve", node=nid, fits=fits))
    return fits


def write_back(v: View, rid: int) -> tuple[int, ...]:
    """Under write_back an unbacked leaf must reach L2 before it can leave L1: start
    backups of write-back candidates, in victim order, until they cover what request
    `rid` still lacks (an estimate; a retry after the commit asks again)."""
    s = v.state
    cfg = s.config
    req = s.requests[rid]
    need = len(req.tokens) - _depth(s, req.node) + req.out_pages
    free = sum(len(lane) for lane in s.dev_free)
    evictable = sum(len(s.nodes[k[2]].dev) for k in s.dev_index)
    short = max(1, need - free - evictable)
    slru = cfg.eviction == "slru"
    order = sorted((slru and n.hits >= 2, n.touched, n.id) for n in (s.nodes[i] for i in s.backup_index))
    reserved = []
    got = 0
    for _, _, nid in order:
        if got >= short:
            break
        if not try_reserve(v, nid):
            break  # no host room even after evicting every host leaf
        reserved.append(nid)
        got += len(v.state.nodes[nid].key)
    return tuple(reserved)


def finish(v: View, rid: int) -> None:
    v.apply(T("Finish", rid=rid))


def abort(v: View, rid: int) -> None:
    v.apply(T("Abort", rid=rid))


def commit(v: View) -> None:
    v.apply(T("Commit"))


def rollback(v: View, nodes: tuple[int, ...]) -> None:
    for nid in nodes:
        v.apply(T("Rollback", node=nid))


def l3_drain(v: View) -> tuple[tuple[SpillOp, ...], tuple[ReloadOp, ...]]:
    """The L3 part of a tick, after the collective (the reference's L3 queue drain and
    spill maintainer): `SpillAck` of what every rank gathered or wrote, `ReloadAdmit` of
    each reload every rank has read (head first), `ReloadReserve` of every marked
    candidate (in request order), one `ReloadExpire` while a reload holds a request,
    then `SpillSubmit` while the queue is not empty and under the inflight cap.
    Returns the spills and the reloads it started."""
    s = v.state
    if s.spills:
        gathered = min(s.spill_gathered)
        if min(len(x) for x in s.spill_done) or any(op.pinned for op in s.spills[:gathered]):
            s = v.apply(T("SpillAck"))
    while s.reloads and min(len(x) for x in s.reload_done):
        s = v.apply(T("ReloadAdmit"))
    kept = len(s.reloads)
    for rid in sorted(s.reload_candidates.keys()):
        s = v.apply(T("ReloadReserve", rid=rid))
    reloads = s.reloads[kept:]
    if any(op.waiters for op in s.reloads):
        s = v.apply(T("ReloadExpire"))
    spills: list[SpillOp] = []
    while s.spill_queue and len(s.spills) < s.config.spill_inflight:
        k = len(s.spills)
        s = v.apply(T("SpillSubmit"))  # drops stale entries; submits at most one
        spills.extend(s.spills[k:])
    return tuple(spills), reloads


# ---- the loop --------------------------------------------------------------------------------------------

# event kinds, in the order an iteration handles them; WRITE and DISK are rank steps
WRITE, DISK, WAKE, FINISH, ABORT, INSERT, ARRIVE = range(7)


@dataclass
class _Job:
    """One backup write as one rank's copy engine sees it."""

    node: int
    cancelled: bool = False


@dataclass
class _Live:
    rid: int
    index: int  # position in the workload file
    tokens: tuple[int, ...]
    hits: int = 0
    deadline: int = -1  # tick by which a waiting write_back insert gives up
    matched: bool = True  # with L3 a request waits queued until the batch after its lookup


@dataclass(frozen=True)
class _DiskJob:
    """One step of one rank's L3 engine: gather a spill out of the slab, write it to
    disk, read a reload from disk, or (not work) bring a failed disk back."""

    rank: int
    what: str  # "gather" | "write" | "read" | "recover"
    op: int  # the spill's node id or the reload's key, checked against the model's FIFO


class Simulation:
    def __init__(
        self,
        prep: Prepared,
        timing: Timing,
        seed: int,
        check: bool = False,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.prep = prep
        self.cfg = prep.cfg
        self.workload = prep.workload
        self.timing = timing
        self.faults = prep.faults
        self.check = check
        self.on_progress = on_progress
        self.metrics = Metrics(prep.workload.block_tokens)
        self.writer = None  # a LogWriter, set by the caller before run()
        # independent streams, so that e.g. adding faults does not change the write delays
        self.rng_timing = random.Random(f"kvsm-sim:timing:{seed}")
        self.rng_faults = random.Random(f"kvsm-sim:faults:{seed}")
        # L3 draws its disk delays and disk faults from streams of its own, so turning the
        # tier on changes no L1/L2 write delay and no other fault
        self.rng_disk = random.Random(f"kvsm-sim:disk-timing:{seed}")
        self.rng_disk_faults = random.Random(f"kvsm-sim:disk-faults:{seed}")
        self.cluster = Cluster(prep.cfg, self._on_apply)
        self.wt_backup = prep.l2 and prep.cfg.policy == "write_through"
        self.wb = prep.l2 and prep.cfg.policy == "write_back"
        n = len(prep.workload.requests)
        self.sample_every = max(1, n // 400)
        self.applied = 0  # transitions applied to the log's state
        self.ticks = 0  # scheduler iterations
        self.end_ms = 0

    def _on_apply(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        self.applied += 1
        self.metrics.on_transition(t, before, after)
        if self.writer is not None:
            self.writer.write(t, after)
        if self.check:
            bad = violations(after)
            if bad:
                raise SimInvariantError(f"after log transition #{self.applied} {t}: " + "; ".join(bad))

    def run(self) -> None:
        c = self.cluster
        if self.writer is None and not c.replicas:
            # nothing reads a digest during the run (no log, no replica to compare with):
            # do not maintain the digest sums; the final digest is summed once at the end
            c.log.state = c.log.state.untracked()
        if self.prep.schedule == "serial":
            self._run_serial()
        else:
            self._run_timed()

    # ---- shared steps ----------------------------------------------------------------------------------
    def _admit(self, rid: int, req_index: int, out_pages: int, t_ms: int) -> tuple[_Live, int, int]:
        req = self.workload.requests[req_index]
        hit_l1, hit_l2, refused = self.cluster.run(admit, rid, req.hash_ids, out_pages, self.prep.l2)
        self._admitted(rid, req_index, hit_l1, hit_l2, refused, t_ms)
        return _Live(rid, req_index, req.hash_ids, hit_l1 + hit_l2), hit_l1, hit_l2

    def _admitted(self, rid: int, req_index: int, hit_l1: int, hit_l2: int, refused: bool, t_ms: int) -> None:
        req = self.workload.requests[req_index]
        m = self.metrics
        m.admitted(rid, req_index, len(req.hash_ids), req.input_length, hit_l1, hit_l2)
        m.loadbacks_refused += refused
        if m.requests % self.sample_every == 0:
            m.sample(t_ms, self.cluster.state)
        if self.on_progress is not None:
            self.on_progress(m.requests)

    def _uncached(self, live: _Live) -> None:
        """The pages did not fit: the request is not cached (its pages count as recomputed)."""
        self.cluster.run(abort, live.rid)
        self.metrics.requests_uncached += 1
        self.metrics.pages_uncached += len(live.tokens) - live.hits

    def _sync(self) -> bool:
        """A sync point: the MIN over the ranks' finished writes, Commit, the rollback of
        backups pending too long, and the replicated-digest comparison. Returns whether
        anything was committed or rolled back."""
        c = self.cluster
        changed = False
        if c.state.writes:
            if c.learn_min():
                c.run(commit)
                changed = True
            due = self._overdue()
            if due:
                c.run(rollback, due)
                self._cancel(set(due))
                changed = True
        c.check_agreement()
        return changed

    # ---- serial ------------------------------------------------------------------------------------------
    def _run_serial(self) -> None:
        c = self.cluster
        R = self.cfg.R
        abort_p = self.faults.abort
        for index in range(len(self.workload.requests)):
            c.tick = index
            live, _, _ = self._admit(index, index, 0, index)
            if abort_p and self.rng_faults.random() < abort_p:
                c.run(abort, index)
                self.metrics.requests_aborted += 1
                self.metrics.faults["abort"] += 1
                continue
            ok, _ = c.run(insert, index, self.wt_backup)
            while not ok and self.wb:
                if not c.run(write_back, index):
                    break
                self.metrics.write_back_waits += 1
                self._drain_serial(R)
                ok, _ = c.run(insert, index, False)
            if ok:
                c.run(finish, index)
                self.metrics.requests_finished += 1
            else:
                self._uncached(live)
            self._drain_serial(R)
        self.ticks = len(self.workload.requests)

    def _drain_serial(self, R: int) -> None:
        """Every rank finishes every submitted write, then a sync point commits them."""
        c = self.cluster
        for r in range(R):
            while c.state.write_done[r] < len(c.state.writes):
                c.rank_step(r, T("WriteDone", rank=r))
        self._sync()

    # ---- timed -------------------------------------------------------------------------------------------
    def _run_timed(self) -> None:
        tm = self.timing
        reqs = self.workload.requests
        R = self.cfg.R
        self.heap: list[tuple[int, int, int, object]] = []
        self.seq = 0
        self.work = 0  # events in the heap other than disk recoveries (which alone do not keep a run going)
        self.live: dict[int, _Live] = {}
        self.waiting: dict[int, _Live] = {}
        self.queued: list[int] = []  # with L3: arrived, not matched yet (rid order)
        self.jobs: list[deque[_Job]] = [deque() for _ in range(R)]
        self.busy_ms = [0.0] * R
        self.gather_busy_ms = [0.0] * R  # each rank's slab -> staging copies
        self.disk_busy_ms = [0.0] * R  # each rank's disk, writes and reads in submit order
        self.reserved_at: dict[int, int] = {}
        self.order = sorted(range(len(reqs)), key=lambda i: (reqs[i].timestamp, i))
        f = self.faults
        rf = self.rng_faults
        burst_left, burst_ms = 0, 0
        for rid, i in enumerate(self.order):
            req = reqs[i]
            t = req.timestamp
            if burst_left:
                t, burst_left = burst_ms, burst_left - 1
            elif f.burst and rf.random() < f.burst:
                burst_left, burst_ms = BURST_SIZE, t
                self.metrics.faults["burst"] += 1
            self._push(self._tick(t), ARRIVE, rid)
            if f.abort and rf.random() < f.abort:
                expected = len(req.hash_ids) * self.workload.block_tokens / tm.prefill_tokens_per_ms
                expected += req.output_length * tm.tick_ms
                self._push(self._tick(t + 1 + rf.random() * expected), ABORT, rid)
        c = self.cluster
        self.disk_drawn: int | None = None  # tick of the last disk draws
        self.disk_up_since = [0] * R  # tick each disk last came back
        while self.work:
            tick = self.heap[0][0]
            c.tick = self.metrics.tick = tick
            self.ticks += 1
            batch = []
            work = False
            while self.heap and self.heap[0][0] == tick:
                e = heapq.heappop(self.heap)
                recover = e[1] == DISK and e[3].what == "recover"  # type: ignore[union-attr]
                self.work -= not recover
                work |= not recover
                batch.append(e)
            if f.disk and work:
                # only iterations with work draw: a tick that only brings a disk back must
                # not draw for the others, or disks failing and recovering in turn would
                # keep every tick of an idle gap alive (with two or more ranks)
                self._disk_faults(tick)
            k = 0
            while k < len(batch) and batch[k][1] <= DISK:
                if batch[k][1] == WRITE:
                    self._write_done(*batch[k][3])  # type: ignore[misc]
                else:
                    self._disk_step(batch[k][3])  # type: ignore[arg-type]
                k += 1
            freed = self._sync()
            for _, kind, _, payload in batch[k:]:
                if kind == FINISH:
                    freed |= self._finish(payload)  # type: ignore[arg-type]
                elif kind == ABORT:
                    freed |= self._abort_fault(payload)  # type: ignore[arg-type]
                elif kind == INSERT:
                    if self.waiting and freed:
                        self._retry_waiting(tick)
                        freed = False
                    self._prefill_done(payload, tick)  # type: ignore[arg-type]
                elif kind == ARRIVE:
                    if self.waiting and freed:
                        self._retry_waiting(tick)
                        freed = False
                    self._arrive(payload, tick)  # type: ignore[arg-type]
                elif kind == WAKE:
                    freed |= bool(self.waiting) and any(w.deadline <= tick for w in self.waiting.values())
            if self.waiting and freed:
                self._retry_waiting(tick)
            if self.prep.l3:
                self._l3_tick(tick)
        self.end_ms = self.cluster.tick * tm.tick_ms
        self._sync()
        s = self.cluster.state
        if self.live or s.writes or s.spills or s.reloads or s.reload_candidates or s.spill_queue:
            raise RuntimeError(
                f"simulator bug: the run ended with live requests {sorted(self.live)[:5]}, pending writes, "
                f"or L3 work left ({len(s.spills)} spills, {len(s.reloads)} reloads, {len(s.spill_queue)} queued)"
            )

    def _tick(self, ms: float) -> int:
        return math.ceil(ms / self.timing.tick_ms)

    def _push(self, tick: int, kind: int, payload: object) -> None:
        self.seq += 1
        self.work += not (kind == DISK and payload.what == "recover")  # type: ignore[attr-defined]
        heapq.heappush(self.heap, (tick, kind, self.seq, payload))

    def _arrive(self, rid: int, tick: int) -> None:
        index = self.order[rid]
        req = self.workload.requests[index]
        out_pages = self.workload.out_pages(req)
        if self.prep.l3:
            # the request waits for the L3 collective of this tick before it can match
            self.cluster.run(arrive, rid, req.hash_ids, out_pages, True)
            self.live[rid] = _Live(rid, index, req.hash_ids, matched=False)
            self.queued.append(rid)
            return
        live, hit_l1, hit_l2 = self._admit(rid, index, out_pages, tick * self.timing.tick_ms)
        self.live[rid] = live
        self._prefill(rid, hit_l1, hit_l2, tick)

    def _prefill(self, rid: int, hit_l1: int, hit_l2: int, tick: int) -> None:
        """The forward pass of the pages it missed (and the load-back) ends its prefill."""
        tm = self.timing
        req = self.workload.requests[self.order[rid]]
        miss = len(req.hash_ids) - hit_l1 - hit_l2
        ms = miss * self.workload.block_tokens / tm.prefill_tokens_per_ms
        ms += -(-hit_l2 // self.cfg.R) * tm.load_ms_per_page
        self._push(max(tick + 1, self._tick(tick * tm.tick_ms + ms)), INSERT, rid)

    def _prefill_done(self, rid: int, tick: int) -> None:
        live = self.live.get(rid)
        if live is None:
            return  # aborted meanwhile
        ok, reserved = self.cluster.run(insert, rid, self.wt_backup)
        if ok:
            self._decode(live, tick)
            self._submit(reserved, tick)
        elif self.wb:
            live.deadline = tick + self._tick(self.timing.write_back_wait_ms)
            self.waiting[rid] = live
            self.metrics.write_back_waits += 1
            self._push(live.deadline, WAKE, None)
            self._write_back_more(live, tick)
        else:
            self._drop_uncached(live)

    def _write_back_more(self, live: _Live, tick: int) -> None:
        reserved = self.cluster.run(write_back, live.rid)
        self._submit(reserved, tick)
        if not reserved and not self.cluster.state.writes:
            # nothing is being written back and nothing could be: it will never fit
            self.waiting.pop(live.rid, None)
            self._drop_uncached(live)

    def _retry_waiting(self, tick: int) -> None:
        for rid in sorted(self.waiting):
            live = self.waiting[rid]
            ok, _ = self.cluster.run(insert, rid, False)
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
        self._uncached(live)

    def _decode(self, live: _Live, tick: int) -> None:
        out = self.workload.requests[live.index].output_length
        self._push(tick + max(1, out), FINISH, live.rid)

    def _finish(self, rid: int) -> bool:
        if self.live.pop(rid, None) is None:
            return False
        self.cluster.run(finish, rid)
        self.metrics.requests_finished += 1
        return True

    def _abort_fault(self, rid: int) -> bool:
        live = self.live.pop(rid, None)
        if live is None:
            return False
        self.waiting.pop(rid, None)
        self.cluster.run(abort, rid)
        if not live.matched:
            # aborted while it waited for the L3 collective or a reload: it counts as a
            # request that hit nothing, so that every request is counted once
            self.queued.remove(rid)
            self._admitted(rid, live.index, 0, 0, False, self.cluster.tick * self.timing.tick_ms)
        self.metrics.requests_aborted += 1
        self.metrics.faults["abort"] += 1
        return True

    # ---- L3 ------------------------------------------------------------------------------------------------
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
            spills, reloads = c.run(l3_drain)
            self._start_spills(spills, tick)
            self._start_reloads(reloads, tick)
        if collective:
            c.check_agreement(l3_learnt=True)
        s = c.state
        if any(op.waiters for op in s.reloads):
            # the reload ttl counts ticks: visit every tick while a request is held
            self._push(tick + 1, WAKE, None)
        still = []
        for rid in self.queued:
            if held(c.state, rid):
                still.append(rid)
                continue
            live = self.live[rid]
            hit_l1, hit_l2, refused = c.run(match, rid, self.prep.l2)
            live.matched = True
            live.hits = hit_l1 + hit_l2
            self._admitted(rid, live.index, hit_l1, hit_l2, refused, tick * self.timing.tick_ms)
            self._prefill(rid, hit_l1, hit_l2, tick)
        self.queued = still

    def _disk_ms(self, pages: int, per_page: float) -> float:
        """A rank's disk operation on its `pages` pages: jittered, SLOW_FACTOR slower under a slow fault."""
        tm = self.timing
        ms = max(0.1, pages * per_page) * self.rng_disk.uniform(1 - tm.disk_jitter, 1 + tm.disk_jitter)
        if self.faults.slow and self.rng_disk_faults.random() < self.faults.slow:
            ms *= SLOW_FACTOR
            self.metrics.faults["slow"] += 1
        return ms

    def _at(self, tick: int, ms: float) -> int:
        return max(tick + 1, self._tick(ms))

    def _start_spills(self, ops: tuple[SpillOp, ...], tick: int) -> None:
        """Each rank gathers the pages it owns (object-local index i mod R) out of the slab,
        then its disk writes them, after the writes and reads submitted before."""
        tm = self.timing
        R = self.cfg.R
        now = tick * tm.tick_ms
        for op in ops:
            n = len(op.hashes)
            for r in range(R):
                owned = len(range(r, n, R))
                start = max(now, self.gather_busy_ms[r])
                gathered = start + max(0.1, owned * tm.gather_ms_per_page) * self.rng_disk.uniform(1 - tm.disk_jitter, 1 + tm.disk_jitter)
                self.gather_busy_ms[r] = gathered
                written = max(gathered, self.disk_busy_ms[r]) + self._disk_ms(owned, tm.disk_write_ms_per_page)
                self.disk_busy_ms[r] = written
                self._push(self._at(tick, gathered), DISK, _DiskJob(r, "gather", op.node))
                self._push(self._at(tick, written), DISK, _DiskJob(r, "write", op.node))

    def _start_reloads(self, ops: tuple[ReloadOp, ...], tick: int) -> None:
        """Each rank's disk reads the pages it owns of each new reload into the slab."""
        tm = self.timing
        R = self.cfg.R
        now = tick * tm.tick_ms
        for op in ops:
            n = len(op.hashes)
            for r in range(R):
                done = max(now, self.disk_busy_ms[r]) + self._disk_ms(len(range(r, n, R)), tm.disk_read_ms_per_page)
                self.disk_busy_ms[r] = done
                self._push(self._at(tick, done), DISK, _DiskJob(r, "read", op.key))

    def _disk_step(self, job: _DiskJob) -> None:
        """Rank `job.rank` finishes one L3 step; `ok` is what the rank's state implies."""
        c = self.cluster
        s = c.state
        r = job.rank
        if job.what == "recover":
            c.rank_step(r, T("DiskRecover", rank=r))
            self.disk_up_since[r] = c.tick
            return
        if job.what == "gather":
            k, fifo, name = s.spill_gathered[r], s.spills, "spills"
        elif job.what == "write":
            k, fifo, name = len(s.spill_done[r]), s.spills, "spills"
        else:
            k, fifo, name = len(s.reload_done[r]), s.reloads, "reloads"
        ident = (fifo[k].node if name == "spills" else fifo[k].key) if k < len(fifo) else None  # type: ignore[union-attr]
        if ident != job.op:
            raise RuntimeError(f"simulator bug: rank {r}'s disk engine ({job.what} of {job.op}) and the model's {name} disagree")
        if job.what == "gather":
            c.rank_step(r, T("SpillGathered", rank=r))
        elif job.what == "write":
            c.rank_step(r, T("SpillDone", rank=r, ok=spill_write_ok(s, r)))
        else:
            c.rank_step(r, T("ReloadDone", rank=r, ok=reload_read_ok(s, r)))

    def _disk_faults(self, tick: int) -> None:
        """Each working disk fails with probability `disk` per tick, drawn once over the
        ticks it has been up since the previous draws (1 at the first), and comes back
        after a drawn number of ticks."""
        last = self.disk_drawn
        self.disk_drawn = tick
        q = 1 - self.faults.disk
        rd = self.rng_disk_faults
        c = self.cluster
        for r in range(self.cfg.R):
            if not c.state.disk_ok[r]:
                continue
            elapsed = 1 if last is None else tick - max(last, self.disk_up_since[r])
            if rd.random() < 1 - q**elapsed:
                c.rank_step(r, T("DiskFail", rank=r))
                self.metrics.faults["disk"] += 1
                self._push(tick + rd.randint(*DISK_DOWN_TICKS), DISK, _DiskJob(r, "recover", 0))

    # ---- per-rank backup writes ------------------------------------------------------------------------
    def _submit(self, nodes: tuple[int, ...], tick: int) -> None:
        """Hand each new backup to every rank's copy engine (FIFO, like `writes`): a
        rank copies the node's pages in its lane, taking a seeded time of its own."""
        if not nodes:
            return
        tm = self.timing
        R = self.cfg.R
        f = self.faults
        rt, rf = self.rng_timing, self.rng_faults
        now_ms = tick * tm.tick_ms
        s = self.cluster.state
        for nid in nodes:
            self.reserved_at[nid] = tick
            self._push(tick + self._tick(tm.write_timeout_ms), WAKE, None)
            lanes = [0] * R
            for p in s.nodes[nid].dev:
                lanes[p % R] += 1
            for r in range(R):
                start = max(now_ms, self.busy_ms[r])
                if f.stall and rf.random() < f.stall:
                    start += STALL_MS
                    self.metrics.faults["stall"] += 1
                ms = max(0.1, lanes[r] * tm.write_ms_per_page) * rt.uniform(1 - tm.write_jitter, 1 + tm.write_jitter)
                if f.slow and rf.random() < f.slow:
                    ms *= SLOW_FACTOR
                    self.metrics.faults["slow"] += 1
                self.busy_ms[r] = start + ms
                job = _Job(nid)
                self.jobs[r].append(job)
                self._push(max(tick + 1, self._tick(start + ms)), WRITE, (r, job))

    def _write_done(self, r: int, job: _Job) -> None:
        if job.cancelled:
            return
        q = self.jobs[r]
        s = self.cluster.state
        if q[0] is not job or s.writes[s.write_done[r]] != job.node:
            raise RuntimeError(f"simulator bug: rank {r}'s copy engine and the model's writes disagree")
        q.popleft()
        self.cluster.rank_step(r, T("WriteDone", rank=r))

    def _overdue(self) -> tuple[int, ...]:
        """Backups pending longer than the write timeout (never in the serial schedule,
        whose writes all finish before its sync point)."""
        if self.prep.schedule != "timed":
            return ()
        limit = self.cluster.tick - self._tick(self.timing.write_timeout_ms)
        return tuple(nid for nid in self.cluster.state.writes if self.reserved_at[nid] <= limit)

    def _cancel(self, nodes: set[int]) -> None:
        """Rolled-back backups leave the copy engines that have not written them yet."""
        for r, q in enumerate(self.jobs):
            if any(j.node in nodes for j in q):
                for j in q:
                    if j.node in nodes:
                        j.cancelled = True
                self.jobs[r] = deque(j for j in q if not j.cancelled)
