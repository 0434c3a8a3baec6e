"""Checking every invariant along a run at speed (`kvsm replay --check`, `kvsm sim --check`,
`kvsm campaign`).

`kvsm.invariants.violations` recomputes invariants 1-10 from the whole state, which costs
time in proportion to the state; after every transition of a long run that dominates
everything else. A `Checker` instead checks after each transition only what that
transition can have broken: the nodes, requests, objects, pending backups, reload
candidates, device pages, host pages and disk entries it wrote. Which keys a
transition wrote comes from its transaction (`kvsm.tx.recent_writes`), which pages it
moved from those entries and its effects (`kvsm.effects`). Each invariant is restated as a
relation between an entry and its neighbours that, holding for every entry, gives the
invariant for the whole state (e.g. a node's lock equals the requests that stop at it,
plus its locked backup, plus its children's locks less theirs), so checking the
entries a transition wrote, and their neighbours, keeps the whole state checked.

Two relations need an index that the state does not keep: which node or request holds a
device page, and which object holds a host page. The checker keeps its own
(`_Shadow`), built from the whole state at the start and whenever the writes of a
transition are not known, and updated from every transition's writes.

The from-scratch check (`full_violations`, which decides what `violations` would say)
still runs: after every transition that is an agreement point (`Spec.agreement`:
Commit, SpillAck, ReloadAdmit), after every `every` transitions, after a transition
whose writes are not known (a state not produced by this thread's transactions), and
at the end. When it finds a violation that the
per-transition checks did not, the checker checks the states since the last clean
from-scratch check again, from scratch, and reports the first that fails, so a report
always names the transition that broke the state. Invariant 11 (Ownership, over the
transition's effects) is cheap and checked after every transition. The digest sums of
invariant 10 are checked from scratch only (they sum over the whole state).
"""

from __future__ import annotations

from collections import Counter
from itertools import cycle
from operator import itemgetter
from dataclasses import dataclass, field
from typing import Any, Callable

from . import content
from . import effects as fx
from .digest import MOD, free_page_hash, memo_hash, page_weight
from .digest import _MEMO as _HASH_MEMO  # the per-entry hash cache of `memo_hash`, read directly
from .digest_sums import COMPONENTS, CONTENT_COMPONENTS, MAP_COMPONENTS, value_hash
from .invariants import NAMES, step_violations, violations
from .state import QUEUED, MATCHED, ROOT_ID, ClusterState, backup_candidate, dev_victim_key, host_victim_key, lane_of
from .transitions import REGISTRY, Transition
from .tx import recent_writes

EVERY = 512  # transitions between two from-scratch checks when no agreement point comes sooner
INVARIANTS = tuple(f"{i} {NAMES[i]}" for i in sorted(NAMES))


@dataclass
class Finding:
    """A violation: `at` is the caller's label of the transition after which the state
    first broke an invariant (a log line, a transition number), `how` says which check
    found it: "step" (the checks after that transition), "full" (the from-scratch check
    after that transition) or "located" (a later from-scratch check; the states since
    the last clean one were checked again to find the first that fails)."""

    at: Any
    transition: Transition | None
    violations: list[str]
    how: str


@dataclass
class Stats:
    """What was evaluated: from-scratch checks, per-transition checks, and per invariant
    how many times each kind of check evaluated it."""

    full: int = 0
    step: int = 0
    per_invariant: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in INVARIANTS})

    def to_json(self) -> dict[str, Any]:
        return {
            "full_checks": self.full,
            "step_checks": self.step,
            "invariants": {k: dict(v) for k, v in self.per_invariant.items()},
        }


