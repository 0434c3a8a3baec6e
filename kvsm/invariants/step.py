"""The rules over what one transition wrote (`local_violations`), for `kvsm.checking`:
each invariant restated as a relation between an entry and its neighbours that, holding
for every entry, gives the invariant for the whole state (e.g. a node's lock equals the
requests that stop at it, plus its locked backup, plus its children's locks less
theirs), checked for the entries the transition wrote and their neighbours. Each
invariant's module holds its rule beside the whole-state one; this module works out
which entries to look at (`Step`) and keeps the checker's own indexes of who holds each
device and host page (`Shadow`)."""

from __future__ import annotations

from collections import Counter
from itertools import chain
from operator import is_
from typing import Any, Callable

from .. import effects as fx
from ..state import QUEUED, ROOT_ID, ClusterState
from . import agreement, collectives, content, counts, device_pages, durable, host_pages, isolation, locks, pending, reload, residency, running, tree
from .common import Report, contract, copying, prepared_ids


class Shadow:
    """Who holds each device page (nodes and requests), which objects cover each host
    page, and how many non-queued requests stop at each node: built from a whole state,
    then kept up to date from each transition's writes."""

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
            for p in o.page_list():
                host.setdefault(p, []).append(key)
        self.dev, self.host, self.req_at, self.obj_pages = dev, host, req_at, total


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


def changed_items(a: Any, b: Any) -> set:
    """The elements in one of the sorted sets `a` and `b` (`kvsm.sortedset.PSortedSet`,
    two versions of one set) but not the other, found in the parts of the trees they do
    not share (an update copies only the path to the leaf it changes)."""
    if a is b:
        return set()
    if not (a._len and b._len) or a._height != b._height:
        return set(chain.from_iterable(a._chunks)) ^ set(chain.from_iterable(b._chunks))
    la, lb = [a._root], [b._root]
    for level in range(a._height + 1):
        ia, ib = set(map(id, la)), set(map(id, lb))
        la = [x for x in la if id(x) not in ib]
        lb = [x for x in lb if id(x) not in ia]
        if level < a._height:
            la = [k for x in la for k in x.kids]
            lb = [k for x in lb for k in x.kids]
    return set(chain.from_iterable(la)) ^ set(chain.from_iterable(lb))


def _path(s: ClusterState, nid: int) -> list[int]:
    out = []
    seen = set()
    while nid != ROOT_ID and nid in s.nodes and nid not in seen:
        seen.add(nid)
        out.append(nid)
        nid = s.nodes[nid].parent
    return out


