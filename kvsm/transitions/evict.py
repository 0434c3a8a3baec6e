"""The evict family: `EvictDevice(node)`, `EvictHost(node)`, `LoadBack(rid)`, `LoadDone(r)`.

Victims are always the first in the replicated victim order, ascending
`(hits >= 2, touched, id)`; the argument names the victim so that a log reads
plainly, and the guard checks that it is the one the order picks.

A load-back is asynchronous, as in the reference: `LoadBack` (replicated) evicts,
allocates the device pages, gives them to the nodes and issues the copy, which locks
the path down to the deepest loaded node; `LoadDone(r)` is rank `r`'s copy completing
(the reference's loading_check, per rank, no MIN): only then do rank `r`'s pages hold
the loaded KV. The load's lock is released once every rank's copy is done.
"""

from __future__ import annotations

from typing import Iterable

from ..planner import TreeView, plan
from ..state import MATCHED, ClusterState, LoadOp, Rejected, lane_of
from ..victims import evict_write_back, held_on_l1, in_rank_order, rank_order_key, sync_write_back, victim_order
from ..tx import Tx
from .transition import Transition
from .registry import Spec, cluster_view, rank_of, register
from .eviction import evict_device_node, evict_host_node, first_victim, write_back
from .tree import child_for, enqueue_spill
from .request import drop_hit, match_key, request_in


def _evict_first(s: ClusterState, t: Transition, tier: str, view: int | None) -> ClusterState:
    """Evict the first victim of a tier's order (rank `view`'s); the argument must name it."""
    index, evict, where = (s.dev_index, evict_device_node, "L1") if tier == "device" else (s.host_index, evict_host_node, "L2")
    nid = t.arg("node")
    if not index:
        raise Rejected(f"no node can be evicted from {where}")
    first = first_victim(index, s.config, view)
    if nid != first:
        raise Rejected(f"the {tier} victim order picks node {first}, not {nid}")
    tx = Tx(s)
    evict(tx, nid)
    return tx.commit()


def unbacked_leaves(s: ClusterState) -> list[int]:
    """The unbacked device leaves a synchronous write-back may take (`UnbackedLeaves`):
    on L1, unlocked, no pending backup, no child on L1 (a pending one too where the
    victim test does not see its backup: evict_pending)."""
    cfg = s.config
    held = [s.nodes[nid] for nid in s.pending if nid in s.nodes]
    return sorted(s.backup_index) + sorted(
        n.id for n in held if n.dev and n.host is None and not n.ondev and not held_on_l1(n, True, cfg))


def _written_back_and_evicted(s: ClusterState, nid: int, view: int | None) -> Tx | None:
    """Device victim `nid` evicted, written back first if unbacked (`EvictedAs`): the
    transaction, or None when its write-back finds no host run (under
    write_back_fail_evict it is evicted as though it were backed, as a load-back's is)."""
    tx = Tx(s)
    if tx.node(nid).host is None:
        if not write_back(tx, nid, view, frozenset()):
            if tx.cfg.bug != "write_back_fail_evict":
                return None
            tx.free_dev(tx.node(nid).dev)
            tx.set_dev(nid, ())
            return tx
        enqueue_spill(tx, nid)
    evict_device_node(tx, nid)
    return tx


def _device_victim(s: ClusterState, view: int | None) -> int | None:
    """The first device victim of rank `view`'s order: under evict_write_back (the
    reference's `evict()` under write_back) the unbacked leaves are victims too, but
    under `"sync_fixed"` one whose write-back finds no room (skipped)."""
    cfg = s.config
    first = first_victim(s.dev_index, cfg, view) if s.dev_index else None
    if not evict_write_back(cfg):
        return first
    order = lambda k: rank_order_key(k, cfg, view)  # noqa: E731
    bound = order(victim_order(s.nodes[first], cfg)) if first is not None else None
    # the unbacked leaves before the first backed victim, in order (only those are tried
    # for room under sync_fixed)
    for key in sorted((victim_order(s.nodes[nid], cfg) for nid in unbacked_leaves(s)), key=order):
        if bound is not None and order(key) > bound:
            break
        if cfg.evict_write_back == "sync" or _written_back_and_evicted(s, key[2], view) is not None:
            return key[2]
    return first


