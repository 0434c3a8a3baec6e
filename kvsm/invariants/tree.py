"""Invariant 1, Tree: node 0 is an empty root; every node is stored under its id, has a
key, is its parent's child under its first page, and reaches the root; every child
entry names a node that is that child. Under `unbacked_evict = "reference"` a node off
L1 may reach a husk instead (docs/model.md, "Orphans"): a node whose parent is `GONE`,
on no tier, with children, its key its whole prefix."""

from __future__ import annotations

from typing import Any

from ..content import ROOT as ROOT_CONTENT
from ..state import GONE, ROOT_ID

T = 1


def root_bad(root: Any) -> bool:
    return root is None or root.key or root.dev or root.host is not None


ROOT_MSG = "node 0 is not an empty root"


def _stored(nid: int, n: Any) -> str:
    return f"node stored under {nid} has id {n.id}"


def _wrong_child(nid: int, cid: int, sym: Any) -> str:
    return f"node {nid} lists child {cid} under page {sym} wrongly"


def _child_ok(nodes: Any, nid: int, cid: int, sym: Any) -> bool:
    c = nodes.get(cid)
    return not (c is None or c.parent != nid or not c.key or c.child_key != sym)


def _chain_end(nodes: Any, nid: int) -> int | None:
    """Where node `nid`'s parent chain ends: the root, `GONE` (through a husk), or None
    (a missing node or a cycle)."""
    seen, cur = set(), nid
    while cur != ROOT_ID and cur != GONE and cur in nodes and cur not in seen:
        seen.add(cur)
        cur = nodes[cur].parent
    return cur if cur in (ROOT_ID, GONE) else None


def _reaches(nodes: Any, nid: int, n: Any, cfg: Any) -> bool:
    """Whether the node reaches the root, or is an orphan (off L1, under a husk)."""
    end = _chain_end(nodes, nid)
    return end == ROOT_ID or (end == GONE and orphans_allowed(cfg) and not n.dev)


def orphans_allowed(cfg: Any) -> bool:
    return cfg.unbacked_evict == "reference"


def husk_bad(nid: int, n: Any, cfg: Any) -> str | None:
    """Why a node whose parent is `GONE` is no husk, or None."""
    if not orphans_allowed(cfg):
        return f"node {nid} has parent GONE (a husk) but unbacked_evict is not \"reference\""
    if n.dev or n.host is not None or not len(n.children):
        return f"node {nid} has parent GONE but is no husk: on L1 or backed, or without children"
    return None


class _HuskParent:
    """What a husk's rules read of its parent: none on L1, and a prefix that starts at
    the root (the husk's key is its whole prefix)."""

    dev = ()
    last_content = ROOT_CONTENT
    ns = 0  # (its children's namespace is their own: the root's identity is every namespace's)


HUSK_PARENT = _HuskParent()


def whole(w: Any) -> bool:
    """The whole-state rule; False when the tree is broken (the other rules read it)."""
    nodes = w.nodes
    if root_bad(nodes.get(ROOT_ID)):
        w.bad(T, ROOT_MSG)
        return False
    found = len(w.out)
    for nid, n in nodes.items():
        if nid != n.id:
            w.bad(T, _stored(nid, n))
        if nid == ROOT_ID:
            continue
        if not n.key:
            w.bad(T, f"node {nid} has an empty key")
        if n.parent == GONE:
            why = husk_bad(nid, n, w.cfg)
            if why:
                w.bad(T, why)
            continue
        p = nodes.get(n.parent)
        if p is None:
            w.bad(T, f"node {nid} has missing parent {n.parent}")
        elif p.children.get(n.child_key if n.key else None) != nid:
            w.bad(T, f"node {nid} is not its parent {n.parent}'s child for its first page")
        if not _reaches(nodes, nid, n, w.cfg):
            w.bad(T, f"node {nid} does not reach the root")
    for nid, n in nodes.items():
        for sym, cid in n.children.items():
            if not _child_ok(nodes, nid, cid, sym):
                w.bad(T, _wrong_child(nid, cid, sym))
    return len(w.out) == found


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_root(d: Any) -> bool:
    """The root, when the transition wrote it; False when it is broken."""
    if ROOT_ID in d.nodes and root_bad(d.An.get(ROOT_ID)):
        d.bad(T, ROOT_MSG)
        return False
    return True


def step_node(d: Any, nid: int, a: Any, b: Any) -> Any:
    """Node `nid` as the transition left it (`a`, None if gone) and found it (`b`): a
    node gone must be no child entry's; a node is stored under its id, its child
    entries name it, it has a key and is its parent's child, it reaches the root. The
    node's parent when the rest of the node's rules can read it (`HUSK_PARENT` for a
    husk), else None."""
    An = d.An
    if a is None:
        if b is not None and nid != ROOT_ID:
            p = An.get(b.parent)
            if p is not None and b.key and p.children.get(b.child_key) == nid:
                d.bad(T, _wrong_child(b.parent, nid, b.child_key))
        return None
    if nid != a.id:
        d.bad(T, _stored(nid, a))
    if b is None or a.children is not b.children:
        for sym, cid in a.children.items():
            if not _child_ok(An, nid, cid, sym):
                d.bad(T, _wrong_child(nid, cid, sym))
        if b is not None:  # a child whose entry went, which still names it its parent (unless written: its own check)
            for sym, cid in b.children.items():
                if a.children.get(sym) != cid and cid not in d.nodes and _child_ok(An, nid, cid, sym):
                    d.bad(T, f"node {cid} is not its parent {nid}'s child for its first page")
    if nid == ROOT_ID:
        return None
    if not a.key:
        d.bad(T, f"node {nid} has an empty key")
        return None
    if a.parent == GONE:
        why = husk_bad(nid, a, d.A.config)
        if why:
            d.bad(T, why)
            return None
        return HUSK_PARENT
    p = An.get(a.parent)
    if p is None:
        d.bad(T, f"node {nid} has missing parent {a.parent}")
        return None
    if p.children.get(a.child_key) != nid:
        d.bad(T, f"node {nid} is not its parent {a.parent}'s child for its first page")
    if b is not None and b.key and (b.parent != a.parent or b.child_key != a.child_key):
        q = An.get(b.parent)
        if q is not None and q.children.get(b.child_key) == nid and (b.parent, b.child_key) != (a.parent, a.child_key):
            d.bad(T, _wrong_child(b.parent, nid, b.child_key))
    if not _reaches(An, nid, a, d.A.config):
        d.bad(T, f"node {nid} does not reach the root")
        return None
    return p