class Step(Report):
    """One transition from `B` to `A` under check: what it wrote (`written`: the keys it
    set or deleted per map of `kvsm.digest_sums.MAP_COMPONENTS`), and what that makes
    each rule look at; building it brings the shadow `sh` up to date."""

    def __init__(self, B: ClusterState, A: ClusterState, written: tuple[Any, ...], sh: Shadow, chain: Callable) -> None:
        self.out = []
        (self.nodes_w, self.objects_w, self.pending_w, self.requests_w,
         self.devc_w, self.hostc_w, self.cand_w, self.l3_w) = written
        self.A, self.B, self.s = A, B, A
        self.cfg = A.config
        self.R, self.L2 = self.cfg.R, self.cfg.L2
        self.An, self.Bn, self.Ap, self.Bp = A.nodes, B.nodes, A.pending, B.pending
        self.sh, self.chain = sh, chain
        self.content_checked: set[int] = set()
        self.l3_removed = False
        self._prepared: Any = None
        self._nodes()
        self._requests()
        self._pages()
        self._loads()

    @property
    def prepared(self) -> set[int]:
        if self._prepared is None:
            self._prepared = prepared_ids(self.A)
        return self._prepared

    @property
    def bare(self) -> Any:
        return contract(self.cfg)

    def _nodes(self) -> None:
        """The nodes to look at, their lock relations and children, their device pages."""
        A, B, An, Bn, sh = self.A, self.B, self.An, self.Bn, self.sh
        nodes = set(self.nodes_w)
        nodes.update(self.pending_w)
        for key in self.objects_w:
            for S in (B, A):
                o = S.objects.get(key)
                if o is not None and o.owner in An:
                    nodes.add(o.owner)
        self.nodes = nodes
        # nodes whose lock relation (own requests + locked backup + children's) may have changed
        self.lockset = lockset = set()
        self.content_children = set()  # nodes whose children's content must be checked again
        self.dev_pages = dev_pages = set(self.devc_w)
        self.unlinked: set[int] = set()  # objects not written whose node's pointer to them changed
        for nid in nodes:
            a, b = An.get(nid), Bn.get(nid)
            lockset.add(nid)
            for x in (a, b):
                if x is not None and x.parent in An:
                    lockset.add(x.parent)
            if a is not None and b is not None:
                if a.host != b.host:  # the object it left, or came to, belongs to it no more, or now
                    self.unlinked.update(k for k in (a.host, b.host) if k is not None and k not in self.objects_w)
                if a.dev is not b.dev:
                    dev_pages.update(a.dev)
                    dev_pages.update(b.dev)
                    _move(sh.dev, ("node", nid), b.dev, a.dev)
                if a.last_content != b.last_content or a.ns != b.ns:
                    self.content_children.add(nid)
            elif a is not None:
                dev_pages.update(a.dev)
                _move(sh.dev, ("node", nid), (), a.dev)
            elif b is not None:
                dev_pages.update(b.dev)
                _move(sh.dev, ("node", nid), b.dev, ())
        # objects whose holder (a pending backup, a prepared one, a reload) changed
        held = set(self.pending_w)
        for nid in self.pending_w:
            for S in (A, B):
                pend = S.pending.get(nid)
                if pend is not None:
                    held.add(pend.obj)
        if A.prepared is not B.prepared:
            held.update(prepared_ids(A) ^ prepared_ids(B))
        if A.reloads is not B.reloads:
            held.update(op.obj for S in (A, B) for op in S.reloads)
        self.unlinked.update(k for k in held if k in A.objects and k not in self.objects_w)

    def _requests(self) -> None:
        A, B, An, sh = self.A, self.B, self.An, self.sh
        for rid in self.requests_w:
            a, b = A.requests.get(rid), B.requests.get(rid)
            if b is not None:
                if b.phase != QUEUED:
                    sh.req_at[b.node] -= 1
                    self.lockset.add(b.node)
                    self.lockset.update(_path(B, b.node))
            if a is not None:
                if a.phase != QUEUED:
                    sh.req_at[a.node] += 1
                    self.lockset.add(a.node)
                    self.lockset.update(_path(A, a.node) if a.node in An else ())
            old = b.pages if b is not None else ()
            new = a.pages if a is not None else ()
            if old is not new:
                self.dev_pages.update(old)
                self.dev_pages.update(new)
                _move(sh.dev, ("request", rid), old, new)

    def _pages(self) -> None:
        """The pages the effects touched, the objects' host pages, the pages that entered
        or left a free list and the first page of each free run that did."""
        A, B, sh = self.A, self.B, self.sh
        for a, b in zip(A.dev_free, B.dev_free):
            if a is not b:
                self.dev_pages.update(changed_items(a, b))
        self.host_pages = host_pages = set()
        for a, b in zip(A.l2_free, B.l2_free):
            if a is not b:
                host_pages.update(base for base, _ in changed_items(a, b))
        for e in A.effects:
            if isinstance(e, (fx.Fill, fx.Load, fx.PoisonDev, fx.Store)):
                self.dev_pages.add(e.page)
            if isinstance(e, fx.PoisonHost):
                host_pages.update(range(e.base, e.base + e.length))
        for key in self.objects_w:
            a, b = A.objects.get(key), B.objects.get(key)
            old = b.page_list() if b is not None else ()
            new = a.page_list() if a is not None else ()
            if a is None or b is None or (a.base, a.length, a.pages) != (b.base, b.length, b.pages):
                host_pages.update(old)
                host_pages.update(new)
                _move(sh.host, key, old, new)
                sh.obj_pages += (a.length if a is not None else 0) - (b.length if b is not None else 0)
        for k in self.hostc_w:
            host_pages.add(k % self.L2)

    def _loads(self) -> None:
        """In-flight load-backs: the pages each still copies, and the nodes whose locks
        they hold (the per-rank tuples are compared by value: a transaction builds them
        anew)."""
        A, B = self.A, self.B
        self.loads_changed = A.loads is not B.loads or A.load_done != B.load_done
        self.copying = copying(A) if A.loads else frozenset()
        if A.loads is not B.loads:
            for S in (A, B):
                for op in S.loads:
                    if op.node in self.An:
                        self.lockset.add(op.node)
        if self.loads_changed:
            # a page whose copy landed now holds what its node says (LoadDone writes it, or
            # deletes it when the host page held nothing), and one whose copy is in flight
            # again (a rank's count gone back) must hold nothing
            for p in (copying(B) if B.loads else frozenset()) ^ self.copying:
                self.dev_pages.add(p)
                self.devc_w = set(self.devc_w) | {p}


