"""The owner-lane planner (docs/model.md).

`LoadBack` must free `deficit[lane]` device pages in each lane. Greedy: each round
take the candidate that covers the most remaining deficit (`sum over lanes of
min(pages in lane, deficit)`), ties broken by the victim order; when no candidate
covers anything, take the one whose eviction frees the ancestor that covers the most
(its "unlock contribution"). After a victim, its parent becomes a candidate once all
its children on L1 are planned.

`plan_reference` re-implements the seed's `_plan_cp_load_back_owner_lane_evictions`
from its behaviour (rescan every candidate for every victim: O(victims x candidates
x R)); it is the test oracle. `plan` chooses the same victims in the same order in
O((victims + candidates) log candidates): a candidate's contribution can only fall as
deficits fall, so a heap keyed by a stale contribution is a valid lower bound on its
true key and only the top needs re-checking (lazy greedy). Unlock contributions are
not monotone; they are needed only when nothing contributes directly, and are then
computed exactly over the (usually few) non-contributing candidates.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .config import Config
from .state import ROOT_ID, Node, lane_of
from .victims import held_on_l1, rank_order_key, sync_write_back, victim_order


@dataclass(frozen=True)
class Plan:
    victims: tuple[int, ...]
    remaining: tuple[int, ...]  # deficit left per lane (all zero when the plan suffices)


class TreeView:
    """The planner's view of a tree: device-eviction eligibility exactly as the model
    defines it (see `kvsm.victims.dev_victim_key`), over any node lookup."""

    def __init__(self, get: Callable[[int], Node], is_pending: Callable[[int], bool], cfg: Config, view: int | None = None) -> None:
        self.get = get
        self.view = view  # the rank whose victim order breaks ties (None: the replicated one)
        self.is_pending = is_pending
        self.R = cfg.R
        self.write_through = cfg.policy == "write_through"
        self.cfg = cfg
        self.orphans = cfg.unbacked_evict == "reference"
        # under write_back_evict = "sync" an unbacked victim is written back inside the
        # load-back and then evicted as a backed node: a victim, kept in the tree
        self.sync = sync_write_back(cfg)
        self._counts: dict[int, tuple[int, ...]] = {}

    def counts(self, nid: int) -> tuple[int, ...]:
        c = self._counts.get(nid)
        if c is None:
            hist = [0] * self.R
            for p in self.get(nid).dev:
                hist[lane_of(p, self.R)] += 1
            c = self._counts[nid] = tuple(hist)
        return c

    def prio(self, nid: int) -> tuple:
        return rank_order_key(victim_order(self.get(nid), self.cfg), self.cfg, self.view)

    def parent(self, nid: int) -> int:
        return self.get(nid).parent

    def on_l1(self, nid: int) -> bool:
        return bool(self.get(nid).dev)

    def base(self, nid: int) -> bool:
        """Unlocked, on L1, no pending backup, and evictable under the policy."""
        if nid == ROOT_ID:
            return False
        n = self.get(nid)
        return bool(n.dev) and not held_on_l1(n, self.is_pending(nid), self.cfg) and (n.host is not None or self.write_through or self.sync)

    def after_plan(self, nid: int, planned: set[int] | frozenset[int]) -> bool:
        """Evictable once the planned victims are gone: every child on L1 is planned, and
        an unbacked node (deleted when evicted) keeps no child at all; under
        `unbacked_evict = "reference"` it may keep L2-only children (the reference's
        rule, which orphans them)."""
        if not self.base(nid):
            return False
        n = self.get(nid)
        strict = n.host is None and not self.orphans and not self.sync
        for cid in n.children.values():
            if cid in planned:
                if strict and self.get(cid).host is not None:
                    return False
            elif self.get(cid).dev or strict:
                return False
        return True


def _contribution(counts: tuple[int, ...], deficits: list[int]) -> int:
    return sum(min(c, d) for c, d in zip(counts, deficits))


def _unlock(view: TreeView, nid: int, deficits: list[int], planned: set[int]) -> int:
    a = view.parent(nid)
    while a != ROOT_ID:
        if a in planned:
            return 0
        if not view.on_l1(a):
            a = view.parent(a)
            continue
        if not view.base(a):
            return 0
        c = _contribution(view.counts(a), deficits)
        if c > 0:
            return c
        a = view.parent(a)
    return 0


def _new_candidate(view: TreeView, victim: int, planned: set[int]) -> int | None:
    a = view.parent(victim)
    while a != ROOT_ID:
        if a in planned:
            return None
        if view.after_plan(a, planned):
            return a
        if view.on_l1(a):
            return None
        a = view.parent(a)
    return None


def plan_reference(view: TreeView, deficits: Iterable[int], candidates: Iterable[int]) -> Plan:
    d = [max(0, int(v)) for v in deficits]
    planned: set[int] = set()
    victims: list[int] = []
    cands = set(candidates)
    while any(v > 0 for v in d):
        best: tuple[Any, int] | None = None
        for nid in list(cands):
            if nid in planned or not view.after_plan(nid, planned):
                continue
            counts = view.counts(nid)
            c = _contribution(counts, d)
            u = 0
            if c <= 0:
                u = _unlock(view, nid, d, planned)
            if c <= 0 and u <= 0:
                continue
            score = (-c, -u, view.prio(nid), nid)
            if best is None or score < best[0]:
                best = (score, nid)
        if best is None:
            break
        nid = best[1]
        victims.append(nid)
        planned.add(nid)
        cands.discard(nid)
        for lane, c in enumerate(view.counts(nid)):
            d[lane] = max(0, d[lane] - c)
        a = _new_candidate(view, nid, planned)
        if a is not None:
            cands.add(a)
    return Plan(tuple(victims), tuple(d))


def plan(view: TreeView, deficits: Iterable[int], candidates: Iterable[int]) -> Plan:
    d = [max(0, int(v)) for v in deficits]
    planned: set[int] = set()
    victims: list[int] = []
    heap: list[tuple] = []  # (-contribution at push time, prio, id)
    idle: set[int] = set()  # candidates that contribute nothing directly

    def push(nid: int) -> None:
        c = _contribution(view.counts(nid), d)
        if c > 0:
            heap.append((-c, view.prio(nid), nid))
        else:
            idle.add(nid)

    for nid in candidates:
        push(nid)
    heapq.heapify(heap)
    while any(v > 0 for v in d):
        chosen = None
        while heap:
            negc, pr, nid = heap[0]
            c = _contribution(view.counts(nid), d)
            if c == -negc:
                heapq.heappop(heap)
                chosen = nid
                break
            if c > 0:
                heapq.heapreplace(heap, (-c, pr, nid))
            else:
                heapq.heappop(heap)
                idle.add(nid)
        if chosen is None:
            best = None
            for nid in idle:
                u = _unlock(view, nid, d, planned)
                if u > 0:
                    score = (-u, view.prio(nid))
                    if best is None or score < best[0]:
                        best = (score, nid)
            if best is None:
                break
            chosen = best[1]
            idle.discard(chosen)
        victims.append(chosen)
        planned.add(chosen)
        for lane, c in enumerate(view.counts(chosen)):
            d[lane] = max(0, d[lane] - c)
        a = _new_candidate(view, chosen, planned)
        if a is not None:
            c = _contribution(view.counts(a), d)
            if c > 0:
                heapq.heappush(heap, (-c, view.prio(a), a))
            else:
                idle.add(a)
    return Plan(tuple(victims), tuple(d))
