"""Invariant 6, HostPages: per payload region, the objects and the free runs tile the
host pool (free runs in range, neither overlapping nor touching); a committed object
belongs to the node that points at it, with its length; an uncommitted one to a
pending backup, a prepared one or exactly one reload of its length."""

from __future__ import annotations

from typing import Any

from ..state import ClusterState, page_runs

I = 6


def _outside(base: int, length: int) -> str:
    return f"free run ({base}, {length}) is outside the pool"


def _touch(page: int, region: int) -> str:
    return f"free runs overlap or touch at page {page} (region {region})"


def _leak(pages: list[int], region: int) -> str:
    return f"host pages {pages} (region {region}) are neither used nor free (leak)"


def _twice(page: int, region: int, first: Any, second: Any) -> str:
    return f"host page {page} (region {region}) is in object {first} and object {second}"


def _free_and_used(page: int, key: Any) -> str:
    return f"host page {page} is free and in object {key}"


def _owner(nid: int, host: int) -> str:
    return f"node {nid} and object {host} disagree on ownership"


def _regions(w: Any) -> None:
    s, L2 = w.s, w.L2
    for region, runs in enumerate(s.l2_free):
        used: dict[int, str] = {}
        for key, obj in s.objects.items():
            for page in obj.page_list():
                if page in used:
                    w.bad(I, _twice(page, region, used[page], key))
                used[page] = f"{key}"
        prev_end = -1
        for base, length in runs:
            if length <= 0 or base < 0 or base + length > L2:
                w.bad(I, _outside(base, length))
            if base <= prev_end:
                w.bad(I, _touch(base, region))
            prev_end = base + length
            for page in range(base, base + length):
                if page in used:
                    w.bad(I, _free_and_used(page, used[page]))
                used[page] = "free"
        if len(used) != L2:
            missing = sorted(set(range(L2)) - set(used))
            w.bad(I, _leak(missing[:8], region))


def _object(r: Any, s: ClusterState, key: int, obj: Any, prepared: set[int]) -> None:
    """What an object belongs to, and (l2_alloc = "pages") the pages it lists."""
    if (s.config.l2_alloc == "pages") != bool(obj.pages) or (obj.pages and (len(obj.pages) != obj.length or obj.pages[0] != obj.base)):
        r.bad(I, f"object {key} lists pages {list(obj.pages)} for base {obj.base} and length {obj.length} (l2_alloc = {s.config.l2_alloc})")
    n = s.nodes.get(obj.owner)
    if obj.committed:
        if n is None or n.host != key:
            r.bad(I, f"committed object {key} belongs to no node")
        elif obj.length != n.pages:
            r.bad(I, f"committed object {key} has {obj.length} pages for node {n.id} of {n.pages}")
    elif key in s.pending:
        if s.pending[key].obj != key:
            r.bad(I, f"uncommitted object {key} and its pending backup disagree")
    elif key in prepared:
        pass
    else:
        ops = [op for op in s.reloads if op.obj == key]
        if len(ops) != 1:
            r.bad(I, f"uncommitted object {key} belongs to no pending backup or reload")
        elif obj.length != len(ops[0].hashes):
            r.bad(I, f"reload object {key} has {obj.length} pages for its reload's pages")


def hit_faults(s: ClusterState) -> list[str]:
    """Under carry_host_hit: a host hit a match carries names a node in the tree with its
    L2 copy (the host pages its load-back will read are not freed under it)."""
    if not s.config.carry_host_hit:
        return []
    out = []
    for q in s.requests.values():
        if q.hit and (q.hit not in s.nodes or s.nodes[q.hit].host is None):
            out.append(f"request {q.id} carries a host hit on node {q.hit}, which no longer holds its L2 copy")
    return out


def whole(w: Any) -> None:
    s = w.s
    for msg in hit_faults(s):
        w.bad(I, msg)
    _regions(w)
    for key, obj in s.objects.items():
        _object(w, s, key, obj, w.prepared)
    for nid, n in w.nodes.items():
        if n.host is not None and n.host in s.objects and s.objects[n.host].owner != nid:
            w.bad(I, _owner(nid, n.host))


