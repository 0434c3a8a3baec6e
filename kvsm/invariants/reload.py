"""Invariant 9, Reload: a backed node, its object and its hashes have one length; a
reload carries one hash per page, chained from its first page, and is keyed by its
last; its waiters are distinct queued requests, and a reload candidate is a queued
request no reload holds; no more L3 operations are in flight or queued than the caps."""

from __future__ import annotations

from typing import Any

from ..state import QUEUED

I = 9


def _lengths(nid: int, n: Any, host: int, obj: Any) -> str:
    return f"node {nid} has {n.pages} pages, object {host} {obj.length}, {len(n.hashes)} hashes"


CAPS = "more L3 operations in flight or queued than the caps allow"


def _over_caps(s: Any) -> bool:
    cfg = s.config
    return len(s.spills) > cfg.spill_inflight or len(s.reloads) > cfg.reload_inflight or len(s.spill_queue) > cfg.spill_queue_cap


def _waiting(s: Any) -> list[int]:
    return [w for op in s.reloads for w in op.waiters]


def _waiters_bad(s: Any, waiting: list[int]) -> bool:
    return len(waiting) != len(set(waiting)) or any(w not in s.requests or s.requests[w].phase != QUEUED for w in waiting)


def _waiters(waiting: list[int]) -> str:
    return f"reload waiters {waiting} are not distinct queued requests"


def _candidate_bad(s: Any, rid: int, held: Any) -> bool:
    return rid not in s.requests or s.requests[rid].phase != QUEUED or rid in held


def _candidate(rid: int) -> str:
    return f"reload candidate {rid} is not a queued, unheld request"


def _chained(s: Any, op: Any, chain: Any) -> bool:
    """Whether a reload's hashes chain from its first page's over its tokens, and its key
    is its last page's hash. Its hashes are L3 keys: its namespace's identities, or under
    `l3_key = "tokens"` the token chain (namespace 0's)."""
    ns = 0 if s.config.l3_by_tokens else op.ns
    if not ns:
        return op.hashes[1:] == chain(op.hashes[0], op.tokens[1:]) and op.key == op.hashes[-1]
    from .. import content

    return op.hashes[1:] == content.chain_in(ns, op.hashes[0], op.tokens[1:], chain) and op.key == op.hashes[-1]


def _ops(r: Any, s: Any, chain: Any, first_only: bool) -> None:
    """Each reload's hashes (`chain`: `kvsm.content.chain`, or a remembered form of it);
    `first_only` reports only the first thing wrong with a reload."""
    for op in s.reloads:
        short = not (len(op.tokens) == len(op.hashes) >= 1)
        if short:
            r.bad(I, f"reload {op.key:x} claims {len(op.tokens)} pages with {len(op.hashes)} hashes")
            if first_only or not op.hashes:
                continue
        if not _chained(s, op, chain):
            r.bad(I, f"reload {op.key:x} carries hashes that are not its pages' prefix chain")


def whole(w: Any) -> None:
    from .. import content

    s = w.s
    for nid, n in w.nodes.items():
        if n.host is not None and n.host in s.objects:
            obj = s.objects[n.host]
            if not (n.pages == obj.length == len(n.hashes)):
                w.bad(I, _lengths(nid, n, n.host, obj))
    _ops(w, s, content.chain, False)
    waiting = _waiting(s)
    if _waiters_bad(s, waiting):
        w.bad(I, _waiters(waiting))
    for rid in s.reload_candidates.keys():
        if _candidate_bad(s, rid, waiting):
            w.bad(I, _candidate(rid))
    if _over_caps(s):
        w.bad(I, CAPS)


def holds(s: Any, chain: Any) -> bool:
    """The whole-state rule but the nodes' lengths (each node's own check), decided fast
    (`kvsm.invariants.fast`)."""
    for op in s.reloads:
        if not (len(op.tokens) == len(op.hashes) >= 1):
            return False
        if not _chained(s, op, chain):
            return False
    waiting = _waiting(s)
    if _waiters_bad(s, waiting):
        return False
    for rid in s.reload_candidates.keys():
        if _candidate_bad(s, rid, waiting):
            return False
    return not _over_caps(s)


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_node(d: Any, nid: int, a: Any, obj: Any) -> None:
    if not (a.pages == obj.length == len(a.hashes)):
        d.bad(I, _lengths(nid, a, a.host, obj))


def step(d: Any) -> None:
    A, B = d.A, d.B
    reloads_changed = A.reloads is not B.reloads
    if reloads_changed:
        _ops(d, A, d.chain, True)
    if reloads_changed or d.requests_w or d.cand_w:
        waiting = _waiting(A)
        if _waiters_bad(A, waiting):
            d.bad(I, _waiters(waiting))
        held = set(waiting)
        cands = A.reload_candidates
        for rid in (cands.keys() if reloads_changed else set(d.cand_w) | set(d.requests_w)):
            if rid in cands and _candidate_bad(A, rid, held):
                d.bad(I, _candidate(rid))
    if A.spills is not B.spills or reloads_changed or A.spill_queue is not B.spill_queue:
        if _over_caps(A):
            d.bad(I, CAPS)
