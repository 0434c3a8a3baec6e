"""The reload family: `ReloadMark`, `ReloadReserve`, `ReloadDone(r, ok)`, `ReloadAdmit`,
`ReloadExpire`.

A queued request whose key misses the tree below some node (the anchor) may be marked
as a reload candidate. `ReloadReserve` decides by a MIN (a collective over counts, not
an agreement: no rank reads after it what another wrote): each rank counts the leading
pages of the missing suffix whose hash it holds for every page it owns (object-local
index `i mod R`); the MIN over ranks is what can be claimed. At least the load-back
floor (`max(1, load_back_threshold // P)` pages) and a clean attach are needed; then the
request either joins an in-flight reload of the same pages (same last-page hash) or a
new reload reserves an uncommitted L2 object (evicting host leaves to fit, as `Reserve`
does; when it cannot fit the evictions stay and only the mark is dropped) and holds
the request. Each rank reads its pages from disk into the object
(`ReloadDone`). `ReloadAdmit` (AND of the ok bits of the head op) inserts one L2-only,
durable node under the anchor if the anchor is still in the tree, the suffix is still a
clean miss and the hash chain is unchanged; otherwise it frees the reservation. Either
way the waiters are released and match again. `ReloadExpire` is one tick of the reload
clock: waiters of an op whose ttl runs out are released to recompute while the
reservation stays until the op is admitted or aborted.
"""

from __future__ import annotations

from typing import Iterable

import immutables

from .. import content
from ..state import QUEUED, ROOT_ID, Candidate, ClusterState, Node, Obj, Rejected, ReloadOp, lane_of, reload_object_key
from ..tx import Tx
from .transition import Transition
from .registry import Spec, rank_of, register
from .tree import child_for, walk_key
from .eviction import evict_host_to_fit, host_page_free
from .spill import l3_contents, l3_keys, need_l3


def held(s: ClusterState, rid: int) -> bool:
    return any(rid in op.waiters for op in s.reloads)


def reload_target(s: ClusterState, rid: int) -> Candidate | None:
    """What a reload for queued request `rid` would fetch: the suffix of its key below the
    deepest whole node it matches (the anchor), if its key diverges at a node boundary."""
    req = s.requests[rid]
    w = walk_key(s.nodes, req.tokens, ns=req.ns, bug=s.config.bug)
    if w.cut is not None or w.covered >= len(req.tokens):
        return None
    anchor = w.full[-1] if w.full else ROOT_ID
    tokens = req.tokens[w.covered :]
    a = s.nodes[anchor]
    # (the anchor is of the request's namespace but under a defect of NS_WALK_BUGS)
    hashes = content.chain_in(req.ns, content.rebase(a.last_content, a.ns, req.ns), tokens)
    return Candidate(anchor, tokens, l3_keys(s.config, req.ns, hashes), req.ns)


def claimable(s: ClusterState, hashes: tuple[int, ...], view: int | None = None) -> int:
    """MIN over ranks of the leading pages whose owned hashes each rank holds (rank
    `view` decides it)."""
    R = s.config.R
    best = len(hashes)
    ranks: Iterable[int] = range(R)
    if s.config.bug == "l3_no_min" and view is not None:
        # no MIN over the ranks: the rank claims what its own disk holds
        ranks = (view,)
    for r in ranks:
        n = 0
        while n < len(hashes) and (lane_of(n, R) != r or (r, hashes[n]) in s.l3):
            n += 1
        best = min(best, n)
    return best


def attach_ok(s: ClusterState, anchor: int, tokens: tuple[int, ...], first_hash: int, ns: int) -> bool:
    """The anchor is still in the tree, the suffix is still a clean miss under it (in
    namespace `ns`), and the anchor's hash chain still leads to the suffix's first page
    hash (an L3 key)."""
    a = s.nodes.get(anchor)
    return (
        a is not None
        and child_for(s.nodes, a, ns, tokens[0], s.config.bug) is None
        and l3_keys(s.config, ns, content.chain_in(ns, content.rebase(a.last_content, a.ns, ns), tokens[:1]))[0] == first_hash
    )


