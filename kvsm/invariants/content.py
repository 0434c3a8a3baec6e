"""Invariant 7, Content: a node's page hashes are its prefix's; each of its device pages
and each page of its object (every payload region) holds its prefix's KV, but a device
page a load-back still copies into, which holds nothing; a free device page holds
nothing (poisoned); a disk entry and a page staged for a spill hold the KV their hash
names."""

from __future__ import annotations

from typing import Any

from .. import content as prefixes
from ..state import ROOT_ID, lane_of

I = 7


def _hashes(nid: int) -> str:
    return f"node {nid} carries page hashes that are not its prefix's"


def _copying(p: int, nid: int, i: int, R: int) -> str:
    return f"device page {p} of node {nid} (page {i}) holds content while rank {lane_of(p, R)}'s load-back copy into it is in flight"


def _dev(p: int, nid: int, i: int) -> str:
    return f"device page {p} of node {nid} (page {i}) does not hold its prefix's KV"


def _host(page: int, nid: int, region: int) -> str:
    return f"host page {page} of node {nid} (region {region}) does not hold its prefix's KV"


def _free(p: int) -> str:
    return f"free device page {p} still holds content (not poisoned)"


def _disk(r: int, h: int) -> str:
    return f"rank {r}'s disk entry {h:x} holds the KV of another prefix (or garbage)"


def _staged(r: int, h: int) -> str:
    return f"rank {r} staged page {h:x} for a spill with the wrong content"


def node_pages(r: Any, s: Any, nid: int, n: Any, expect: tuple[int, ...], obj: Any, copying: Any) -> None:
    """Node `nid`'s hashes against `expect` (its prefix's), and what its device pages and
    its object's pages (`obj`, or None) hold."""
    if n.hashes != expect:
        r.bad(I, _hashes(nid))
    dc, R = s.dev_content, s.config.R
    for i, p in enumerate(n.dev[: len(expect)]):  # (pages past the key: invariant 2)
        if p in copying:
            if p in dc:
                r.bad(I, _copying(p, nid, i, R))
        elif dc.get(p) != expect[i]:
            r.bad(I, _dev(p, nid, i))
    if obj is not None:
        hc, L2 = s.host_content, s.config.L2
        for region in range(len(s.config.payloads)):
            for i in range(min(obj.length, len(expect))):
                if hc.get(region * L2 + obj.page(i)) != expect[i]:
                    r.bad(I, _host(obj.page(i), nid, region))


def _staging(r: Any, staged: Any, by_tokens: bool, before: Any = None) -> None:
    for rank, ops in enumerate(staged):
        if before is not None and ops == before[rank]:
            continue
        for op_pages in ops:
            for h, c in op_pages:
                if c != h and not prefixes.key_holds(by_tokens, h, c):
                    r.bad(I, _staged(rank, h))


def whole(w: Any) -> None:
    s = w.s
    copying = w.copying
    for nid, n in w.nodes.items():
        if nid == ROOT_ID:
            continue
        expect = prefixes.prefix_content_in(n.ns, w.chain_of(nid))[-len(n.key) :]
        obj = s.objects.get(n.host) if n.host is not None else None
        node_pages(w, s, nid, n, expect, obj, copying)
    owner = w.owner
    for p in s.dev_content.keys():
        if p not in owner or owner[p] == "the free list":
            w.bad(I, _free(p))
    by_tokens = s.config.l3_by_tokens
    for (r, h), c in s.l3.items():
        if c != h and not prefixes.key_holds(by_tokens, h, c):
            w.bad(I, _disk(r, h))
    _staging(w, s.spill_staged, by_tokens)


def holds(s: Any, l3_ok: bool) -> bool:
    """The disks' and the staging's part of the whole-state rule, decided fast
    (`kvsm.invariants.fast`; `l3_ok`: every disk entry holds the KV its hash names)."""
    if not l3_ok:
        return False
    by_tokens = s.config.l3_by_tokens
    for staged in s.spill_staged:
        for op_pages in staged:
            for h, c in op_pages:
                if c != h and not prefixes.key_holds(by_tokens, h, c):
                    return False
    return True


def disks_hold(s: Any, wrong: int) -> bool:
    """Whether every disk entry holds the KV its hash names, given `wrong`, the entries
    whose content is not their hash (each checked here when keys cover tokens alone)."""
    if not wrong:
        return True
    if not s.config.l3_by_tokens:
        return False
    return all(prefixes.key_holds(True, h, c) for (_, h), c in s.l3.items())


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_node(d: Any, nid: int, a: Any, b: Any, p: Any, obj: Any) -> bool:
    """Node `nid`'s content, unless nothing it rests on changed; whether it did not."""
    B = d.B
    same = (
        b is not None and a.key is b.key and a.hashes is b.hashes and a.dev is b.dev and a.host == b.host
        and a.parent == b.parent and a.ns == b.ns and p.last_content == _last(d.Bn.get(a.parent))
        and p.ns == _ns(d.Bn.get(a.parent))
        and (obj is None or obj is B.objects.get(a.host))
    )
    if not same:
        node_pages(d, d.A, nid, a, prefixes.chain_in(a.ns, prefixes.rebase(p.last_content, p.ns, a.ns), a.key, d.chain), obj, d.copying)
        d.content_checked.add(nid)
    return same


def step_children(d: Any) -> None:
    """The children of the nodes whose last page's content changed."""
    An = d.An
    for nid in d.content_children:
        a = An.get(nid)
        if a is None:
            continue
        for cid in a.children.values():
            if cid not in d.content_checked:
                c = An[cid]
                obj = d.A.objects.get(c.host) if c.host is not None else None
                node_pages(d, d.A, cid, c, prefixes.chain_in(c.ns, prefixes.rebase(a.last_content, a.ns, c.ns), c.key, d.chain), obj, d.copying)
                d.content_checked.add(cid)


def _last(n: Any) -> int | None:
    return None if n is None else n.last_content


def _ns(n: Any) -> int | None:
    return None if n is None else n.ns


def step_pages(d: Any) -> None:
    """The device, host and disk pages the transition wrote, and the staging."""
    A, B, R, L2, sh = d.A, d.B, d.R, d.L2, d.sh
    An = d.An
    for p in d.devc_w:
        c = A.dev_content.get(p)
        if c is None and p in d.copying:
            continue
        holders = sh.dev.get(p, ())
        if not holders:
            if c is not None:
                d.bad(I, _free(p))
            continue
        kind, who = holders[0]
        if kind == "node" and who not in d.content_checked:
            n = An[who]
            i = n.dev.index(p)
            if p in d.copying:
                d.bad(I, _copying(p, who, i, R))
            elif c != n.hashes[i]:
                d.bad(I, _dev(p, who, i))
    for k in d.hostc_w:
        page = k % L2
        for key in sh.host.get(page, ()):
            obj = A.objects.get(key)
            n = An.get(obj.owner) if obj is not None else None
            if n is None or n.host != key or obj.owner in d.content_checked:
                continue
            i = page - obj.base if not obj.pages else obj.pages.index(page)
            if i < len(n.hashes) and A.host_content.get(k) != n.hashes[i]:
                d.bad(I, _host(page, n.id, k // L2))
    for key in d.l3_w:
        c = A.l3.get(key)
        if c is None:
            d.l3_removed = d.l3_removed or key in B.l3
            continue
        if c != key[1] and not prefixes.key_holds(A.config.l3_by_tokens, key[1], c):
            d.bad(I, _disk(key[0], key[1]))
    if A.spill_staged != B.spill_staged:
        _staging(d, A.spill_staged, A.config.l3_by_tokens, B.spill_staged)
