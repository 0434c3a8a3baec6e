"""Invariant 3, Locks: a node's lock counts its holders (the requests past the queue whose
node is it or below it, its locked pending backup, the load-backs in flight to it or
below it); a queued request holds nothing; a locked node, and a matched request's node,
is on L1."""

from __future__ import annotations

from collections import Counter
from typing import Any

from . import counts
from ..state import MATCHED, PHASES, QUEUED, ROOT_ID

I = 3


def _phase(rid: int, phase: Any) -> str:
    return f"request {rid} has unknown phase {phase!r}"


def _queued(rid: int, node: int) -> str:
    return f"queued request {rid} holds a lock on node {node}"


def _missing(rid: int, node: int) -> str:
    return f"request {rid} locks missing node {node}"


def _load_missing(node: int) -> str:
    return f"a load-back in flight locks missing node {node}"


def _count(nid: int, lock: int, holders: int) -> str:
    return f"node {nid} has lock {lock} but {holders} holders"


def _off_l1(nid: int) -> str:
    return f"node {nid} is locked but not on L1"


def _matched_off_l1(rid: int, node: int) -> str:
    return f"request {rid} locks node {node}, which is not on L1"


def whole(w: Any) -> None:
    s, nodes = w.s, w.nodes
    holders: Counter[int] = Counter()
    for req in s.requests.values():
        if req.phase not in PHASES:
            w.bad(I, _phase(req.id, req.phase))
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                w.bad(I, _queued(req.id, req.node))
            continue
        if req.node not in nodes:
            w.bad(I, _missing(req.id, req.node))
            continue
        for a in s.path_to_root(req.node):
            holders[a] += 1
    for nid, pend in s.pending.items():
        if pend.locked:
            holders[nid] += 1
    for op in s.loads:
        if op.node not in nodes:
            w.bad(I, _load_missing(op.node))
            continue
        for a in s.path_to_root(op.node):
            holders[a] += 1
    for nid, n in nodes.items():
        if n.lock != holders.get(nid, 0):
            w.bad(I, _count(nid, n.lock, holders.get(nid, 0)))
        if n.lock and nid != ROOT_ID and not n.dev:
            w.bad(I, _off_l1(nid))


def whole_matched(w: Any) -> None:
    """A matched request's node is on L1 (reported after invariant 10's counters, where
    the reports have always put it)."""
    for req in w.s.requests.values():
        n = w.nodes.get(req.node)
        if req.phase == MATCHED and req.node != ROOT_ID and n is not None and not n.dev:
            w.bad(I, _matched_off_l1(req.id, req.node))


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step(d: Any) -> None:
    """The requests written, and the lock relation of every node whose holders may have
    changed (`d.lockset`): its lock is its own requests (the checker's index), its
    locked backup and load-backs, plus its children's locks less their own backups'."""
    A, An, Ap, sh = d.A, d.An, d.Ap, d.sh
    for rid in d.requests_w:
        req = A.requests.get(rid)
        if req is None:
            continue
        if rid >= A.next_rid:
            d.bad(counts.I, counts.next_rid_msg(A.next_rid))
        if req.phase not in PHASES:
            d.bad(I, _phase(rid, req.phase))
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                d.bad(I, _queued(rid, req.node))
            continue
        if req.node not in An:
            d.bad(I, _missing(rid, req.node))
        elif req.phase == MATCHED and req.node != ROOT_ID and not An[req.node].dev:
            d.bad(I, _matched_off_l1(rid, req.node))
    for nid in d.lockset:
        n = An.get(nid)
        if n is None:
            if sh.req_at.get(nid, 0) > 0:
                d.bad(I, f"a request locks missing node {nid}")
            continue
        if nid == ROOT_ID:
            if n.lock:
                d.bad(I, _count(nid, n.lock, 0))
            continue
        pend = Ap.get(nid)
        want = sh.req_at.get(nid, 0) + (1 if pend is not None and pend.locked else 0)
        want += sum(1 for op in A.loads if op.node == nid)
        for cid in n.children.values():
            c = An[cid]
            cp = Ap.get(cid)
            want += c.lock - (1 if cp is not None and cp.locked else 0)
        if n.lock != want:
            d.bad(I, _count(nid, n.lock, want))
        if n.lock and not n.dev:
            d.bad(I, _off_l1(nid))


def step_loads(d: Any) -> None:
    """The load-backs in flight, when they changed, lock nodes that exist."""
    for op in d.A.loads:
        if op.node not in d.An:
            d.bad(I, _load_missing(op.node))