class Checker:
    """Checks a sequence of states, each produced from the previous by one transition.

    `start()` checks the first state from scratch; `step(t, after, at)` checks the state
    `t` produced from the previous one; `finish()` checks the last state from scratch.
    Each returns a `Finding` or None. `at` labels the transition in findings. The
    from-scratch check also runs after every agreement point (unless `at_agreement` is
    false, for measuring what those checks cost) and after `every` transitions; it is
    `full` (default `full_violations`)."""

    def __init__(
        self,
        state: ClusterState,
        every: int = EVERY,
        at_agreement: bool = True,
        full: Callable[[ClusterState], list[str]] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.at_agreement = at_agreement
        self.full = full if full is not None else full_violations
        self.state = state
        self.stats = Stats()
        self._shadow: _Shadow | None = None
        # states since the last clean from-scratch check: (label, transition, state)
        self._since: list[tuple[Any, Transition | None, ClusterState]] = []

    def start(self, at: Any = 0) -> Finding | None:
        v = self._full(self.state)
        return Finding(at, None, v, "full") if v else None

    def step(self, t: Transition, after: ClusterState, at: Any = None) -> Finding | None:
        before, self.state = self.state, after
        st = self.stats
        st.step += 1
        bad = step_violations(t.rank, after)
        st.per_invariant["11 Ownership"]["step"] += 1
        known = True
        if not bad:
            bad = self._local(before, after)
            known = bad is not None
        if bad:
            return Finding(at, t, bad, "step")
        self._since.append((at, t, after))
        if not known or (self.at_agreement and REGISTRY[t.name].agreement) or len(self._since) >= self.every:
            return self._checkpoint()
        return None

    def finish(self) -> Finding | None:
        if not self._since:
            return None
        return self._checkpoint()

    # ---- from scratch --------------------------------------------------------------------
    def _full(self, s: ClusterState) -> list[str]:
        self.stats.full += 1
        for k in INVARIANTS[:10]:
            self.stats.per_invariant[k]["full"] += 1
        return self.full(s)

    def _checkpoint(self) -> Finding | None:
        at, t, s = self._since[-1]
        v = self._full(s)
        if not v:
            self._since.clear()
            return None
        # the per-transition checks missed it: find the first state that fails
        for k, (at_k, t_k, s_k) in enumerate(self._since[:-1]):
            vk = self._full(s_k)
            if vk:
                return Finding(at_k, t_k, vk, "located")
        return Finding(at, t, v, "full")  # every earlier state holds: this transition broke it

    # ---- per transition ------------------------------------------------------------------
    def _local(self, before: ClusterState, after: ClusterState) -> list[str] | None:
        """The per-transition checks; None when what the transition wrote is not known
        (the state was not produced by this thread's last transactions): then the caller
        checks from scratch, and the shadow indexes are rebuilt at the next transition."""
        if after is before:
            return []
        written = _writes_between(before, after)
        if written is None or after.config is not before.config:
            self._shadow = None
            return None
        if self._shadow is None:
            self._shadow = _Shadow(before)
        return local_violations(before, after, written, self._shadow, self.stats)


def _writes_between(before: ClusterState, after: ClusterState) -> tuple[set, ...] | None:
    """The keys written by the commits that led from `before` to `after` (one commit, or a
    short chain of them within one transition), per map; None if unknown."""
    q = recent_writes()
    chain = []
    target = after
    for base, new, written in reversed(q):
        if new is target:
            chain.append(written)
            if base is before:
                break
            target = base
    else:
        return None
    if len(chain) == 1:
        return chain[0]
    return tuple(set().union(*parts) for parts in zip(*chain))


# ---- the checker's own indexes ---------------------------------------------------------------------


class _Shadow:
    """Who holds each device page (nodes and requests), which objects cover each host
    page, and how many non-queued requests stop at each node: rebuilt from a whole
    state, then kept up to date from each transition's writes."""

    __slots__ = ("dev", "host", "req_at", "obj_pages")

    def __init__(self, s: ClusterState) -> None:
        dev: dict[int, list] = {}
        for nid, n in s.nodes.items():
            for p in n.dev:
                dev.setdefault(p, []).append(("node", nid))
        req_at: Counter = Counter()
        for rid, r in s.requests.items():
            for p in r.pages:
                dev.setdefault(p, []).append(("request", rid))
            if r.phase != QUEUED:
                req_at[r.node] += 1
        host: dict[int, list] = {}
        total = 0
        for key, o in s.objects.items():
            total += o.length
            for p in range(o.base, o.base + o.length):
                host.setdefault(p, []).append(key)
        self.dev, self.host, self.req_at, self.obj_pages = dev, host, req_at, total


def _holder(h: tuple[str, int]) -> str:
    return f"{h[0]} {h[1]}"


def _move(index: dict, who: Any, old: Any, new: Any) -> None:
    for p in old:
        lst = index.get(p)
        if lst is not None:
            try:
                lst.remove(who)
            except ValueError:
                pass
            if not lst:
                del index[p]
    for p in new:
        index.setdefault(p, []).append(who)


_CHAIN: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}
_CHAIN_MAX = 1 << 16


def _chain(prev: int, key: tuple[int, ...]) -> tuple[int, ...]:
    """`content.chain(prev, key)`, remembered (a pure function of its arguments)."""
    k = (prev, key)
    h = _CHAIN.get(k)
    if h is None:
        if len(_CHAIN) >= _CHAIN_MAX:
            _CHAIN.clear()
        h = _CHAIN[k] = content.chain(prev, key)
    return h


