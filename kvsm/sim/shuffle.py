"""The random schedule (`--schedule random`): the timed schedule's requests, copies, disks
and faults, with every choice the reference leaves open drawn from the seed.

The reference fixes the order of the replicated steps (every rank runs the same
scheduler) but not when each rank's device work ends, nor where the scheduler's own
loop stands meanwhile. Where the timed schedule takes the order its clock gives, this
one, with probability `bias` at each choice (the run's bias: `random:B`, or drawn from
the seed out of `options.BIASES`):

- postpones (with half that probability) a rank's queue of completions of one kind (its copy engine's `WriteDone`s,
  its load stream's `LoadDone`s, its disk's gathers, writes, reads and recovery) by a
  few ticks, or past the write timeout, keeping the queue's own order;
- interleaves a tick's completions, the disk fault draws, the sync point and the
  requests' steps (finishes, aborts, inserts, arrivals) in a drawn order, instead of
  completions first, then the sync point, then the requests' steps in kind order;
- enters the commit collective rank by rank in a drawn order, a rank that has not
  entered yet finishing writes while others wait in it, or leaves the commit to a
  later sync point;
- skips a tick's L3 collective (the ranks' spill and reload progress reaches the
  others later);
- lets an arrived request wait for a later step (or tick) before it matches, as the
  L3 schedule always does;
- takes a step the spec allows at any time: a `Split` a live request's key demands,
  an `EvictDevice` or `EvictHost` of the first victim, a `Reserve` of the first node
  eligible for a backup (write-through; its copies go to the engines), or a `Rollback`
  of the oldest attached backup (its copies leave the engines); which of these kinds a
  run takes at all is drawn once per run, each in or out.

What the reference does fix is kept: a request's insert waits for every rank's copies
of its own load-back, and the other ranks learn a landed load-back before the next
replicated step (a lock it held is released on every replica at once). Every draw
comes from a stream of its own (`kvsm-sim:schedule:<seed>`), so the timed schedule's
timing and fault draws are the same for the same seed.
"""

from __future__ import annotations

import random
from typing import Any

from ..transitions import REGISTRY, Transition
from ..transitions.reserve import backup_nodes
from . import procedures as proc
from .cluster import View
from .events import ABORT, ARRIVE, DISK, FINISH, INSERT, LOAD, WAKE, WRITE, Event
from .options import BIASES

# how far a postponed queue of completions moves: a few ticks, or (LONG of the time)
# past the default write timeout (100 ticks), so that backups are rolled back
SHORT_DELAY = (1, 6)
LONG_DELAY = (100, 160)
LONG = 0.02
# steps the spec allows whenever they are enabled, taken at a drawn point of a tick
# (the kind is drawn by these weights, and taken when enabled: a rollback undoes the
# backups that later load-backs and spills need, so it is rare)
FREE_STEPS = {"Split": 3.0, "EvictDevice": 3.0, "EvictHost": 2.0, "Reserve": 1.5, "Rollback": 0.1}
FREE_PER_TICK = 4  # chances per tick of a free step, each taken with probability bias


def _rank(e: Event) -> int:
    return e.payload if e.kind == LOAD else e.payload.rank


def take_free(v: View, name: str) -> Transition | None:
    """The first enabled instance of `name` on this view's state, applied (None: none)."""
    spec = REGISTRY[name]
    for t in spec.candidates(v.state):
        v.apply(t)
        return t
    return None