def evict_device(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """Evict the first device victim; the argument must name it. Under evict_write_back an
    unbacked one is written back first; under `"sync"` one whose write-back finds no
    host run makes the reference's assert fire (every rank: the plan is replicated),
    which the step records in `halted`, changing nothing else."""
    if not evict_write_back(s.config):
        return _evict_first(s, t, "device", view)
    nid = t.arg("node")
    first = _device_victim(s, view)
    if first is None:
        raise Rejected("no node can be evicted from L1")
    if nid != first:
        raise Rejected(f"the device victim order picks node {first}, not {nid}")
    tx = _written_back_and_evicted(s, nid, view)
    if tx is None:
        # the reference appends the victim to the nodes it evicts after its loop all the
        # same, and asserts that each is backed: the scheduler process dies
        stop = Tx(s)
        stop.halted = "EvictDevice"
        return stop.commit()
    return tx.commit()


def evict_host(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    return _evict_first(s, t, "host", view)


def evict_device_candidates(s: ClusterState) -> Iterable[Transition]:
    first = _device_victim(s, cluster_view(s.config))
    if first is not None:
        yield Transition.make("EvictDevice", node=first)


def evict_host_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.host_index:
        yield Transition.make("EvictHost", node=first_victim(s.host_index, s.config, cluster_view(s.config)))


def host_run(s: ClusterState, rid: int) -> tuple[list[int], int]:
    """The nodes a load-back for request `rid` would bring back: the whole nodes directly
    below its lock that are only on L2, following its match key (the key but its last
    page: what its match covered). Returns them and their pages."""
    req = s.requests[rid]
    depth = sum(s.nodes[n].pages for n in s.path_to_root(req.node))
    run: list[int] = []
    pages = 0
    cur = s.nodes[req.node]
    i = depth
    tokens = match_key(req.tokens)
    while i < len(tokens):
        cid = child_for(s.nodes, cur, req.ns, tokens[i], s.config.bug)
        if cid is None:
            break
        child = s.nodes[cid]
        if child.dev or child.host is None or tokens[i : i + child.pages] != child.key:
            break
        run.append(cid)
        pages += child.pages
        i += child.pages
        cur = child
    return run, pages


def carried_run(s: ClusterState, rid: int) -> tuple[list[int], int]:
    """Under carry_host_hit: the nodes the request's recorded host hit brings back, as
    the reference's load-back walks them: from the recorded node up while off L1 (a
    node another load brought back since ends the run). Returns them root first and
    their pages. A hit whose node left the tree is refused (the reference asserts that
    every node it walks is backed): only an unpinned hit (`host_hit_unpinned`) can."""
    req = s.requests[rid]
    if not req.hit:
        return [], 0
    if req.hit not in s.nodes:
        raise Rejected(f"request {rid}'s host hit, node {req.hit}, has left the tree")
    run: list[int] = []
    nid = req.hit
    while nid != req.node and not s.nodes[nid].dev:
        run.append(nid)
        nid = s.nodes[nid].parent
    run.reverse()
    return run, sum(s.nodes[n].pages for n in run)


def load_back(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """Load the L2-only nodes below a matched request's lock back to L1 (all or nothing):
    the `i`-th page of the run goes to lane `i mod R`; lanes short of pages are freed by
    the owner-lane planner. The copy is issued, not done: the pages hold nothing until
    their owner's `LoadDone`. The load locks the path down to the deepest loaded node,
    and the request's lock moves there."""
    rid = t.arg("rid")
    tx = Tx(s)
    cfg = tx.cfg
    R = cfg.R
    req = request_in(tx, rid, (MATCHED,))
    run, pages = carried_run(s, rid) if cfg.carry_host_hit else host_run(s, rid)
    if pages == 0:
        raise Rejected(f"request {rid} has no host hit below its lock")
    if pages * cfg.P < cfg.load_back_threshold:
        raise Rejected(f"host hit of {pages * cfg.P} tokens is below the load-back threshold {cfg.load_back_threshold}")
    need = [0] * R
    for i in range(pages):
        need[lane_of(i, R)] += 1
    deficits = [max(0, need[lane] - tx.free_in_lane(lane)) for lane in range(R)]
    # the host pages each node is loaded from, as the load gathers them before it evicts
    sources = [tx.objects[tx.node(nid).host] for nid in run]
    if any(deficits):
        sync = sync_write_back(cfg)
        tree = TreeView(tx.nodes.__getitem__, tx.pending.__contains__, cfg, view)
        cands = [k[2] for k in in_rank_order(s.dev_index, cfg, view)]
        if sync:
            # the unbacked device leaves, written back before they are evicted
            cands += unbacked_leaves(s)
        # load_back_evict = "whole" (SGLang's `evict(num_tokens=len(host_indices))`): a load
        # short of pages evicts for its whole size, and loads once what it lacked is free
        goal = need if cfg.load_back_evict == "whole" else deficits
        p = plan(tree, goal, cands)
        left = [max(0, r - (g - d)) for r, g, d in zip(p.remaining, goal, deficits)]
        if any(left):
            raise Rejected(f"owner-lane planner cannot free enough pages: remaining deficit {left}")
        # the load's own host copies are protected from the host eviction of its
        # write-backs; under loadback_evicts_own_host they are not (sglang PR 27631)
        keep = frozenset() if cfg.bug == "loadback_evicts_own_host" else frozenset(run)
        deferring = sync and cfg.write_back_evict in ("deferred", "deferred_fixed")
        recheck = cfg.write_back_evict == "deferred"  # (the fix counts deferred victims as evicted)
        later: list[int] = []  # victims written back, evicted after the loop (deferred)
        for victim in p.victims:
            if recheck and any(tx.node(c).dev for c in tx.node(victim).children.values()):
                # the reference re-checks each victim before it takes it: a child it
                # deferred is still on L1, so it raises (the scheduler process dies)
                stop = Tx(s)
                stop.halted = "LoadBack"
                return stop.commit()
            if sync and tx.node(victim).host is None:
                if not write_back(tx, victim, view, keep):
                    if cfg.bug != "write_back_fail_evict":
                        raise Rejected(f"the write-back of device victim {victim} finds no host room: the load-back is refused")
                    # the defect (sglang PR 27108): the victim whose write-back failed is
                    # evicted as though it were backed: off L1, its KV nowhere
                    tx.free_dev(tx.node(victim).dev)
                    tx.set_dev(victim, ())
                    continue
                enqueue_spill(tx, victim)
                if deferring:
                    later.append(victim)
                    continue
            evict_device_node(tx, victim)
        for victim in later:
            evict_device_node(tx, victim)
    pages_all = tx.alloc_lanes([lane_of(i, R) for i in range(pages)])
    i = 0
    copies: list[tuple[int, int]] = []
    for nid, obj in zip(run, sources):
        n = s.nodes[nid]
        dev = pages_all[i : i + n.pages]
        i += n.pages
        copies.extend((page, obj.page(j)) for j, page in enumerate(dev))
        if nid in tx.nodes:
            tx.set_dev(nid, dev)
    # a node of the run that host eviction took is gone: the pages it was given are held
    # by no node while the load still copies into them (loadback_evicts_own_host)
    run = [nid for nid in run if nid in tx.nodes]
    if cfg.bug == "load_host_release":
        # the defect: the host copy is released when the load is issued, as though its
        # copies were done: the loaded nodes become unbacked device nodes and their
        # objects are freed (poisoned) while every rank's copy still reads them
        for nid in run:
            tx.free_object(tx.node(nid).host)
            tx.update(nid, host=None, durable=False)
    last = run[-1] if run else req.node
    tx.loads = tx.loads + (LoadOp(last, tuple(copies)),)
    tx.lock_path(last, +2)  # the load's own lock and the request's
    tx.lock_path(req.node, -1)
    tx.requests.set(rid, drop_hit(tx, req).with_(node=last))
    return tx.commit()


def load_back_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in sorted(r.id for r in s.requests.values() if r.phase == MATCHED):
        yield Transition.make("LoadBack", rid=rid)


def load_done(s: ClusterState, t: Transition) -> ClusterState:
    """Rank `r`'s copy of its oldest load-back it has not finished completes: its pages (those
    in lane `r`) now hold the host pages' KV. Ranks complete their loads in issue order.
    Once every rank has finished the oldest load, its lock is released."""
    r = rank_of(s, t)
    done = s.load_done[r]
    if done >= len(s.loads):
        raise Rejected(f"rank {r} has finished all {len(s.loads)} loads in flight")
    tx = Tx(s)
    R = tx.cfg.R
    op = s.loads[done]
    # what each page's node claims it holds: the loaded nodes lie on the path above the
    # load's deepest node (a split while the load is in flight keeps them there). Under
    # load_uaf a loaded node can be evicted mid-load and its page freed or reused: the
    # claim is then the page's present holder's, or (nobody holds it) the host page's KV.
    if op.node in s.nodes:
        claims = {p: n.hashes[i] for n in map(s.nodes.__getitem__, s.path_to_root(op.node)) for i, p in enumerate(n.dev)}
    else:
        claims = {}
    for page, host_page in op.pages:
        if lane_of(page, R) == r:
            claim = claims.get(page)
            if claim is None:
                claim = next((n.hashes[i] for n in s.nodes.values() for i, p in enumerate(n.dev) if p == page),
                             s.host_content.get(host_page))
            tx.load_dev(page, host_page, claim)
    if s.config.bug == "load_uaf" and all(d <= done for d in s.load_done):
        # the defect: the load's lock goes with the first rank's copy (no rank has done
        # this load before r), not the last, so the loaded nodes can be evicted and their
        # pages reused while another rank's copy still lands in them
        tx.lock_path(op.node, -1)
    tx.load_done[r] += 1
    while tx.loads and min(tx.load_done) > 0:
        if s.config.bug != "load_uaf":
            tx.lock_path(tx.loads[0].node, -1)
        tx.loads = tx.loads[1:]
        tx.load_done = [d - 1 for d in tx.load_done]
    return tx.commit()


def load_done_candidates(s: ClusterState) -> Iterable[Transition]:
    for r in range(s.config.R):
        if s.load_done[r] < len(s.loads):
            yield Transition.make("LoadDone", rank=r)


register(Spec(name="EvictDevice", family="evict", apply=evict_device, candidates=evict_device_candidates, args={"node": "int"}, decides=True))
register(Spec(name="EvictHost", family="evict", apply=evict_host, candidates=evict_host_candidates, args={"node": "int"}, decides=True))
register(Spec(name="LoadBack", family="evict", apply=load_back, candidates=load_back_candidates, args={"rid": "int"}, decides=True))
register(Spec(name="LoadDone", family="evict", apply=load_done, candidates=load_done_candidates, args={}, per_rank=True))
