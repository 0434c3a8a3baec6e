"""Invariant 5, DevicePages: every device page is in range and held by exactly one of a
node, a request and its lane's free list; an in-flight load-back copies each host page
into the device page its node holds at the same index."""

from __future__ import annotations

from typing import Any

from ..state import ClusterState, lane_of

I = 5
FREE = "the free list"


def _outside(who: str, page: int, pages: int) -> str:
    return f"{who} holds device page {page}, outside 0..{pages - 1}"


def _twice(page: int, first: str, second: str) -> str:
    return f"device page {page} is held by {first} and by {second}"


def _lane(page: int, lane: int) -> str:
    return f"free page {page} is listed in lane {lane}"


def _leak(pages: list[int]) -> str:
    return f"device pages {pages} are neither used nor free (leak)"


def _load_target(page: int, who: str) -> str:
    return f"a load-back in flight targets device page {page}, which {who} holds, not a node"


def _load_copy(hp: int, page: int, i: int, nid: int) -> str:
    return f"a load-back in flight copies host page {hp} into device page {page}, page {i} of node {nid}, which is not that page's copy"


def whole(w: Any) -> None:
    """Also fills `w.owner` (who holds each device page), which invariant 7 reads."""
    s, cfg, R = w.s, w.cfg, w.R
    owner = w.owner
    found = len(w.out)

    def claim(page: int, who: str) -> None:
        if not 0 <= page < cfg.device_pages:
            w.bad(I, _outside(who, page, cfg.device_pages))
            owner.setdefault(page, who)  # (held: what it holds is not a free page's)
        elif page in owner:
            w.bad(I, _twice(page, owner[page], who))
        else:
            owner[page] = who

    for nid, n in w.nodes.items():
        for p in n.dev:
            claim(p, f"node {nid}")
    for req in s.requests.values():
        for p in req.pages:
            claim(p, f"request {req.id}")
    for lane, free in enumerate(s.dev_free):
        for p in free:
            if lane_of(p, R) != lane:
                w.bad(I, _lane(p, lane))
            claim(p, FREE)
    if len(owner) != cfg.device_pages and len(w.out) == found:
        missing = sorted(set(range(cfg.device_pages)) - set(owner))
        w.bad(I, _leak(missing[:8]))
    held_at = {p: (nid, i) for nid, n in w.nodes.items() for i, p in enumerate(n.dev)}
    for op in s.loads:
        for p, hp in op.pages:
            where = held_at.get(p)
            if where is None:
                w.bad(I, _load_target(p, owner.get(p, "nobody")))
                continue
            n = w.nodes[where[0]]
            obj = s.objects.get(n.host) if n.host is not None else None
            if obj is None or obj.page(where[1]) != hp:
                w.bad(I, _load_copy(hp, p, where[1], n.id))


def holds(s: ClusterState, used: list[int], dev_content: Any, by_id: Any) -> bool:
    """The whole-state rule but the load-backs', decided fast (`kvsm.invariants.fast`):
    `used` lists the nodes' pages (in range by each node's own check) and `dev_content`
    is the device content as a dict (a page holding content is used: invariant 7)."""
    pages, R = s.config.device_pages, s.config.R
    req_pages = [p for req in s.requests.values() for p in req.pages]
    used = used + req_pages
    used_set = set(used)
    if len(used_set) != len(used) or (req_pages and (min(req_pages) < 0 or max(req_pages) >= pages)):
        return False
    free_count = 0
    free_set: set[int] = set()
    for lane, free in enumerate(s.dev_free):
        for j, chunk in enumerate(free._chunks):
            if not by_id(("lane", R, lane, pages, j), chunk, lambda c, lane=lane: all(p % R == lane and 0 <= p < pages for p in c)):
                return False
            free_set.update(chunk)
        free_count += len(free)
    if len(free_set) != free_count or not used_set.isdisjoint(free_set) or len(used) + free_count != pages:
        return False
    return used_set.issuperset(dev_content)


def loads_hold(s: ClusterState) -> bool:
    """The load-backs' part of the whole-state rule, decided fast."""
    nodes = s.nodes
    held_at: dict[int, Any] = {}
    for op in s.loads:
        for p, _ in op.pages:
            held_at[p] = None
    for nid, n in nodes.items():
        for i, p in enumerate(n.dev):
            if p in held_at:
                held_at[p] = (nid, i)
    for op in s.loads:
        for p, hp in op.pages:
            w = held_at[p]
            if w is None:
                return False
            n = nodes[w[0]]
            obj = s.objects.get(n.host) if n.host is not None else None
            if obj is None or obj.page(w[1]) != hp:
                return False
    return True


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def _holder(h: tuple[str, int]) -> str:
    return f"{h[0]} {h[1]}"


def step(d: Any) -> None:
    """Every device page the transition moved or wrote (`d.dev_pages`), against the
    checker's index of who holds it and the free lists; the count of pages, when any
    moved or a free list changed."""
    A, B, cfg, R, sh = d.A, d.B, d.cfg, d.R, d.sh
    lanes = A.dev_free
    changed = [k for k in range(R) if lanes[k] is not B.dev_free[k]]
    if not (d.dev_pages or changed):
        return
    for p in sorted(d.dev_pages):
        holders = sh.dev.get(p, ())
        if not 0 <= p < cfg.device_pages:
            if holders:
                d.bad(I, _outside(_holder(holders[0]), p, cfg.device_pages))
            continue
        free = p in lanes[p % R]
        for k in changed:
            if k != p % R and p in lanes[k]:
                d.bad(I, _lane(p, k))
        held = len(holders) + free
        if held > 1:
            names = [_holder(h) for h in holders] + ([FREE] if free else [])
            d.bad(I, _twice(p, names[0], names[1]))
        elif not held:
            d.bad(I, _leak([p]))
    used = len(sh.dev)
    free_total = sum(len(x) for x in lanes)
    if used + free_total != cfg.device_pages and not d.has(I):
        d.bad(I, f"{cfg.device_pages - used - free_total} device pages are neither used nor free (leak), or a free page is outside the pool")


def step_loads(d: Any) -> None:
    """The in-flight load-backs (few pages: checked whole while any is in flight)."""
    A, sh = d.A, d.sh
    for op in A.loads:
        for p, hp in op.pages:
            holders = sh.dev.get(p, ())
            if not holders or holders[0][0] != "node":
                d.bad(I, _load_target(p, _holder(holders[0]) if holders else FREE))
                continue
            n = d.An[holders[0][1]]
            i = n.dev.index(p)
            obj = A.objects.get(n.host) if n.host is not None else None
            if obj is None or obj.page(i) != hp:
                d.bad(I, _load_copy(hp, p, i, n.id))