def local_violations(B: ClusterState, A: ClusterState, written: tuple[set, ...], sh: _Shadow, stats: Stats | None = None) -> list[str]:
    """Invariants 1-10 over what one transition from `B` to `A` wrote (`written`: the keys
    it set or deleted per map of `kvsm.digest_sums.MAP_COMPONENTS`); updates `sh`."""
    nodes_w, objects_w, pending_w, requests_w, devc_w, hostc_w, cand_w, l3_w = written
    out: list[str] = []

    def bad(i: int, msg: str) -> None:
        out.append(f"{i} {NAMES[i]}: {msg}")

    cfg = A.config
    R, L2 = cfg.R, cfg.L2
    An, Bn = A.nodes, B.nodes
    Ap, Bp = A.pending, B.pending
    if stats is not None:
        for k in INVARIANTS[:10]:
            stats.per_invariant[k]["step"] += 1

    # ---- which entries to look at ----------------------------------------------------------
    nodes = set(nodes_w)
    nodes.update(pending_w)
    for key in objects_w:
        for S in (B, A):
            o = S.objects.get(key)
            if o is not None and o.owner in An:
                nodes.add(o.owner)
    # nodes whose lock relation (own requests + locked backup + children's) may have changed
    lockset = set()
    content_children = set()  # nodes whose children's content must be checked again
    dev_pages: set[int] = set(devc_w)
    host_pages: set[int] = set()
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        lockset.add(nid)
        for x in (a, b):
            if x is not None and x.parent in An:
                lockset.add(x.parent)
        if a is not None and b is not None:
            if a.dev is not b.dev:
                dev_pages.update(a.dev)
                dev_pages.update(b.dev)
                _move(sh.dev, ("node", nid), b.dev, a.dev)
            if a.last_content != b.last_content:
                content_children.add(nid)
        elif a is not None:
            dev_pages.update(a.dev)
            _move(sh.dev, ("node", nid), (), a.dev)
        elif b is not None:
            dev_pages.update(b.dev)
            _move(sh.dev, ("node", nid), b.dev, ())
    for rid in requests_w:
        a, b = A.requests.get(rid), B.requests.get(rid)
        if b is not None:
            if b.phase != QUEUED:
                sh.req_at[b.node] -= 1
                lockset.add(b.node)
                lockset.update(_path(B, b.node))
        if a is not None:
            if a.phase != QUEUED:
                sh.req_at[a.node] += 1
                lockset.add(a.node)
                lockset.update(_path(A, a.node) if a.node in An else ())
        old = b.pages if b is not None else ()
        new = a.pages if a is not None else ()
        if old is not new:
            dev_pages.update(old)
            dev_pages.update(new)
            _move(sh.dev, ("request", rid), old, new)
    for e in A.effects:
        if isinstance(e, (fx.Fill, fx.Load, fx.PoisonDev, fx.Store)):
            dev_pages.add(e.page)
        if isinstance(e, fx.PoisonHost):
            host_pages.update(range(e.base, e.base + e.length))
    for key in objects_w:
        a, b = A.objects.get(key), B.objects.get(key)
        old = range(b.base, b.base + b.length) if b is not None else ()
        new = range(a.base, a.base + a.length) if a is not None else ()
        if a is None or b is None or (a.base, a.length) != (b.base, b.length):
            host_pages.update(old)
            host_pages.update(new)
            _move(sh.host, key, old, new)
            sh.obj_pages += (a.length if a is not None else 0) - (b.length if b is not None else 0)
    for k in hostc_w:
        host_pages.add(k % L2)

    # ---- 1 Tree, 2 Residency, 7 Content, 8 Durable, 9 Reload (per node) ---------------------
    content_checked: set[int] = set()
    if ROOT_ID in nodes:
        root = An.get(ROOT_ID)
        if root is None or root.key or root.dev or root.host is not None:
            bad(1, "node 0 is not an empty root")
            return out
    for nid in sorted(nodes):
        a = An.get(nid)
        b = Bn.get(nid)
        if a is None:
            if b is not None and nid != ROOT_ID:
                p = An.get(b.parent)
                if p is not None and b.key and p.children.get(b.key[0]) == nid:
                    bad(1, f"node {b.parent} lists child {nid} under page {b.key[0]} wrongly")
            continue
        if nid != a.id:
            bad(1, f"node stored under {nid} has id {a.id}")
        if b is None or a.children is not b.children:
            for sym, cid in a.children.items():
                c = An.get(cid)
                if c is None or c.parent != nid or not c.key or c.key[0] != sym:
                    bad(1, f"node {nid} lists child {cid} under page {sym} wrongly")
        if nid == ROOT_ID:
            continue
        if not a.key:
            bad(1, f"node {nid} has an empty key")
            continue
        p = An.get(a.parent)
        if p is None:
            bad(1, f"node {nid} has missing parent {a.parent}")
            continue
        if p.children.get(a.key[0]) != nid:
            bad(1, f"node {nid} is not its parent {a.parent}'s child for its first page")
        if b is not None and b.key and (b.parent != a.parent or b.key[0] != a.key[0]):
            q = An.get(b.parent)
            if q is not None and q.children.get(b.key[0]) == nid and (b.parent, b.key[0]) != (a.parent, a.key[0]):
                bad(1, f"node {b.parent} lists child {nid} under page {b.key[0]} wrongly")
        seen, cur = set(), nid
        while cur != ROOT_ID and cur in An and cur not in seen:
            seen.add(cur)
            cur = An[cur].parent
        if cur != ROOT_ID:
            bad(1, f"node {nid} does not reach the root")
            continue
        if nid >= A.next_id:
            bad(10, f"next_id {A.next_id} is not above every node id")
        if a.touched > A.clock:
            bad(10, f"a node is stamped after the clock {A.clock}")
        # 2 Residency
        if a.dev and len(a.dev) != len(a.key):
            bad(2, f"node {nid} has {len(a.dev)} device pages for {len(a.key)} pages of key")
        obj = A.objects.get(a.host) if a.host is not None else None
        if not a.dev:
            if a.host is None:
                bad(2, f"node {nid} is neither on L1 nor backed on L2")
            elif obj is None or not obj.committed:
                bad(2, f"node {nid} points at object {a.host}, which is not committed")
            if b is not None and b.dev:
                for cid in a.children.values():
                    if An[cid].dev:
                        bad(2, f"node {cid} is on L1 but its parent {nid} is not")
        if a.dev and a.parent != ROOT_ID and not p.dev:
            bad(2, f"node {nid} is on L1 but its parent {a.parent} is not")
        # 6: a node and its object agree on ownership; 9: on length
        if obj is not None:
            if obj.owner != nid:
                bad(6, f"node {nid} and object {a.host} disagree on ownership")
            if not (a.pages == obj.length == len(a.hashes)):
                bad(9, f"node {nid} has {a.pages} pages, object {a.host} {obj.length}, {len(a.hashes)} hashes")
        # 7 Content: the node's page hashes, its device pages and its object's pages
        same = (
            b is not None and a.key is b.key and a.hashes is b.hashes and a.dev is b.dev and a.host == b.host
            and a.parent == b.parent and p.last_content == _last(Bn.get(a.parent))
            and (obj is None or obj is B.objects.get(a.host))
        )
        if not same:
            _node_content(A, nid, a, p.last_content, obj, bad)
            content_checked.add(nid)
        if a.durable and (not same or not b.durable):
            for i, h in enumerate(a.hashes):
                if (lane_of(i, R), h) not in A.l3:
                    bad(8, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")
        # 10 Counts: the victim indexes and the backup index hold exactly this node's keys
    for nid in content_children:
        a = An.get(nid)
        if a is None:
            continue
        for cid in a.children.values():
            if cid not in content_checked:
                c = An[cid]
                _node_content(A, cid, c, a.last_content, A.objects.get(c.host) if c.host is not None else None, bad)
                content_checked.add(cid)
    if any(v.startswith("1 ") for v in out):
        return out  # the rest reads the tree (children, paths) that is broken

    # ---- 3 Locks -----------------------------------------------------------------------------
    for rid in requests_w:
        req = A.requests.get(rid)
        if req is None:
            continue
        if req.phase not in ("queued", "matched", "decoding"):
            bad(3, f"request {rid} has unknown phase {req.phase!r}")
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                bad(3, f"queued request {rid} holds a lock on node {req.node}")
            continue
        if req.node not in An:
            bad(3, f"request {rid} locks missing node {req.node}")
        elif req.phase == MATCHED and req.node != ROOT_ID and not An[req.node].dev:
            bad(3, f"request {rid} locks node {req.node}, which is not on L1")
        if rid >= A.next_rid:
            bad(10, f"next_rid {A.next_rid} is not above every request id")
    for nid in lockset:
        n = An.get(nid)
        if n is None:
            if sh.req_at.get(nid, 0) > 0:
                bad(3, f"a request locks missing node {nid}")
            continue
        if nid == ROOT_ID:
            if n.lock:
                bad(3, f"node 0 has lock {n.lock} but 0 holders")
            continue
        pend = Ap.get(nid)
        want = sh.req_at.get(nid, 0) + (1 if pend is not None and pend.locked else 0)
        for cid in n.children.values():
            c = An[cid]
            cp = Ap.get(cid)
            want += c.lock - (1 if cp is not None and cp.locked else 0)
        if n.lock != want:
            bad(3, f"node {nid} has lock {n.lock} but {want} holders")
        if n.lock and not n.dev:
            bad(3, f"node {nid} is locked but not on L1")

    # ---- 4 Pending ---------------------------------------------------------------------------
    if pending_w or A.writes is not B.writes:
        if len(A.writes) != len(set(A.writes)) or set(A.writes) != set(Ap.keys()):
            bad(4, f"writes {list(A.writes)} and pending {sorted(Ap.keys())} disagree")
    for nid in nodes:
        pend = Ap.get(nid)
        if pend is None:
            continue
        n = An.get(nid)
        if n is None:
            bad(4, f"pending backup of missing node {nid}")
            continue
        if not n.lock:
            bad(4, f"pending node {nid} is not locked")
        if not n.dev:
            bad(4, f"pending node {nid} is not on L1")
        if n.host is not None:
            bad(4, f"pending node {nid} is already backed")
        if dev_victim_key(n, True, cfg) is not None:
            bad(4, f"pending node {nid} is evictable")
        obj = A.objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            bad(4, f"pending node {nid} has object {pend.obj} that is missing, committed or of another length (split)")
    if A.write_done is not B.write_done or A.writes is not B.writes:
        for r, d in enumerate(A.write_done):
            if not 0 <= d <= len(A.writes):
                bad(4, f"rank {r} has finished {d} of {len(A.writes)} writes")

    # ---- 5 Device pages ----------------------------------------------------------------------
    if dev_pages or A.dev_free is not B.dev_free:
        lanes = A.dev_free
        changed = [k for k in range(R) if lanes[k] is not B.dev_free[k]]
        for p in sorted(dev_pages):
            holders = sh.dev.get(p, ())
            if not 0 <= p < cfg.device_pages:
                if holders:
                    bad(5, f"{_holder(holders[0])} holds device page {p}, outside 0..{cfg.device_pages - 1}")
                continue
            free = p in lanes[p % R]
            for k in changed:
                if k != p % R and p in lanes[k]:
                    bad(5, f"free page {p} is listed in lane {k}")
            names = [_holder(h) for h in holders] + (["the free list"] if free else [])
            if len(names) > 1:
                bad(5, f"device page {p} is held by {names[0]} and by {names[1]}")
            elif not names:
                bad(5, f"device pages {[p]} are neither used nor free (leak)")
        if changed or dev_pages:
            used = len(sh.dev)
            if used + sum(len(x) for x in lanes) != cfg.device_pages and not any(v.startswith("5 ") for v in out):
                bad(5, f"{cfg.device_pages - used - sum(len(x) for x in lanes)} device pages are neither used nor free (leak), or a free page is outside the pool")

    # ---- 6 Host pages ------------------------------------------------------------------------
    if host_pages or A.l2_free is not B.l2_free:
        for region, runs in enumerate(A.l2_free):
            if runs is B.l2_free[region] and not host_pages:
                continue
            for page in sorted(host_pages):
                owners = sh.host.get(page, ())
                if len(owners) > 1:
                    bad(6, f"host page {page} (region {region}) is in object {owners[0]} and object {owners[1]}")
                run = runs.floor_lt((page + 1, 0)) if runs else None
                free = run is not None and run[0] <= page < run[0] + run[1]
                if free and owners:
                    bad(6, f"host page {page} is free and in object {owners[0]}")
                if not free and not owners:
                    bad(6, f"host pages {[page]} (region {region}) are neither used nor free (leak)")
                if run is not None:
                    prev = runs.floor_lt(run)
                    nxt = runs.ceil_ge((run[0] + 1, 0))
                    if run[1] <= 0 or run[0] < 0 or run[0] + run[1] > L2:
                        bad(6, f"free run ({run[0]}, {run[1]}) is outside the pool")
                    if prev is not None and prev[0] + prev[1] >= run[0]:
                        bad(6, f"free runs overlap or touch at page {run[0]} (region {region})")
                    if nxt is not None and run[0] + run[1] >= nxt[0]:
                        bad(6, f"free runs overlap or touch at page {nxt[0]} (region {region})")
            if runs is not B.l2_free[region] or objects_w:
                free_total = sum(r[1] for r in runs)
                if free_total + sh.obj_pages != L2 and not any(v.startswith("6 ") for v in out):
                    bad(6, f"{L2 - free_total - sh.obj_pages} host pages (region {region}) are neither used nor free (leak), or overlap")
    for key in objects_w:
        obj = A.objects.get(key)
        if obj is None:
            continue
        n = An.get(obj.owner)
        if obj.committed:
            if n is None or n.host != key:
                bad(6, f"committed object {key} belongs to no node")
            elif obj.length != n.pages:
                bad(6, f"committed object {key} has {obj.length} pages for node {n.id} of {n.pages}")
        elif key in Ap:
            if Ap[key].obj != key:
                bad(6, f"uncommitted object {key} and its pending backup disagree")
        else:
            ops = [op for op in A.reloads if op.obj == key]
            if len(ops) != 1:
                bad(6, f"uncommitted object {key} belongs to no pending backup or reload")
            elif obj.length != len(ops[0].hashes):
                bad(6, f"reload object {key} has {obj.length} pages for its reload's pages")

    # ---- 7 Content of the pages written directly -----------------------------------------------
    for p in devc_w:
        c = A.dev_content.get(p)
        if c is None:
            continue
        holders = sh.dev.get(p, ())
        if not holders:
            bad(7, f"free device page {p} still holds content (not poisoned)")
            continue
        kind, who = holders[0]
        if kind == "node" and who not in content_checked:
            n = An[who]
            i = n.dev.index(p)
            if c != n.hashes[i]:
                bad(7, f"device page {p} of node {who} (page {i}) does not hold its prefix's KV")
    for k in hostc_w:
        page = k % L2
        for key in sh.host.get(page, ()):
            obj = A.objects.get(key)
            n = An.get(obj.owner) if obj is not None else None
            if n is None or n.host != key or obj.owner in content_checked:
                continue
            i = page - obj.base
            if i < len(n.hashes) and A.host_content.get(k) != n.hashes[i]:
                bad(7, f"host page {page} of node {n.id} (region {k // L2}) does not hold its prefix's KV")
    removed_l3 = False
    for key in l3_w:
        c = A.l3.get(key)
        if c is None:
            removed_l3 = removed_l3 or key in B.l3
            continue
        if c != key[1]:
            bad(7, f"rank {key[0]}'s disk entry {key[1]:x} holds the KV of another prefix (or garbage)")
    if A.spill_staged is not B.spill_staged:
        for r, staged in enumerate(A.spill_staged):
            if staged is B.spill_staged[r]:
                continue
            for op_pages in staged:
                for h, c in op_pages:
                    if c != h:
                        bad(7, f"rank {r} staged page {h:x} for a spill with the wrong content")
    if removed_l3:
        # a disk entry went: every durable node must still have its pages (rare; whole check)
        for nid, n in An.items():
            if n.durable:
                for i, h in enumerate(n.hashes):
                    if (lane_of(i, R), h) not in A.l3:
                        bad(8, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")

    # ---- 9 Reload ------------------------------------------------------------------------------
    reloads_changed = A.reloads is not B.reloads
    if reloads_changed:
        for op in A.reloads:
            if not (len(op.tokens) == len(op.hashes) >= 1):
                bad(9, f"reload {op.key:x} claims {len(op.tokens)} pages with {len(op.hashes)} hashes")
            elif op.hashes[1:] != _chain(op.hashes[0], op.tokens[1:]) or op.key != op.hashes[-1]:
                bad(9, f"reload {op.key:x} carries hashes that are not its pages' prefix chain")
    if reloads_changed or requests_w or cand_w:
        waiting = [w for op in A.reloads for w in op.waiters]
        if len(waiting) != len(set(waiting)) or any(w not in A.requests or A.requests[w].phase != QUEUED for w in waiting):
            bad(9, f"reload waiters {waiting} are not distinct queued requests")
        held = set(waiting)
        cands = A.reload_candidates
        for rid in (cands.keys() if reloads_changed else set(cand_w) | set(requests_w)):
            if rid not in cands:
                continue
            if rid not in A.requests or A.requests[rid].phase != QUEUED or rid in held:
                bad(9, f"reload candidate {rid} is not a queued, unheld request")
    if A.spills is not B.spills or reloads_changed or A.spill_queue is not B.spill_queue:
        if len(A.spills) > cfg.spill_inflight or len(A.reloads) > cfg.reload_inflight or len(A.spill_queue) > cfg.spill_queue_cap:
            bad(9, "more L3 operations in flight or queued than the caps allow")

    # ---- 10 Counts -----------------------------------------------------------------------------
    ondev_check = set()
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        if a is not None and (b is None or a.ondev != b.ondev or a.children is not b.children):
            ondev_check.add(nid)
        if a is not None and b is not None and bool(a.dev) != bool(b.dev) and a.parent in An:
            ondev_check.add(a.parent)
        if a is None and b is not None and b.parent in An:
            ondev_check.add(b.parent)
        if a is not None and b is None and a.parent in An:
            ondev_check.add(a.parent)
    for nid in ondev_check:
        n = An[nid]
        ondev = sum(1 for c in n.children.values() if An[c].dev)
        if n.ondev != ondev:
            bad(10, f"node {nid} counts {n.ondev} children on L1, has {ondev}")
    d_dev = d_host = d_backup = 0
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        ka = dev_victim_key(a, nid in Ap, cfg) if a is not None else None
        kb = dev_victim_key(b, nid in Bp, cfg) if b is not None else None
        if ka is not None and ka not in A.dev_index:
            bad(10, "the device victim index differs from its recomputation")
        if kb is not None and kb != ka and kb in A.dev_index:
            bad(10, "the device victim index differs from its recomputation")
        d_dev += (ka is not None) - (kb is not None)
        ha = host_victim_key(a, cfg) if a is not None else None
        hb = host_victim_key(b, cfg) if b is not None else None
        if ha is not None and ha not in A.host_index:
            bad(10, "the host victim index differs from its recomputation")
        if hb is not None and hb != ha and hb in A.host_index:
            bad(10, "the host victim index differs from its recomputation")
        d_host += (ha is not None) - (hb is not None)
        ba = a is not None and backup_candidate(a, nid in Ap, cfg)
        bb = b is not None and backup_candidate(b, nid in Bp, cfg)
        if ba != (nid in A.backup_index):
            bad(10, "the backup candidate index differs from its recomputation")
        d_backup += ba - bb
    if len(A.dev_index) - len(B.dev_index) != d_dev:
        bad(10, "the device victim index differs from its recomputation")
    if len(A.host_index) - len(B.host_index) != d_host:
        bad(10, "the host victim index differs from its recomputation")
    if len(A.backup_index) - len(B.backup_index) != d_backup:
        bad(10, "the backup candidate index differs from its recomputation")
    if A.spills is not B.spills or any(An[n].pin != Bn[n].pin for n in nodes if n in An and n in Bn) or any(An[n].pin for n in nodes if n in An and n not in Bn):
        pins: Counter[int] = Counter(op.node for op in A.spills if op.pinned)
        for nid in nodes | {op.node for op in A.spills} | {op.node for op in B.spills}:
            n = An.get(nid)
            if n is not None and n.pin != pins.get(nid, 0):
                bad(10, f"node {nid} has pin {n.pin} but {pins.get(nid, 0)} pinning spills")
    if (A.spills is not B.spills or A.spill_gathered is not B.spill_gathered or A.spill_done is not B.spill_done
            or A.spill_staged is not B.spill_staged or A.reload_done is not B.reload_done or reloads_changed):
        for r in range(R):
            if not len(A.spill_done[r]) <= A.spill_gathered[r] <= len(A.spills):
                bad(10, f"rank {r}'s spill progress {len(A.spill_done[r])} written / {A.spill_gathered[r]} gathered is off")
            if len(A.spill_staged[r]) != A.spill_gathered[r] - len(A.spill_done[r]):
                bad(10, f"rank {r} stages {len(A.spill_staged[r])} spills, not gathered minus written")
            if len(A.reload_done[r]) > len(A.reloads):
                bad(10, f"rank {r} has read more reloads than are in flight")
    if l3_w or A.l3_used is not B.l3_used:
        delta = [0] * R
        for key in l3_w:
            r = key[0]
            if 0 <= r < R:
                delta[r] += (key in A.l3) - (key in B.l3)
        for r in range(R):
            if A.l3_used[r] - B.l3_used[r] != delta[r]:
                bad(10, f"rank {r}'s disk holds {B.l3_used[r] + delta[r]} pages but counts {A.l3_used[r]}")
            if A.l3_used[r] > cfg.L3:
                bad(10, f"rank {r}'s disk holds more than {cfg.L3} pages")
    if A.next_id < B.next_id or A.clock < B.clock or A.next_rid < B.next_rid:
        bad(10, "a counter (next_id, clock or next_rid) went back")
    return out


def _last(n: Any) -> int | None:
    return None if n is None else n.last_content


def _path(s: ClusterState, nid: int) -> list[int]:
    out = []
    seen = set()
    while nid != ROOT_ID and nid in s.nodes and nid not in seen:
        seen.add(nid)
        out.append(nid)
        nid = s.nodes[nid].parent
    return out


def _node_content(A: ClusterState, nid: int, n: Any, prev: int, obj: Any, bad: Any) -> None:
    expect = _chain(prev, n.key)
    if n.hashes != expect:
        bad(7, f"node {nid} carries page hashes that are not its prefix's")
    dc = A.dev_content
    for i, p in enumerate(n.dev):
        if dc.get(p) != expect[i]:
            bad(7, f"device page {p} of node {nid} (page {i}) does not hold its prefix's KV")
    if obj is not None:
        hc = A.host_content
        L2 = A.config.L2
        for region in range(len(A.config.payloads)):
            for i in range(min(obj.length, len(expect))):
                if hc.get(region * L2 + obj.base + i) != expect[i]:
                    bad(7, f"host page {obj.base + i} of node {nid} (region {region}) does not hold its prefix's KV")


# ---- the from-scratch check, fast ------------------------------------------------------------------


def full_violations(s: ClusterState) -> list[str]:
    """`kvsm.invariants.violations(s)`, decided faster: `holds` recomputes every
    invariant from the state's values (never from its derived structures) and says only
    whether all hold; when one does not, `violations` recomputes it all to name it."""
    return [] if holds(s) else violations(s)


# Pure functions of immutable values, remembered for the last value seen in each slot
# (the entry keeps a reference to that value, so an identity match is sound; one value
# per slot, so no old state is kept alive): the sum of a component of the digest, a
# free-list chunk's sum and lane check, the l3 map's own checks. A component that did
# not change since the previous check costs nothing to check again.
_BY_ID: dict[Any, tuple[Any, Any]] = {}


def _by_id(slot: Any, obj: Any, f: Any) -> Any:
    hit = _BY_ID.get(slot)
    if hit is not None and hit[0] is obj:
        return hit[1]
    v = f(obj)
    _BY_ID[slot] = (obj, v)
    return v


def _map_sum(name: str) -> Any:
    """The sum of a map component's entry hashes (`value_hash`), each remembered here by
    key for the value object it was computed for."""
    memo: dict[Any, tuple[Any, int]] = {}

    def f(m: Any) -> int:
        if len(memo) > 4 * len(m) + 1024:
            memo.clear()
        total = 0
        get = memo.get
        for k, v in m.items():
            e = get(k)
            if e is not None and e[0] is v:
                total += e[1]
            else:
                h = value_hash(name, k, v)
                memo[k] = (v, h)
                total += h
        return total

    return f


def _content_sum(name: str) -> Any:
    """The sum of a content component: each page's `(content + 1) * weight(page)`."""
    weights: dict[int, int] = {}

    def f(m: Any) -> int:
        total = 0
        get = weights.get
        for k, v in m.items():
            w = get(k)
            if w is None:
                w = weights[k] = page_weight(name, k)
            total += (v + 1) * w
        return total

    return f


_SUMMERS: dict[str, Any] = {}


def _free_sum(chunk: tuple[int, ...]) -> int:
    return sum(map(free_page_hash, chunk))

_FIRST = itemgetter(0)


def recompute_sums_fast(s: ClusterState) -> tuple[int, ...]:
    """`kvsm.digest_sums.recompute_sums(s)`, with each component's (and each free-list
    chunk's) sum remembered for the value it was computed from."""
    out = []
    for name in COMPONENTS:
        if name in MAP_COMPONENTS:
            f = _SUMMERS.get(name)
            if f is None:
                f = _SUMMERS[name] = _content_sum(name) if name in CONTENT_COMPONENTS else _map_sum(name)
            total = _by_id("sum:" + name, getattr(s, name), f)
        elif name == "dev_free":
            total = 0
            for k, lane in enumerate(s.dev_free):
                for j, chunk in enumerate(lane._chunks):
                    total += _by_id(("sum:dev_free", k, j), chunk, _free_sum)
        elif name == "l2_free":
            total = 0
            for i, runs in enumerate(s.l2_free):
                for j, chunk in enumerate(runs._chunks):
                    total += _by_id(("sum:l2_free", i, j), chunk, lambda c, i=i: sum(memo_hash("l2_free", (i, run), True) for run in c))
        else:
            total = 0
            for k, v in enumerate(getattr(s, name)):
                if v != ():
                    total += value_hash(name, k, v)
        out.append(total % MOD)
    return tuple(out)


def _l3_facts(m: Any) -> tuple[bool, Counter, set]:
    """Whether every disk entry holds the content its hash names, entries per rank, and
    the entries' keys as a set (faster to probe than the map)."""
    ok = all(k[1] == c for k, c in m.items())
    keys = set(m.keys())
    return ok, Counter(map(_FIRST, keys)), keys


def holds(s: ClusterState) -> bool:
    """Whether invariants 1-10 all hold in `s`: exactly `violations(s) == []`."""
    cfg = s.config
    nodes = s.nodes
    R, L2 = cfg.R, cfg.L2
    root = nodes.get(ROOT_ID)
    if root is None or root.key or root.dev or root.host is not None:
        return False
    objects, pending, requests = s.objects, s.pending, s.requests
    dc, hc, l3 = s.dev_content, s.host_content, s.l3
    regions = len(cfg.payloads)
    l3_ok, per_rank, l3_keys = _by_id("l3", l3, _l3_facts)

    # 1 Tree: ids, keys, parent links both ways; every node reaches the root (the depth
    # of each node is found once, memoised; a cycle never reaches it)
    state_of: dict[int, int] = {ROOT_ID: 1}  # 1 reaches the root, 0 on the current walk
    expect_last: dict[int, int] = {ROOT_ID: content.ROOT}
    for nid, n in nodes.items():
        if nid != n.id:
            return False
        for sym, cid in n.children.items():
            c = nodes.get(cid)
            if c is None or c.parent != nid or not c.key or c.key[0] != sym:
                return False
        if nid == ROOT_ID:
            continue
        if not n.key:
            return False
        p = nodes.get(n.parent)
        if p is None or p.children.get(n.key[0]) != nid:
            return False
        if nid not in state_of:
            walk = []
            cur = nid
            while cur not in state_of:
                state_of[cur] = 0
                walk.append(cur)
                if not nodes[cur].key:
                    return False
                cur = nodes[cur].parent
                if cur not in nodes:
                    return False
            if state_of[cur] == 0:
                return False  # a cycle
            for w in reversed(walk):
                state_of[w] = 1
                expect_last[w] = _chain(expect_last[nodes[w].parent], nodes[w].key)[-1]

    # 2 Residency, 7 Content, 8 Durable, 9 node-object lengths, 10 ondev, stamps, ids
    clock = s.clock
    max_id = -1
    used: list[int] = []
    for nid, n in nodes.items():
        if nid > max_id:
            max_id = nid
        if n.touched > clock:
            return False
        ondev = 0
        for c in n.children.values():
            if nodes[c].dev:
                ondev += 1
        if n.ondev != ondev:
            return False
        if nid == ROOT_ID:
            continue
        dev = n.dev
        if dev:
            if len(dev) != len(n.key):
                return False
            if n.parent != ROOT_ID and not nodes[n.parent].dev:
                return False
            used.extend(dev)
        elif n.host is None:
            return False
        obj = objects.get(n.host) if n.host is not None else None
        if not dev and (obj is None or not obj.committed):
            return False
        expect = _chain(expect_last[n.parent], n.key)
        if n.hashes != expect:
            return False
        if dev and tuple(map(dc.get, dev)) != expect[: len(dev)]:
            return False
        if obj is not None:
            if obj.owner != nid or not (n.pages == obj.length == len(n.hashes)):
                return False
            k = min(obj.length, len(expect))
            for region in range(regions):
                lo = region * L2 + obj.base
                if tuple(map(hc.get, range(lo, lo + k))) != expect[:k]:
                    return False
        if n.durable and not l3_keys.issuperset(zip(cycle(range(R)), n.hashes)):
            return False
    if nodes and max_id >= s.next_id:
        return False

    # 3 Locks
    holders: Counter[int] = Counter()
    for req in requests.values():
        if req.phase not in ("queued", "matched", "decoding"):
            return False
        used.extend(req.pages)
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                return False
            continue
        cur = req.node
        if cur not in nodes:
            return False
        if req.phase == MATCHED and cur != ROOT_ID and not nodes[cur].dev:
            return False
        while cur != ROOT_ID:
            holders[cur] += 1
            cur = nodes[cur].parent
    if requests and max(requests.keys()) >= s.next_rid:
        return False
    for nid, pend in pending.items():
        if pend.locked:
            holders[nid] += 1
    for nid, n in nodes.items():
        if n.lock != holders.get(nid, 0):
            return False
        if n.lock and nid != ROOT_ID and not n.dev:
            return False

    # 4 Pending
    writes = s.writes
    if len(writes) != len(set(writes)) or set(writes) != set(pending.keys()):
        return False
    for nid, pend in pending.items():
        n = nodes.get(nid)
        if n is None or not n.lock or not n.dev or n.host is not None or dev_victim_key(n, True, cfg) is not None:
            return False
        obj = objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            return False
    for d in s.write_done:
        if not 0 <= d <= len(writes):
            return False

    # 5 Device pages: the used pages are distinct, in range and not free; each lane's free
    # pages are its own and in range; together they are every page
    pages = cfg.device_pages
    used_set = set(used)
    if len(used_set) != len(used) or (used and (min(used) < 0 or max(used) >= pages)):
        return False
    free_count = 0
    free_set: set[int] = set()
    for lane, free in enumerate(s.dev_free):
        for j, chunk in enumerate(free._chunks):
            if not _by_id(("lane", R, lane, pages, j), chunk, lambda c, lane=lane: all(p % R == lane and 0 <= p < pages for p in c)):
                return False
            free_set.update(chunk)
        free_count += len(free)
    if len(free_set) != free_count or not used_set.isdisjoint(free_set) or len(used) + free_count != pages:
        return False
    if not used_set.issuperset(dc.keys()):
        return False

    # 6 Host pages: per region, the objects and the free runs tile the pool, free runs
    # neither overlap nor touch; each object belongs where it says
    spans = sorted((o.base, o.length) for o in objects.values() if o.length > 0)
    for runs in s.l2_free:
        free_runs = [run for chunk in runs._chunks for run in chunk]
        merged = sorted([(b, n, False) for b, n in spans] + [(b, n, True) for b, n in free_runs])
        at = 0
        prev_free = False
        for base, length, is_free in merged:
            if base != at or length <= 0 or (is_free and prev_free):
                return False
            at = base + length
            prev_free = is_free
        if at != L2:
            return False
    for key, obj in objects.items():
        if obj.length < 0:
            return False
        if obj.committed:
            n = nodes.get(obj.owner)
            if n is None or n.host != key or obj.length != n.pages:
                return False
        elif key in pending:
            if pending[key].obj != key:
                return False
        else:
            ops = [op for op in s.reloads if op.obj == key]
            if len(ops) != 1 or obj.length != len(ops[0].hashes):
                return False

    # 7 Content on the disks and in staging
    if not l3_ok:
        return False
    for staged in s.spill_staged:
        for op_pages in staged:
            for h, c in op_pages:
                if c != h:
                    return False

    # 9 Reload
    for op in s.reloads:
        if not (len(op.tokens) == len(op.hashes) >= 1):
            return False
        if op.hashes[1:] != _chain(op.hashes[0], op.tokens[1:]) or op.key != op.hashes[-1]:
            return False
    waiting = [w for op in s.reloads for w in op.waiters]
    if len(waiting) != len(set(waiting)) or any(w not in requests or requests[w].phase != QUEUED for w in waiting):
        return False
    for rid in s.reload_candidates.keys():
        if rid not in requests or requests[rid].phase != QUEUED or rid in waiting:
            return False
    if len(s.spills) > cfg.spill_inflight or len(s.reloads) > cfg.reload_inflight or len(s.spill_queue) > cfg.spill_queue_cap:
        return False

    # 10 Counts: derived indexes, digest sums, pins, per-rank progress, disk counts
    dev_keys = sorted(k for k in (dev_victim_key(n, nid in pending, cfg) for nid, n in nodes.items()) if k)
    if len(s.dev_index) != len(dev_keys) or list(s.dev_index) != dev_keys:
        return False
    host_keys = sorted(k for k in (host_victim_key(n, cfg) for n in nodes.values()) if k)
    if len(s.host_index) != len(host_keys) or list(s.host_index) != host_keys:
        return False
    backups = sorted(nid for nid, n in nodes.items() if backup_candidate(n, nid in pending, cfg))
    if len(s.backup_index) != len(backups) or list(s.backup_index) != backups:
        return False
    pins: Counter[int] = Counter(op.node for op in s.spills if op.pinned)
    for nid in set(pins) | {nid for nid, n in nodes.items() if n.pin}:
        n = nodes.get(nid)
        if n is not None and n.pin != pins.get(nid, 0):
            return False
    for r in range(R):
        if not len(s.spill_done[r]) <= s.spill_gathered[r] <= len(s.spills):
            return False
        if len(s.spill_staged[r]) != s.spill_gathered[r] - len(s.spill_done[r]):
            return False
        if len(s.reload_done[r]) > len(s.reloads):
            return False
        if per_rank.get(r, 0) != s.l3_used[r] or per_rank.get(r, 0) > cfg.L3:
            return False
    if s.sums is not None and s.sums != recompute_sums_fast(s):
        return False
    return True
