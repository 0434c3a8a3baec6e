"""Invariant 2, Residency: a node holds a device page per page of its key or none; one
with none is backed by a committed object (but a husk, `GONE`'s child: invariant 1 says
what one is); a node on L1 has its parent on L1."""

from __future__ import annotations

from typing import Any

from ..state import GONE, ROOT_ID

I = 2


def _pages(nid: int, n: Any) -> str:
    return f"node {nid} has {len(n.dev)} device pages for {len(n.key)} pages of key"


def _unbacked(nid: int) -> str:
    return f"node {nid} is neither on L1 nor backed on L2"


def _uncommitted(nid: int, host: int) -> str:
    return f"node {nid} points at object {host}, which is not committed"


def _orphan(nid: int, parent: int) -> str:
    return f"node {nid} is on L1 but its parent {parent} is not"


def whole(w: Any) -> None:
    s, nodes = w.s, w.nodes
    for nid, n in nodes.items():
        if nid == ROOT_ID:
            continue
        if n.dev and len(n.dev) != len(n.key):
            w.bad(I, _pages(nid, n))
        if not n.dev:
            if n.host is None:
                if n.parent != GONE:
                    w.bad(I, _unbacked(nid))
            elif n.host not in s.objects or not s.objects[n.host].committed:
                w.bad(I, _uncommitted(nid, n.host))
        if n.dev and n.parent != ROOT_ID and not nodes[n.parent].dev:
            w.bad(I, _orphan(nid, n.parent))


def step_node(d: Any, nid: int, a: Any, b: Any, p: Any, obj: Any) -> None:
    """Node `nid` (`a`, was `b`) under its parent `p`, backed by `obj` (or None); a node
    that left L1 has no child on L1."""
    if a.dev and len(a.dev) != len(a.key):
        d.bad(I, _pages(nid, a))
    if not a.dev:
        if a.host is None:
            if a.parent != GONE:
                d.bad(I, _unbacked(nid))
        elif obj is None or not obj.committed:
            d.bad(I, _uncommitted(nid, a.host))
        if b is not None and b.dev:
            for cid in a.children.values():
                if d.An[cid].dev:
                    d.bad(I, _orphan(cid, nid))
    if a.dev and a.parent != ROOT_ID and not p.dev:
        d.bad(I, _orphan(nid, a.parent))
