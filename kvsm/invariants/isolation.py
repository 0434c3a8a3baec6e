"""Invariant 15, Isolation: a request never holds KV computed in another namespace (a
tenant, a LoRA adapter: docs/model.md, "Namespaces"). Every node is of its parent's
namespace (but the root's children), and the node a matched or decoding request holds
and its carried host hit are of the request's namespace: so every node of the path it
holds is, and what those pages hold (their node's prefix in the node's namespace,
invariant 7) is the request's own KV; and every page an L3 reload has
read holds the KV its key names in the namespace of the request that made it (the
reload's namespace, whose node it admits).

A node's namespace never changes, and one namespace's walk never reaches another's
child, so the first clause can fail only where a step puts a request on another
namespace's node; the second where a disk key covers the tokens alone (`l3_key =
"tokens"`): a namespace's reload reads what another namespace spilled under the key."""

from __future__ import annotations

from typing import Any

from .. import content
from ..state import QUEUED, ROOT_ID

I = 15


def _node(rid: int, nid: int, n: Any, ns: int) -> str:
    return f"request {rid} of namespace {ns} holds node {nid} of namespace {n.ns}"


def _child(nid: int, n: Any, p: Any) -> str:
    return f"node {nid} of namespace {n.ns} hangs below node {n.parent} of namespace {p.ns}"


def _reload(op: Any, i: int, page: int) -> str:
    return (f"reload {op.key:x} of namespace {op.ns} read page {i} (host page {page}) holding "
            f"another namespace's or prefix's KV than its key names")


def _node_bad(nodes: Any, nid: int, n: Any) -> str | None:
    """Node `nid` below a parent of another namespace (the root's children excepted)."""
    p = nodes.get(n.parent)
    if p is not None and n.parent != ROOT_ID and p.ns != n.ns:
        return _child(nid, n, p)
    return None


def _request_bad(s: Any, rid: int, req: Any) -> str | None:
    """Request `rid`'s node, or its carried hit, of another namespace (with every node of
    its parent's namespace, the whole path is then of one)."""
    if req.phase == QUEUED:
        return None
    for nid in (req.node, req.hit) if req.hit else (req.node,):
        n = s.nodes.get(nid)
        if nid != ROOT_ID and n is not None and n.ns != req.ns:
            return _node(rid, nid, n, req.ns)
    return None


def _reload_bad(s: Any, op: Any) -> str | None:
    """The first page reload `op` has read that holds other KV than its key names in its
    namespace."""
    obj = s.objects.get(op.obj)
    if obj is None:
        return None
    want = content.l3_contents(s.config.l3_by_tokens, op.ns, op.hashes)
    hc, L2 = s.host_content, s.config.L2
    for i in range(min(obj.length, len(want))):
        page = obj.page(i)
        for region in range(len(s.config.payloads)):
            c = hc.get(region * L2 + page)
            if c is not None and c != want[i]:
                return _reload(op, i, page)
    return None


def _all(s: Any) -> list[str]:
    out = []
    nodes = s.nodes
    for nid, n in nodes.items():
        why = _node_bad(nodes, nid, n) if n.ns or nodes.get(n.parent, n).ns else None
        if why:
            out.append(why)
    for rid, req in s.requests.items():
        why = _request_bad(s, rid, req)
        if why:
            out.append(why)
    for op in s.reloads:
        why = _reload_bad(s, op)
        if why:
            out.append(why)
    return out


def whole(w: Any) -> None:
    for why in _all(w.s):
        w.bad(I, why)


def holds(s: Any) -> bool:
    return not _all(s)


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step(d: Any) -> None:
    """The nodes written and their children; every request when a node or a request was
    written (its node's namespace: O(requests)); the reloads, when they or the host pages
    changed."""
    A, B = d.A, d.B
    An = d.An
    for nid in d.nodes:
        a = An.get(nid)
        if a is None:
            continue
        why = _node_bad(An, nid, a)
        if why:
            d.bad(I, why)
        for cid in a.children.values():
            c = An.get(cid)
            if c is not None and cid not in d.nodes:
                why = _node_bad(An, cid, c)
                if why:
                    d.bad(I, why)
    if d.requests_w or d.nodes:
        for rid, req in A.requests.items():
            why = _request_bad(A, rid, req)
            if why:
                d.bad(I, why)
    if A.reloads and (A.reloads is not B.reloads or d.hostc_w or d.objects_w):
        for op in A.reloads:
            why = _reload_bad(A, op)
            if why:
                d.bad(I, why)
