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
  committed at sync points, and the faults of `--faults`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..invariants import violations
from ..state import ClusterState, Rejected
from ..transitions import Transition
from ..transitions.evict import host_run
from .cluster import Cluster, View
from .faults import BURST_SIZE, SLOW_FACTOR, STALL_MS
from .metrics import Metrics
from .options import Prepared, Timing

T = Transition.make


class SimInvariantError(RuntimeError):
    """`--check` found a violated invariant; the message names the transition."""


def _depth(s: ClusterState, nid: int) -> int:
    """Pages from the root down to node `nid`."""
    nodes = s.nodes
    d = 0
    while nid:
        n = nodes[nid]
        d += len(n.key)
        nid = n.parent
    return d


# ---- replicated procedures: each decides from one rank's view only ------------------------------


def admit(v: View, rid: int, tokens: tuple[int, ...], out_pages: int, l2: bool) -> tuple[int, int, bool]:
    """Arrive and Match; load the host hit back when it is worth it (at least the
    config's `load_back_threshold` tokens). Returns (L1 hit pages, pages loaded back,
    whether a worthwhile load-back was refused for lack of device room)."""
    v.apply(T("Arrive", rid=rid, tokens=tokens, out_pages=out_pages))
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
    find host room is skipped and tried again on the node's next hit. Returns whether
    the request was cached and the nodes whose backup started."""
    try:
        s = v.apply(T("Insert", rid=rid))
    except Rejected:
        return False, ()
    if not backup:
        return True, ()
    reserved = []
    for nid in reversed(s.path_to_root(s.requests[rid].node)):
        if nid in v.state.backup_index:
            try:
                v.apply(T("Reserve", node=nid))
            except Rejected:
                continue
            reserved.append(nid)
    return True, tuple(reserved)


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
        try:
            v.apply(T("Reserve", node=nid))
        except Rejected:
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


# ---- the loop --------------------------------------------------------------------------------------------

# event kinds, in the order an iteration handles them
WRITE, WAKE, FINISH, ABORT, INSERT, ARRIVE = range(6)


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
        if self.prep.schedule == "serial":
            self._run_serial()
        else:
            self._run_timed()

    # ---- shared steps ----------------------------------------------------------------------------------
    def _admit(self, rid: int, req_index: int, out_pages: int, t_ms: int) -> tuple[_Live, int, int]:
        req = self.workload.requests[req_index]
        hit_l1, hit_l2, refused = self.cluster.run(admit, rid, req.hash_ids, out_pages, self.prep.l2)
        m = self.metrics
        m.admitted(req_index, len(req.hash_ids), req.input_length, hit_l1, hit_l2)
        m.loadbacks_refused += refused
        if m.requests % self.sample_every == 0:
            m.sample(t_ms, self.cluster.state)
        if self.on_progress is not None:
            self.on_progress(m.requests)
        return _Live(rid, req_index, req.hash_ids, hit_l1 + hit_l2), hit_l1, hit_l2

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
        self.heap: list[tuple[int, int, int, object]] = []
        self.seq = 0
        self.live: dict[int, _Live] = {}
        self.waiting: dict[int, _Live] = {}
        self.jobs: list[deque[_Job]] = [deque() for _ in range(self.cfg.R)]
        self.busy_ms = [0.0] * self.cfg.R
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
        while self.heap:
            tick = self.heap[0][0]
            c.tick = tick
            self.ticks += 1
            batch = []
            while self.heap and self.heap[0][0] == tick:
                batch.append(heapq.heappop(self.heap))
            k = 0
            while k < len(batch) and batch[k][1] == WRITE:
                self._write_done(*batch[k][3])  # type: ignore[misc]
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
        self.end_ms = self.cluster.tick * tm.tick_ms
        self._sync()
        if self.live or self.cluster.state.writes:
            raise RuntimeError(f"simulator bug: the run ended with live requests {sorted(self.live)[:5]} or pending writes")

    def _tick(self, ms: float) -> int:
        return math.ceil(ms / self.timing.tick_ms)

    def _push(self, tick: int, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (tick, kind, self.seq, payload))

    def _arrive(self, rid: int, tick: int) -> None:
        tm = self.timing
        index = self.order[rid]
        req = self.workload.requests[index]
        now_ms = tick * tm.tick_ms
        live, hit_l1, hit_l2 = self._admit(rid, index, self.workload.out_pages(req), now_ms)
        self.live[rid] = live
        miss = len(req.hash_ids) - hit_l1 - hit_l2
        ms = miss * self.workload.block_tokens / tm.prefill_tokens_per_ms
        ms += -(-hit_l2 // self.cfg.R) * tm.load_ms_per_page
        self._push(max(tick + 1, self._tick(now_ms + ms)), INSERT, rid)

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
        if self.live.pop(rid, None) is None:
            return False
        self.waiting.pop(rid, None)
        self.cluster.run(abort, rid)
        self.metrics.requests_aborted += 1
        self.metrics.faults["abort"] += 1
        return True

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
