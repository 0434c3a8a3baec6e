"""The stale-tail prune: `PruneStaleTail(node, at)` (config `stale_prune`).

The reference owns KV at page granularity while its radix keys are token sequences.
When a match or an insert leaves a node inside a page (its key diverges from the
node's, or ends, part way into page `at`), the reference floors the split to the page
boundary, splits the node there and deletes the lower part with its whole subtree
(`_cp_prune_stale_tail_after_page_floor`, `_cp_delete_stale_tail_subtree`): their
device pages and L2 objects are freed, and the request re-owns the page from the
boundary. It refuses (the match or insert is deferred) when some node of the subtree
is locked, pinned by a spill or has a pending backup
(`_cp_subtree_has_unprunable_state`).

The model's keys are page symbols, so whether a divergence falls inside a page or on
its boundary is not in the state: where `Split` (or the split inside `Match` and
`Insert`) is the boundary case, `PruneStaleTail` is the other, enabled at the same
cuts, a step of its own before the match or insert that meets the node. Under
`stale_prune = "fixed"` a subtree that in-flight L3 work refers to (a queued or
in-flight spill of one of its nodes, a reload candidate or reload anchored in it) is
left alone too, so that no disk read or write is wasted (docs/model.md).
"""

from __future__ import annotations

from typing import Iterable

from .. import content
from ..state import MATCHED, QUEUED, ClusterState, Rejected
from ..tx import Tx
from .transition import Transition
from .registry import Spec, register
from .request import match_key
from .tree import split_node, walk_key


def live_cuts(s: ClusterState) -> set[tuple[int, int]]:
    """Where a queued request's match key or a matched request's whole key ends or
    diverges inside a node, whatever the node holds."""
    out = set()
    for req in s.requests.values():
        if req.phase in (QUEUED, MATCHED):
            cut = walk_key(s.nodes, match_key(req.tokens) if req.phase == QUEUED else req.tokens, ns=req.ns, bug=s.config.bug).cut
            if cut is not None:
                out.add(cut)
    return out


def subtree(s: ClusterState, nid: int) -> list[int]:
    """`nid` and every node below it, each after its children (the order the reference
    deletes them in), siblings by first page."""
    out: list[int] = []
    stack = [(nid, False)]
    while stack:
        n, done = stack.pop()
        if done:
            out.append(n)
            continue
        stack.append((n, True))
        children = s.nodes[n].children
        stack.extend((children[k], False) for k in sorted(children.keys(), reverse=True))
    return out


def busy(s: ClusterState, nodes: list[int]) -> str | None:
    """Why the reference's guard refuses to prune these nodes (a lock, a spill's pin, a
    pending backup), or, under `stale_prune = "fixed"`, why in-flight L3 work keeps
    them; None when they may go."""
    for n in nodes:
        nd = s.nodes[n]
        if n in s.pending:  # (its backup locks it too)
            return f"node {n} has a pending backup"
        if nd.pin:
            return f"node {n} is pinned by a spill"
        if nd.lock:
            return f"node {n} is locked"
    if s.config.stale_prune == "fixed":
        inside = set(nodes)
        if inside & set(s.spill_queue) or any(op.node in inside for op in s.spills):
            return "a spill of the subtree is queued or in flight"
        if any(c.anchor in inside for c in s.reload_candidates.values()) or any(op.anchor in inside for op in s.reloads):
            return "a reload is anchored in the subtree"
    return None


def tokens_in_common(P: int, node_symbol: int, request_symbol: int) -> int:
    """How many leading tokens two different pages share, for a driver that has page
    symbols only (the simulator): a fixed pseudo-random number in 0..P-1 of the two
    symbols. A cut is inside a page (the reference prunes) when it is not 0."""
    return content.page_content(node_symbol, request_symbol) % P


def stale_cut(s: ClusterState, rid: int) -> tuple[int, int] | None:
    """The cut where request `rid`'s key (its match key while queued, its whole key once
    matched) leaves a node inside a page, as the simulator decides it: the key diverges
    from the node's page `at` (or its match key ends there, the prompt's next page
    taking its place) and the two pages share some leading tokens (`tokens_in_common`).
    None when the key leaves no node there or leaves it at a page boundary."""
    req = s.requests[rid]
    key = match_key(req.tokens) if req.phase == QUEUED else req.tokens
    w = walk_key(s.nodes, key, ns=req.ns, bug=s.config.bug)
    if w.cut is None:
        return None
    nid, at = w.cut
    pos = w.covered + at
    if pos >= len(req.tokens) or not tokens_in_common(s.config.P, s.nodes[nid].key[at], req.tokens[pos]):
        return None
    return w.cut


def prune_stale_tail(s: ClusterState, t: Transition) -> ClusterState:
    nid, at = t.arg("node"), t.arg("at")
    if s.config.stale_prune == "off":
        raise Rejected("stale_prune is off: a key that leaves a node splits it at a page boundary")
    if nid not in s.nodes:
        raise Rejected(f"node {nid} does not exist")
    if (nid, at) not in live_cuts(s):
        raise Rejected(f"no live request's key leaves node {nid} after {at} pages")
    doomed = subtree(s, nid)
    why = busy(s, doomed)
    if why is not None:
        raise Rejected(f"the stale tail of node {nid} cannot be pruned: {why}")
    tx = Tx(s)
    split_node(tx, nid, at)
    for n in doomed:
        nd = tx.node(n)
        if nd.dev:
            tx.free_dev(nd.dev)
        if nd.host is not None:
            tx.free_object(nd.host)
        tx.remove_leaf(n)
    return tx.commit()


def prune_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.stale_prune != "off":
        for nid, at in sorted(live_cuts(s)):
            yield Transition.make("PruneStaleTail", node=nid, at=at)


register(Spec(name="PruneStaleTail", family="split", apply=prune_stale_tail, candidates=prune_candidates,
              args={"node": "int", "at": "int"}))