def _node_rules(d: Step) -> None:
    """Invariants 1, 2, 6-10 of each node the transition wrote, and 7 of the children of
    those whose last page's content changed."""
    An, Bn, A = d.An, d.Bn, d.A
    for nid in sorted(d.nodes):
        a, b = An.get(nid), Bn.get(nid)
        p = tree.step_node(d, nid, a, b)
        if p is None:
            continue
        # (the rules cheap enough to be worth a call only when they may fail are guarded here)
        if nid >= A.next_id or a.touched > A.clock:
            counts.step_node(d, nid, a)
        obj = A.objects.get(a.host) if a.host is not None else None
        residency.step_node(d, nid, a, b, p, obj)
        if obj is not None:
            if obj.owner != nid:
                host_pages.step_node(d, nid, a, obj)
            if not (a.pages == obj.length == len(a.hashes)):
                reload.step_node(d, nid, a, obj)
        same = content.step_node(d, nid, a, b, p, obj)
        if a.durable:
            durable.step_node(d, nid, a, b, same)
    if d.content_children:
        content.step_children(d)


def local_violations(B: ClusterState, A: ClusterState, written: tuple[Any, ...], sh: Shadow, chain: Callable, stats: Any = None) -> list[str]:
    """Invariants 1-10 and 12-15 over what one transition from `B` to `A` wrote
    (`written`, per map of `kvsm.digest_sums.MAP_COMPONENTS`); updates `sh`. `chain` is
    `kvsm.content.chain` or a remembered form of it."""
    if stats is not None:
        stats.state_steps += 1  # (one evaluation of each of STATE_INVARIANTS)
    d = Step(B, A, written, sh, chain)
    if not tree.step_root(d):
        return d.out
    _node_rules(d)
    if d.out and d.has(tree.T):
        # the rest reads the tree (children, paths) that is broken: as over the whole
        # state, only the tree's violations are reported
        return [v for v in d.out if v.startswith(f"{tree.T} ")]
    # (a rule is called when something it reads was written: most transitions touch few)
    locks.step(d)
    pending.step(d)
    device_pages.step(d)
    if d.host_pages or d.objects_w or d.unlinked or not all(map(is_, A.l2_free, B.l2_free)):
        host_pages.step(d)
    if A.config.carry_host_hit and (d.nodes or d.requests_w):
        host_pages.step_hits(d)
    if d.devc_w or d.hostc_w or d.l3_w or A.spill_staged != B.spill_staged:
        content.step_pages(d)
    if d.l3_removed:
        durable.step_removed(d)
    if A.reloads is not B.reloads or d.requests_w or d.cand_w or A.spills is not B.spills or A.spill_queue is not B.spill_queue:
        reload.step(d)
    counts.step(d)
    if A.loads and (d.loads_changed or d.dev_pages or d.nodes):
        device_pages.step_loads(d)
        counts.step_oldest_load(d)
    if d.loads_changed:
        locks.step_loads(d)
        counts.step_load_done(d)
    if A.commit_round != B.commit_round or A.writes is not B.writes:
        collectives.whole(d)  # (the round, when it or the writes changed)
    if A.diverged is not None:
        agreement.whole(d)  # (the state's record: the same rule as the whole state's)
    if A.halted is not None:
        running.whole(d)  # (likewise)
    if d.nodes or d.requests_w or (A.reloads and (A.reloads is not B.reloads or d.hostc_w or d.objects_w)):
        isolation.step(d)
    return d.out