def reload_mark(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    rid = t.arg("rid")
    req = s.requests.get(rid)
    if req is None or req.phase != QUEUED:
        raise Rejected(f"request {rid} is not a queued request")
    if req.reload_tried:
        raise Rejected(f"request {rid} has already been looked up in L3")
    cand = reload_target(s, rid)
    if cand is None:
        raise Rejected(f"request {rid}'s key has no clean miss to reload")
    tx = Tx(s)
    tx.reload_candidates.set(rid, cand)
    tx.requests.set(rid, req.with_(reload_tried=True))
    return tx.commit()


def reload_mark_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        for rid in sorted(r.id for r in s.requests.values() if r.phase == QUEUED and not r.reload_tried):
            yield Transition.make("ReloadMark", rid=rid)


def reload_reserve(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """Decide candidate `rid`: hold it on a reload, or drop the mark (it recomputes)."""
    need_l3(s)
    rid = t.arg("rid")
    cand = s.reload_candidates.get(rid)
    if cand is None:
        raise Rejected(f"request {rid} is not a reload candidate")
    cfg = s.config
    tx = Tx(s)
    tx.reload_candidates.delete(rid)
    c = claimable(s, cand.hashes, view)
    floor = max(1, cfg.load_back_threshold // cfg.P)
    if c < floor or not attach_ok(s, cand.anchor, cand.tokens, cand.hashes[0], cand.ns):
        return tx.commit()
    key = cand.hashes[c - 1]
    for j, op in enumerate(s.reloads):
        if op.key == key:
            reloads = list(s.reloads)
            reloads[j] = op.with_(waiters=op.waiters + (rid,))
            tx.reloads = tuple(reloads)
            return tx.commit()
    if len(s.reloads) >= cfg.reload_inflight:
        return tx.commit()
    got = evict_host_to_fit(tx, c, view)
    if got is None:
        # cannot fit even after evicting every host leaf of the snapshot: the mark is
        # dropped and, as in the reference, the evictions made stay
        return tx.commit()
    obj = reload_object_key(key)
    tx.objects.set(obj, tx.new_object(got, False, obj))  # (a run: l2_alloc = "pages" has no L3)
    tx.reloads = tx.reloads + (ReloadOp(key, obj, cand.anchor, cand.tokens[:c], cand.hashes[:c], (rid,), cfg.reload_ttl, cand.ns),)
    return tx.commit()


def reload_reserve_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in sorted(s.reload_candidates.keys()):
        yield Transition.make("ReloadReserve", rid=rid)


def reload_read_ok(s: ClusterState, r: int) -> bool:
    op = s.reloads[len(s.reload_done[r])]
    R = s.config.R
    return s.disk_ok[r] and all((r, h) in s.l3 for i, h in enumerate(op.hashes) if lane_of(i, R) == r)


def reload_done(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    r = rank_of(s, t)
    ok = t.arg("ok")
    k = len(s.reload_done[r])
    if k >= len(s.reloads):
        raise Rejected(f"rank {r} has read all {len(s.reloads)} reloads in flight")
    expect = reload_read_ok(s, r)
    if ok != expect:
        raise Rejected(f"rank {r}'s reload read is {'ok' if expect else 'not ok'}")
    op = s.reloads[k]
    tx = Tx(s)
    tx.read_reload(r, tx.objects[op.obj].base, op.hashes, ok)
    tx.reload_done[r] = tx.reload_done[r] + (ok,)
    if s.config.bug == "reload_fail_double_free" and not ok:
        # the defect: a failed read releases the pages it did not fill (the whole
        # reservation) itself, while the reload keeps them for its admission, which
        # frees them again; a reservation another failed read released already is
        # passed over
        obj = tx.objects[op.obj]
        if not host_page_free(tx, obj.base):
            tx.free_host(obj.base, obj.length)
    return tx.commit()


def reload_done_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        for r in range(s.config.R):
            if len(s.reload_done[r]) < len(s.reloads):
                yield Transition.make("ReloadDone", rank=r, ok=reload_read_ok(s, r))


def reload_admit(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    if not s.reloads or min(len(x) for x in s.reload_done) == 0:
        raise Rejected("no reload has been read by every rank")
    op = s.reloads[0]
    ok = all(x[0] for x in s.reload_done)
    tx = Tx(s)
    tx.reloads = s.reloads[1:]
    tx.reload_done = [x[1:] for x in s.reload_done]
    attach = attach_ok(s, op.anchor, op.tokens, op.hashes[0], op.ns)
    if s.config.bug == "reload_stale_anchor":
        # admission trusts the check made at reserve: the node attaches under the anchor
        # as it was then, still in the tree with a clean miss below it or not
        attach = True
    if op.waiters and ok and attach:
        obj = tx.objects[op.obj]
        tx.objects.delete(op.obj)
        nid = tx.new_id()
        tx.objects.set(nid, Obj(obj.base, obj.length, True, nid))
        tx.clock += 1
        node = Node(
            id=nid,
            parent=op.anchor,
            key=op.tokens,
            dev=(),
            host=nid,
            durable=True,
            lock=0,
            pin=0,
            hits=0,
            touched=tx.clock,
            children=immutables.Map(),
            ondev=0,
            hashes=l3_contents(s.config, op.ns, op.hashes),
            ns=op.ns,
        )
        if op.anchor in tx.nodes:
            tx.add_child(node)
        else:
            # only under reload_stale_anchor: the anchor has left the tree, and the node
            # hangs below it, out of the tree (the reference attaches it to the detached node)
            tx.put(node)
    else:
        tx.free_object(op.obj)
    return tx.commit()


def reload_admit_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3 and s.reloads:
        yield Transition.make("ReloadAdmit")


def reload_expire(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    if not any(op.waiters for op in s.reloads):
        raise Rejected("no reload holds a request")
    tx = Tx(s)
    out = []
    for op in s.reloads:
        ttl = max(0, op.ttl - 1)
        if s.config.bug == "lease_expiry_free" and op.ttl == 1:
            # the defect: the lease's end releases the reservation with the waiters, while
            # the reads of the reload are still in flight: its pages are freed (poisoned)
            # and its object stays, so the reads land in pages the pool may give away
            obj = tx.objects[op.obj]
            tx.free_host(obj.base, obj.length)
        out.append(op.with_(waiters=() if ttl == 0 else op.waiters, ttl=ttl))
    tx.reloads = tuple(out)
    return tx.commit()


def reload_expire_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3 and any(op.waiters for op in s.reloads):
        yield Transition.make("ReloadExpire")


register(Spec(name="ReloadMark", family="reload", apply=reload_mark, candidates=reload_mark_candidates, args={"rid": "int"}))
register(Spec(name="ReloadReserve", family="reload", apply=reload_reserve, candidates=reload_reserve_candidates, args={"rid": "int"}, decides=True))
register(Spec(name="ReloadDone", family="reload", apply=reload_done, candidates=reload_done_candidates, args={"ok": "bool"}, per_rank=True))
register(Spec(name="ReloadAdmit", family="reload", apply=reload_admit, candidates=reload_admit_candidates, args={}, agreement=True))
register(Spec(name="ReloadExpire", family="reload", apply=reload_expire, candidates=reload_expire_candidates, args={}))