def holds(s: ClusterState, prepared: set[int]) -> bool:
    """The whole-state rule but a node's side of its object's ownership (each node's own
    check), decided fast (`kvsm.invariants.fast`)."""
    if hit_faults(s):
        return False
    L2 = s.config.L2
    objects, nodes, pending = s.objects, s.nodes, s.pending
    spans = sorted(run for o in objects.values() if o.length > 0 for run in (page_runs(o.pages) if o.pages else ((o.base, o.length),)))
    for runs in s.l2_free:
        free_runs = [run for chunk in runs._chunks for run in chunk]
        merged = sorted([(b, n, False) for b, n in spans] + [(b, n, True) for b, n in free_runs])
        at = 0
        prev_free = False
        for base, length, is_free in merged:
            if base != at or length <= 0 or (is_free and prev_free):
                return False
            at = base + length
            prev_free = is_free
        if at != L2:
            return False
    paged = s.config.l2_alloc == "pages"
    for key, obj in objects.items():
        if obj.length < 0 or paged != bool(obj.pages) or (paged and (len(obj.pages) != obj.length or obj.pages[0] != obj.base)):
            return False
        if obj.committed:
            n = nodes.get(obj.owner)
            if n is None or n.host != key or obj.length != n.pages:
                return False
        elif key in pending:
            if pending[key].obj != key:
                return False
        elif key in prepared:
            pass
        else:
            ops = [op for op in s.reloads if op.obj == key]
            if len(ops) != 1 or obj.length != len(ops[0].hashes):
                return False
    return True


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_node(d: Any, nid: int, a: Any, obj: Any) -> None:
    if obj.owner != nid:
        d.bad(I, _owner(nid, a.host))


def step_hits(d: Any) -> None:
    """The carried host hits (after a step that wrote nodes or requests)."""
    for msg in hit_faults(d.A):
        d.bad(I, msg)


def step(d: Any) -> None:
    """The host pages the transition moved (`d.host_pages`), in every region whose free
    runs changed or holds them; the count of pages; the objects written."""
    A, B, L2, sh = d.A, d.B, d.L2, d.sh
    host_pages = d.host_pages
    if host_pages or any(a is not b for a, b in zip(A.l2_free, B.l2_free)):
        for region, runs in enumerate(A.l2_free):
            if runs is B.l2_free[region] and not host_pages:
                continue
            for page in sorted(host_pages):  # held once, by an object or a free run in range, apart from its neighbours
                owners = sh.host.get(page, ())
                if len(owners) > 1:
                    d.bad(I, _twice(page, region, owners[0], owners[1]))
                run = runs.floor_lt((page + 1, 0)) if runs else None
                free = run is not None and run[0] <= page < run[0] + run[1]
                if free and owners:
                    d.bad(I, _free_and_used(page, owners[0]))
                if not free and not owners:
                    d.bad(I, _leak([page], region))
                if run is not None:
                    prev = runs.floor_lt(run)
                    nxt = runs.ceil_ge((run[0] + 1, 0))
                    if run[1] <= 0 or run[0] < 0 or run[0] + run[1] > L2:
                        d.bad(I, _outside(run[0], run[1]))
                    if prev is not None and prev[0] + prev[1] >= run[0]:
                        d.bad(I, _touch(run[0], region))
                    if nxt is not None and run[0] + run[1] >= nxt[0]:
                        d.bad(I, _touch(nxt[0], region))
            if runs is not B.l2_free[region] or d.objects_w:
                free_total = sum(r[1] for r in runs)
                if free_total + sh.obj_pages != L2 and not d.has(I):
                    d.bad(I, f"{L2 - free_total - sh.obj_pages} host pages (region {region}) are neither used nor free (leak), or overlap")
    for keys in (d.objects_w, d.unlinked):
        for key in keys:
            obj = A.objects.get(key)
            if obj is not None:
                _object(d, A, key, obj, d.prepared)