class RandomSchedule:
    """The random schedule as a part of `Simulation` (kvsm.sim.scheduler), whose timed
    parts (arrivals, copy engines, disks, the request lifecycle) it drives."""

    def init_random(self: Any) -> None:
        """The schedule's stream and the run's bias (before the log's header is written)."""
        self.rng = random.Random(f"kvsm-sim:schedule:{self.seed}")
        self.bias = self.prep.bias if self.prep.bias is not None else self.rng.choice(BIASES)
        # the free steps this run takes: each kind in or out (as swarm testing draws a
        # run's features: a run without host evictions and rollbacks keeps its backups
        # for load-backs, one with them reaches their orders)
        self.free_kinds = {k: w for k, w in FREE_STEPS.items() if self.rng.random() < 0.5}
        if self.cluster.state.config.backup_trigger == "insert":
            # no Reserve of its own: Insert takes the backups (drawn all the same, so that
            # the stream is the one of backup_trigger = "any")
            self.free_kinds.pop("Reserve", None)

    def _run_random(self: Any) -> None:
        rng = self.rng
        self.held: dict[tuple[int, int], list[Event]] = {}  # (kind, rank) -> completions held back
        self.hold_until: dict[tuple[int, int], int] = {}
        self.loads_landed = [0] * self.cluster.R
        events = self.events
        for tick, kind, rid in self.arrivals.events:
            events.push(tick, kind, rid)
        c = self.cluster
        while events.work or self._holds_work():
            tick, batch, work = events.pop_tick()
            c.tick = self.metrics.tick = tick
            self.ticks += 1
            steps = self._order(tick, batch, work)
            freed = False
            rest = list(steps)
            while rest:
                kind, e = rest.pop(0)
                if kind == "rank":
                    self._complete(e)
                elif kind == "faults":
                    self.disks.draw_faults(tick)
                elif kind == "sync":
                    freed |= self._random_sync(rest)
                elif kind == "free":
                    freed |= self._free_step(tick)
                elif kind == "match":
                    self.match_queued(tick)
                else:
                    freed = self._request_step(e, tick, freed)
            if self.waiting and freed:
                self._retry_waiting(tick)
            if self.prep.l3:
                s = c.state
                if rng.random() < self.bias and (s.spills or s.reloads or s.reload_candidates or s.spill_queue or self.queued):
                    events.push(tick + 1, WAKE, None)  # the collective comes at a later tick
                else:
                    self._l3_tick(tick)
        self._end_run()

    def _holds_work(self: Any) -> bool:
        """Whether a held-back queue holds work. Its wake-up counts as work only if the
        queue did when it was held: a disk's recovery (not work) held back may be joined
        by the same rank's gathers, writes and reads of a later tick, which are work, and
        the run must go on until they are taken (else it ends stuck with their spill or
        reload in flight)."""
        return any(e.work for held in self.held.values() for e in held)

    def _order(self, tick: int, batch: list[Event], work: bool) -> list[tuple[str, Any]]:
        """This tick's steps in the order they are taken: each rank's queue of completions
        (some held back), the disk fault draws, the sync point, the requests' steps and the
        free steps; in the timed order unless the bias draws another."""
        rng, b = self.rng, self.bias
        queues: dict[tuple[int, int], list[Event]] = {}
        released = []  # completions held back until now: older than this tick's
        for key, held in list(self.held.items()):
            if self.hold_until[key] <= tick:
                queues[key] = held
                released += held
                del self.held[key], self.hold_until[key]
        others, fresh = [], []
        for e in batch:
            if e.kind <= DISK:
                key = (e.kind, _rank(e))
                if key in self.held:
                    self.held[key].append(e)
                else:
                    queues.setdefault(key, []).append(e)
                    fresh.append(e)
            else:
                others.append(e)
        for key in sorted(queues):
            if rng.random() < b / 2:
                lo, hi = LONG_DELAY if rng.random() < LONG else SHORT_DELAY
                until = tick + rng.randint(lo, hi)
                self.held[key], self.hold_until[key] = queues.pop(key), until
                self.events.push(until, WAKE, None, work=any(e.work for e in self.held[key]))
        # the timed order: completions by kind, then as they were pushed (bias 0: the timed schedule's)
        rank_steps = [("rank", e) for e in released + fresh if (e.kind, _rank(e)) in queues]
        faults = [("faults", None)] if self.faults.disk and work else []
        req_steps = [("request", e) for e in others]
        frees = [("free", None)] * sum(rng.random() < b for _ in range(FREE_PER_TICK))
        if self.queued and not self.prep.l3:
            frees.append(("match", None))
        if rng.random() >= b:
            return faults + rank_steps + [("sync", None)] + req_steps + frees
        # a drawn interleaving; each rank's queue keeps its order, and so do the arrivals
        # (request ids are given in arrival order)
        lanes: list[list[tuple[str, Any]]] = [[("rank", e) for e in queues[k]] for k in sorted(queues)]
        lanes += [[x] for x in faults + frees + [("sync", None)]]
        lanes += [[x] for x in req_steps if x[1].kind != ARRIVE]
        lanes.append([x for x in req_steps if x[1].kind == ARRIVE])
        out: list[tuple[str, Any]] = []
        while lanes:
            lane = rng.choice([x for x in lanes if x])
            out.append(lane.pop(0))
            lanes = [x for x in lanes if x]
        return out

    def _complete(self, e: Event) -> None:
        if e.kind == WRITE:
            self.copies.write_done(e.payload)
        elif e.kind == LOAD:
            self.copies.load_done(e.payload)
            self.loads_landed[e.payload] += 1
            # the other ranks learn it before the next replicated step: the lock the
            # load held is released on every replica together
            self.cluster.learn_loads()
        else:
            self.disks.step(e.payload)

    def _request_step(self, e: Event, tick: int, freed: bool) -> bool:
        if e.kind == FINISH:
            return freed | self._finish(e.payload)
        if e.kind == ABORT:
            return freed | self._abort_fault(e.payload)
        if e.kind == WAKE:
            return freed | (bool(self.waiting) and any(w.deadline <= tick for w in self.waiting.values()))
        if e.kind == INSERT:
            need = self.load_of.get(e.payload)
            if need is not None and min(self.loads_landed) < need:
                # its forward pass waits for every rank's copies of its load-back
                self.events.push(tick + 1, INSERT, e.payload)
                return freed
            self.load_of.pop(e.payload, None)
        if self.waiting and freed:
            self._retry_waiting(tick)
            freed = False
        if e.kind == INSERT:
            self._prefill_done(e.payload, tick)
        elif e.kind == ARRIVE:
            self._arrive(e.payload, tick)
        return freed

    def _random_sync(self, rest: list[tuple[str, Any]]) -> bool:
        """A sync point whose commit collective the ranks enter one by one in a drawn
        order; before a rank enters, the ranks that have not may finish writes of this
        tick (taken out of `rest`). With probability `bias` the commit waits for a later
        sync point."""
        c = self.cluster
        rng, b = self.rng, self.bias
        if b == 0:
            return self.sync()  # the timed schedule's
        if not c.state.writes or self.cfg.commit_call == "atomic" or rng.random() < b / 2:
            if c.state.writes and self.cfg.commit_call != "atomic":
                # the commit waits: only the rest of the sync point
                c.learn_loads()
                changed = self._rollback_overdue()
                c.check_agreement()
                return changed
            return self.sync()
        c.learn_loads()
        m = c.learn_min()
        order = list(range(c.R))
        rng.shuffle(order)

        def before_call(r: int, entered: set[int]) -> None:
            for item in list(rest):
                kind, e = item
                if kind == "rank" and e.kind == WRITE and e.payload.rank not in entered and rng.random() < 0.5:
                    rest.remove(item)
                    self._complete(e)

        entered = c.commit_calls(order, before_call)
        changed = m > 0 or min(c.state.write_done) > 0
        if entered:
            c.run(proc.commit)
        changed |= self._rollback_overdue()
        c.check_agreement()
        return changed

    def _rollback_overdue(self) -> bool:
        due = self.copies.overdue()
        if due:
            self.cluster.run(proc.rollback, due)
            self.copies.cancel(set(due))
        return bool(due)

    def _enabled(self, name: str, s: Any) -> bool:
        if name == "Reserve":
            return self.wt_backup and next(iter(backup_nodes(s)), None) is not None
        if name == "Rollback":
            return any(n in s.pending for n in s.writes)
        return next(iter(REGISTRY[name].candidates(s)), None) is not None

    def _free_step(self, tick: int) -> bool:
        """One step the spec allows whenever enabled, of a drawn kind (none when that kind
        is not enabled); whether it freed room."""
        s = self.cluster.state
        if not self.free_kinds:
            return False
        name = self.rng.choices(list(self.free_kinds), list(self.free_kinds.values()))[0]
        if not self._enabled(name, s):
            return False
        if name == "Reserve":
            nid = min(backup_nodes(s))
            if self.cluster.run(proc.try_reserve, nid):
                self.copies.submit((nid,), tick)
            return False
        if name == "Rollback":
            nodes = tuple(n for n in s.writes if n in s.pending)[:1]
            if not nodes:
                return False
            self.cluster.run(proc.rollback, nodes)
            self.copies.cancel(set(nodes))
            return True
        t = self.cluster.run(take_free, name)
        return t is not None and name != "Split"
