"""The evict family: `EvictDevice(node)`, `EvictHost(node)`, `LoadBack(rid)`.

Victims are always the first in the replicated victim order, ascending
`(hits >= 2, touched, id)`; the argument names the victim so that a log reads
plainly, and the guard checks that it is the one the order picks.
"""

from __future__ import annotations

from typing import Iterable

from ..planner import TreeView, plan
from ..state import MATCHED, ClusterState, Rejected, lane_of
from ..tx import Tx
from .base import Spec, Transition, evict_device_node, evict_host_node, register
from .request import match_key, request_in


def _evict_first(s: ClusterState, t: Transition, tier: str) -> ClusterState:
    """Evict the first victim of a tier's order; the argument must name it."""
    index, evict, where = (s.dev_index, evict_device_node, "L1") if tier == "device" else (s.host_index, evict_host_node, "L2")
    nid = t.arg("node")
    if not index:
        raise Rejected(f"no node can be evicted from {where}")
    first = index.first()[2]
    if nid != first:
        raise Rejected(f"the {tier} victim order picks node {first}, not {nid}")
    tx = Tx(s)
    evict(tx, nid)
    return tx.commit()


def evict_device(s: ClusterState, t: Transition) -> ClusterState:
    return _evict_first(s, t, "device")


def evict_host(s: ClusterState, t: Transition) -> ClusterState:
    return _evict_first(s, t, "host")


def evict_device_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.dev_index:
        yield Transition.make("EvictDevice", node=s.dev_index.first()[2])


def evict_host_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.host_index:
        yield Transition.make("EvictHost", node=s.host_index.first()[2])


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
        cid = cur.children.get(tokens[i])
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


def load_back(s: ClusterState, t: Transition) -> ClusterState:
    """Load the L2-only nodes below a matched request's lock back to L1 (all or nothing):
    the `i`-th page of the run goes to lane `i mod R`; lanes short of pages are freed by
    the owner-lane planner. The request's lock moves to the deepest loaded node."""
    rid = t.arg("rid")
    tx = Tx(s)
    cfg = tx.cfg
    R = cfg.R
    req = request_in(tx, rid, (MATCHED,))
    run, pages = host_run(s, rid)
    if pages == 0:
        raise Rejected(f"request {rid} has no host hit below its lock")
    if pages * cfg.P < cfg.load_back_threshold:
        raise Rejected(f"host hit of {pages * cfg.P} tokens is below the load-back threshold {cfg.load_back_threshold}")
    need = [0] * R
    for i in range(pages):
        need[lane_of(i, R)] += 1
    deficits = [max(0, need[lane] - tx.free_in_lane(lane)) for lane in range(R)]
    if any(deficits):
        view = TreeView(tx.nodes.__getitem__, tx.pending.__contains__, cfg)
        p = plan(view, deficits, [k[2] for k in s.dev_index])
        if any(p.remaining):
            raise Rejected(f"owner-lane planner cannot free enough pages: remaining deficit {list(p.remaining)}")
        for victim in p.victims:
            evict_device_node(tx, victim)
    pages_all = tx.alloc_lanes([lane_of(i, R) for i in range(pages)])
    i = 0
    for nid in run:
        n = tx.node(nid)
        obj = tx.objects[n.host]
        dev = pages_all[i : i + n.pages]
        i += n.pages
        for j, page in enumerate(dev):
            tx.load_dev(page, obj.base + j)
        tx.set_dev(nid, dev)
    tx.lock_path(run[-1], +1)
    tx.lock_path(req.node, -1)
    tx.requests.set(rid, req.with_(node=run[-1]))
    return tx.commit()


def load_back_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in sorted(r.id for r in s.requests.values() if r.phase == MATCHED):
        yield Transition.make("LoadBack", rid=rid)


register(Spec("EvictDevice", "evict", evict_device, evict_device_candidates, {"node": "int"}))
register(Spec("EvictHost", "evict", evict_host, evict_host_candidates, {"node": "int"}))
register(Spec("LoadBack", "evict", load_back, load_back_candidates, {"rid": "int"}))
