"""The checks after one transition, over what it wrote (`kvsm.checking`): each
invariant as a relation between an entry and its neighbours, checked for the entries
the transition wrote and their neighbours, with the checker's own indexes of who holds
each device and host page (`_Shadow`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .. import effects as fx
from ..invariants import NAMES, agreement_violation, collectives_violations, contract, prepared_ids, prepared_violations
from ..state import MATCHED, QUEUED, ROOT_ID, ClusterState, lane_of
from ..victims import backup_candidate, dev_victim_key, host_victim_key
from .full import _chain


class _Shadow:
    """Who holds each device page (nodes and requests), which objects cover each host
    page, and how many non-queued requests stop at each node: rebuilt from a whole
    state, then kept up to date from each transition's writes."""

    __slots__ = ("dev", "host", "req_at", "obj_pages")

    def __init__(self, s: ClusterState) -> None:
        dev: dict[int, list] = {}
        for nid, n in s.nodes.items():
            for p in n.dev:
                dev.setdefault(p, []).append(("node", nid))
        req_at: Counter = Counter()
        for rid, r in s.requests.items():
            for p in r.pages:
                dev.setdefault(p, []).append(("request", rid))
            if r.phase != QUEUED:
                req_at[r.node] += 1
        host: dict[int, list] = {}
        total = 0
        for key, o in s.objects.items():
            total += o.length
            for p in range(o.base, o.base + o.length):
                host.setdefault(p, []).append(key)
        self.dev, self.host, self.req_at, self.obj_pages = dev, host, req_at, total


def _holder(h: tuple[str, int]) -> str:
    return f"{h[0]} {h[1]}"


def _move(index: dict, who: Any, old: Any, new: Any) -> None:
    for p in old:
        lst = index.get(p)
        if lst is not None:
            try:
                lst.remove(who)
            except ValueError:
                pass
            if not lst:
                del index[p]
    for p in new:
        index.setdefault(p, []).append(who)


def local_violations(B: ClusterState, A: ClusterState, written: tuple[set, ...], sh: _Shadow, stats: Any = None) -> list[str]:
    """Invariants 1-10 and 12 over what one transition from `B` to `A` wrote (`written`: the keys
    it set or deleted per map of `kvsm.digest_sums.MAP_COMPONENTS`); updates `sh`."""
    nodes_w, objects_w, pending_w, requests_w, devc_w, hostc_w, cand_w, l3_w = written
    out: list[str] = []

    def bad(i: int, msg: str) -> None:
        out.append(f"{i} {NAMES[i]}: {msg}")

    cfg = A.config
    R, L2 = cfg.R, cfg.L2
    An, Bn = A.nodes, B.nodes
    Ap, Bp = A.pending, B.pending
    if stats is not None:
        stats.state_steps += 1  # (one evaluation of each of STATE_INVARIANTS)

    # ---- which entries to look at ----------------------------------------------------------
    nodes = set(nodes_w)
    nodes.update(pending_w)
    for key in objects_w:
        for S in (B, A):
            o = S.objects.get(key)
            if o is not None and o.owner in An:
                nodes.add(o.owner)
    # nodes whose lock relation (own requests + locked backup + children's) may have changed
    lockset = set()
    content_children = set()  # nodes whose children's content must be checked again
    dev_pages: set[int] = set(devc_w)
    host_pages: set[int] = set()
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        lockset.add(nid)
        for x in (a, b):
            if x is not None and x.parent in An:
                lockset.add(x.parent)
        if a is not None and b is not None:
            if a.dev is not b.dev:
                dev_pages.update(a.dev)
                dev_pages.update(b.dev)
                _move(sh.dev, ("node", nid), b.dev, a.dev)
            if a.last_content != b.last_content:
                content_children.add(nid)
        elif a is not None:
            dev_pages.update(a.dev)
            _move(sh.dev, ("node", nid), (), a.dev)
        elif b is not None:
            dev_pages.update(b.dev)
            _move(sh.dev, ("node", nid), b.dev, ())
    for rid in requests_w:
        a, b = A.requests.get(rid), B.requests.get(rid)
        if b is not None:
            if b.phase != QUEUED:
                sh.req_at[b.node] -= 1
                lockset.add(b.node)
                lockset.update(_path(B, b.node))
        if a is not None:
            if a.phase != QUEUED:
                sh.req_at[a.node] += 1
                lockset.add(a.node)
                lockset.update(_path(A, a.node) if a.node in An else ())
        old = b.pages if b is not None else ()
        new = a.pages if a is not None else ()
        if old is not new:
            dev_pages.update(old)
            dev_pages.update(new)
            _move(sh.dev, ("request", rid), old, new)
    for e in A.effects:
        if isinstance(e, (fx.Fill, fx.Load, fx.PoisonDev, fx.Store)):
            dev_pages.add(e.page)
        if isinstance(e, fx.PoisonHost):
            host_pages.update(range(e.base, e.base + e.length))
    for key in objects_w:
        a, b = A.objects.get(key), B.objects.get(key)
        old = range(b.base, b.base + b.length) if b is not None else ()
        new = range(a.base, a.base + a.length) if a is not None else ()
        if a is None or b is None or (a.base, a.length) != (b.base, b.length):
            host_pages.update(old)
            host_pages.update(new)
            _move(sh.host, key, old, new)
            sh.obj_pages += (a.length if a is not None else 0) - (b.length if b is not None else 0)
    for k in hostc_w:
        host_pages.add(k % L2)

    # in-flight load-backs: the pages each still copies, and the nodes whose locks they hold
    # (the per-rank tuples are compared by value: a transaction builds them anew)
    loads_changed = A.loads is not B.loads or A.load_done != B.load_done
    copying = _copying(A) if A.loads else frozenset()
    if A.loads is not B.loads:
        for S in (A, B):
            for op in S.loads:
                if op.node in An:
                    lockset.add(op.node)
    if loads_changed:
        # a page whose copy landed now holds what its node says (LoadDone writes it, or
        # deletes it when the host page held nothing)
        for p in (_copying(B) if B.loads else frozenset()) - copying:
            dev_pages.add(p)
            devc_w = set(devc_w) | {p}

    # ---- 1 Tree, 2 Residency, 7 Content, 8 Durable, 9 Reload (per node) ---------------------
    content_checked: set[int] = set()
    if ROOT_ID in nodes:
        root = An.get(ROOT_ID)
        if root is None or root.key or root.dev or root.host is not None:
            bad(1, "node 0 is not an empty root")
            return out
    for nid in sorted(nodes):
        a = An.get(nid)
        b = Bn.get(nid)
        if a is None:
            if b is not None and nid != ROOT_ID:
                p = An.get(b.parent)
                if p is not None and b.key and p.children.get(b.key[0]) == nid:
                    bad(1, f"node {b.parent} lists child {nid} under page {b.key[0]} wrongly")
            continue
        if nid != a.id:
            bad(1, f"node stored under {nid} has id {a.id}")
        if b is None or a.children is not b.children:
            for sym, cid in a.children.items():
                c = An.get(cid)
                if c is None or c.parent != nid or not c.key or c.key[0] != sym:
                    bad(1, f"node {nid} lists child {cid} under page {sym} wrongly")
        if nid == ROOT_ID:
            continue
        if not a.key:
            bad(1, f"node {nid} has an empty key")
            continue
        p = An.get(a.parent)
        if p is None:
            bad(1, f"node {nid} has missing parent {a.parent}")
            continue
        if p.children.get(a.key[0]) != nid:
            bad(1, f"node {nid} is not its parent {a.parent}'s child for its first page")
        if b is not None and b.key and (b.parent != a.parent or b.key[0] != a.key[0]):
            q = An.get(b.parent)
            if q is not None and q.children.get(b.key[0]) == nid and (b.parent, b.key[0]) != (a.parent, a.key[0]):
                bad(1, f"node {b.parent} lists child {nid} under page {b.key[0]} wrongly")
        seen, cur = set(), nid
        while cur != ROOT_ID and cur in An and cur not in seen:
            seen.add(cur)
            cur = An[cur].parent
        if cur != ROOT_ID:
            bad(1, f"node {nid} does not reach the root")
            continue
        if nid >= A.next_id:
            bad(10, f"next_id {A.next_id} is not above every node id")
        if a.touched > A.clock:
            bad(10, f"a node is stamped after the clock {A.clock}")
        # 2 Residency
        if a.dev and len(a.dev) != len(a.key):
            bad(2, f"node {nid} has {len(a.dev)} device pages for {len(a.key)} pages of key")
        obj = A.objects.get(a.host) if a.host is not None else None
        if not a.dev:
            if a.host is None:
                bad(2, f"node {nid} is neither on L1 nor backed on L2")
            elif obj is None or not obj.committed:
                bad(2, f"node {nid} points at object {a.host}, which is not committed")
            if b is not None and b.dev:
                for cid in a.children.values():
                    if An[cid].dev:
                        bad(2, f"node {cid} is on L1 but its parent {nid} is not")
        if a.dev and a.parent != ROOT_ID and not p.dev:
            bad(2, f"node {nid} is on L1 but its parent {a.parent} is not")
        # 6: a node and its object agree on ownership; 9: on length
        if obj is not None:
            if obj.owner != nid:
                bad(6, f"node {nid} and object {a.host} disagree on ownership")
            if not (a.pages == obj.length == len(a.hashes)):
                bad(9, f"node {nid} has {a.pages} pages, object {a.host} {obj.length}, {len(a.hashes)} hashes")
        # 7 Content: the node's page hashes, its device pages and its object's pages
        same = (
            b is not None and a.key is b.key and a.hashes is b.hashes and a.dev is b.dev and a.host == b.host
            and a.parent == b.parent and p.last_content == _last(Bn.get(a.parent))
            and (obj is None or obj is B.objects.get(a.host))
        )
        if not same:
            _node_content(A, nid, a, p.last_content, obj, bad, copying)
            content_checked.add(nid)
        if a.durable and (not same or not b.durable):
            for i, h in enumerate(a.hashes):
                if (lane_of(i, R), h) not in A.l3:
                    bad(8, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")
        # 10 Counts: the victim indexes and the backup index hold exactly this node's keys
    for nid in content_children:
        a = An.get(nid)
        if a is None:
            continue
        for cid in a.children.values():
            if cid not in content_checked:
                c = An[cid]
                _node_content(A, cid, c, a.last_content, A.objects.get(c.host) if c.host is not None else None, bad, copying)
                content_checked.add(cid)
    if any(v.startswith("1 ") for v in out):
        return out  # the rest reads the tree (children, paths) that is broken

    # ---- 3 Locks -----------------------------------------------------------------------------
    for rid in requests_w:
        req = A.requests.get(rid)
        if req is None:
            continue
        if req.phase not in ("queued", "matched", "decoding"):
            bad(3, f"request {rid} has unknown phase {req.phase!r}")
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                bad(3, f"queued request {rid} holds a lock on node {req.node}")
            continue
        if req.node not in An:
            bad(3, f"request {rid} locks missing node {req.node}")
        elif req.phase == MATCHED and req.node != ROOT_ID and not An[req.node].dev:
            bad(3, f"request {rid} locks node {req.node}, which is not on L1")
        if rid >= A.next_rid:
            bad(10, f"next_rid {A.next_rid} is not above every request id")
    for nid in lockset:
        n = An.get(nid)
        if n is None:
            if sh.req_at.get(nid, 0) > 0:
                bad(3, f"a request locks missing node {nid}")
            continue
        if nid == ROOT_ID:
            if n.lock:
                bad(3, f"node 0 has lock {n.lock} but 0 holders")
            continue
        pend = Ap.get(nid)
        want = sh.req_at.get(nid, 0) + (1 if pend is not None and pend.locked else 0)
        want += sum(1 for op in A.loads if op.node == nid)
        for cid in n.children.values():
            c = An[cid]
            cp = Ap.get(cid)
            want += c.lock - (1 if cp is not None and cp.locked else 0)
        if n.lock != want:
            bad(3, f"node {nid} has lock {n.lock} but {want} holders")
        if n.lock and not n.dev:
            bad(3, f"node {nid} is locked but not on L1")

    # ---- 4 Pending ---------------------------------------------------------------------------
    prepared = prepared_ids(A)
    if pending_w or A.writes is not B.writes or A.prepared is not B.prepared:
        if len(A.writes) != len(set(A.writes)) or set(A.writes) != set(Ap.keys()) | prepared:
            bad(4, f"writes {list(A.writes)} and pending {sorted(Ap.keys())} (and prepared {sorted(prepared)}) disagree")
    if A.prepared and (A.prepared is not B.prepared or A.writes is not B.writes or A.write_done != B.write_done
                       or requests_w or objects_w or nodes_w):
        out.extend(prepared_violations(A))
    for nid in nodes:
        pend = Ap.get(nid)
        if pend is None:
            continue
        n = An.get(nid)
        if n is None:
            bad(4, f"pending backup of missing node {nid}")
            continue
        if not n.lock:
            bad(4, f"pending node {nid} is not locked")
        if not n.dev:
            bad(4, f"pending node {nid} is not on L1")
        if n.host is not None:
            bad(4, f"pending node {nid} is already backed")
        if dev_victim_key(n, True, contract(cfg)) is not None:
            bad(4, f"pending node {nid} is evictable")
        obj = A.objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            bad(4, f"pending node {nid} has object {pend.obj} that is missing, committed or of another length (split)")
    if A.write_done != B.write_done or A.writes is not B.writes:
        for r, d in enumerate(A.write_done):
            if not 0 <= d <= len(A.writes):
                bad(4, f"rank {r} has finished {d} of {len(A.writes)} writes")

    # ---- 5 Device pages ----------------------------------------------------------------------
    lanes = A.dev_free
    changed = [k for k in range(R) if lanes[k] is not B.dev_free[k]]
    if dev_pages or changed:
        for p in sorted(dev_pages):
            holders = sh.dev.get(p, ())
            if not 0 <= p < cfg.device_pages:
                if holders:
                    bad(5, f"{_holder(holders[0])} holds device page {p}, outside 0..{cfg.device_pages - 1}")
                continue
            free = p in lanes[p % R]
            for k in changed:
                if k != p % R and p in lanes[k]:
                    bad(5, f"free page {p} is listed in lane {k}")
            held = len(holders) + free
            if held > 1:
                names = [_holder(h) for h in holders] + (["the free list"] if free else [])
                bad(5, f"device page {p} is held by {names[0]} and by {names[1]}")
            elif not held:
                bad(5, f"device pages {[p]} are neither used nor free (leak)")
        if changed or dev_pages:
            used = len(sh.dev)
            if used + sum(len(x) for x in lanes) != cfg.device_pages and not any(v.startswith("5 ") for v in out):
                bad(5, f"{cfg.device_pages - used - sum(len(x) for x in lanes)} device pages are neither used nor free (leak), or a free page is outside the pool")

    # ---- 6 Host pages ------------------------------------------------------------------------
    if host_pages or any(a is not b for a, b in zip(A.l2_free, B.l2_free)):
        for region, runs in enumerate(A.l2_free):
            if runs is B.l2_free[region] and not host_pages:
                continue
            for page in sorted(host_pages):
                owners = sh.host.get(page, ())
                if len(owners) > 1:
                    bad(6, f"host page {page} (region {region}) is in object {owners[0]} and object {owners[1]}")
                run = runs.floor_lt((page + 1, 0)) if runs else None
                free = run is not None and run[0] <= page < run[0] + run[1]
                if free and owners:
                    bad(6, f"host page {page} is free and in object {owners[0]}")
                if not free and not owners:
                    bad(6, f"host pages {[page]} (region {region}) are neither used nor free (leak)")
                if run is not None:
                    prev = runs.floor_lt(run)
                    nxt = runs.ceil_ge((run[0] + 1, 0))
                    if run[1] <= 0 or run[0] < 0 or run[0] + run[1] > L2:
                        bad(6, f"free run ({run[0]}, {run[1]}) is outside the pool")
                    if prev is not None and prev[0] + prev[1] >= run[0]:
                        bad(6, f"free runs overlap or touch at page {run[0]} (region {region})")
                    if nxt is not None and run[0] + run[1] >= nxt[0]:
                        bad(6, f"free runs overlap or touch at page {nxt[0]} (region {region})")
            if runs is not B.l2_free[region] or objects_w:
                free_total = sum(r[1] for r in runs)
                if free_total + sh.obj_pages != L2 and not any(v.startswith("6 ") for v in out):
                    bad(6, f"{L2 - free_total - sh.obj_pages} host pages (region {region}) are neither used nor free (leak), or overlap")
    for key in objects_w:
        obj = A.objects.get(key)
        if obj is None:
            continue
        n = An.get(obj.owner)
        if obj.committed:
            if n is None or n.host != key:
                bad(6, f"committed object {key} belongs to no node")
            elif obj.length != n.pages:
                bad(6, f"committed object {key} has {obj.length} pages for node {n.id} of {n.pages}")
        elif key in Ap:
            if Ap[key].obj != key:
                bad(6, f"uncommitted object {key} and its pending backup disagree")
        elif key in prepared:
            pass
        else:
            ops = [op for op in A.reloads if op.obj == key]
            if len(ops) != 1:
                bad(6, f"uncommitted object {key} belongs to no pending backup or reload")
            elif obj.length != len(ops[0].hashes):
                bad(6, f"reload object {key} has {obj.length} pages for its reload's pages")

    # ---- 7 Content of the pages written directly -----------------------------------------------
    for p in devc_w:
        c = A.dev_content.get(p)
        if c is None and (not loads_changed or p in copying):
            continue
        holders = sh.dev.get(p, ())
        if not holders:
            if c is not None:
                bad(7, f"free device page {p} still holds content (not poisoned)")
            continue
        kind, who = holders[0]
        if kind == "node" and who not in content_checked:
            n = An[who]
            i = n.dev.index(p)
            if p in copying:
                bad(7, f"device page {p} of node {who} (page {i}) holds content while rank {lane_of(p, R)}'s load-back copy into it is in flight")
            elif c != n.hashes[i]:
                bad(7, f"device page {p} of node {who} (page {i}) does not hold its prefix's KV")
    for k in hostc_w:
        page = k % L2
        for key in sh.host.get(page, ()):
            obj = A.objects.get(key)
            n = An.get(obj.owner) if obj is not None else None
            if n is None or n.host != key or obj.owner in content_checked:
                continue
            i = page - obj.base
            if i < len(n.hashes) and A.host_content.get(k) != n.hashes[i]:
                bad(7, f"host page {page} of node {n.id} (region {k // L2}) does not hold its prefix's KV")
    removed_l3 = False
    for key in l3_w:
        c = A.l3.get(key)
        if c is None:
            removed_l3 = removed_l3 or key in B.l3
            continue
        if c != key[1]:
            bad(7, f"rank {key[0]}'s disk entry {key[1]:x} holds the KV of another prefix (or garbage)")
    if A.spill_staged != B.spill_staged:
        for r, staged in enumerate(A.spill_staged):
            if staged == B.spill_staged[r]:
                continue
            for op_pages in staged:
                for h, c in op_pages:
                    if c != h:
                        bad(7, f"rank {r} staged page {h:x} for a spill with the wrong content")
    if removed_l3:
        # a disk entry went: every durable node must still have its pages (rare; whole check)
        for nid, n in An.items():
            if n.durable:
                for i, h in enumerate(n.hashes):
                    if (lane_of(i, R), h) not in A.l3:
                        bad(8, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")

    # ---- 9 Reload ------------------------------------------------------------------------------
    reloads_changed = A.reloads is not B.reloads
    if reloads_changed:
        for op in A.reloads:
            if not (len(op.tokens) == len(op.hashes) >= 1):
                bad(9, f"reload {op.key:x} claims {len(op.tokens)} pages with {len(op.hashes)} hashes")
            elif op.hashes[1:] != _chain(op.hashes[0], op.tokens[1:]) or op.key != op.hashes[-1]:
                bad(9, f"reload {op.key:x} carries hashes that are not its pages' prefix chain")
    if reloads_changed or requests_w or cand_w:
        waiting = [w for op in A.reloads for w in op.waiters]
        if len(waiting) != len(set(waiting)) or any(w not in A.requests or A.requests[w].phase != QUEUED for w in waiting):
            bad(9, f"reload waiters {waiting} are not distinct queued requests")
        held = set(waiting)
        cands = A.reload_candidates
        for rid in (cands.keys() if reloads_changed else set(cand_w) | set(requests_w)):
            if rid not in cands:
                continue
            if rid not in A.requests or A.requests[rid].phase != QUEUED or rid in held:
                bad(9, f"reload candidate {rid} is not a queued, unheld request")
    if A.spills is not B.spills or reloads_changed or A.spill_queue is not B.spill_queue:
        if len(A.spills) > cfg.spill_inflight or len(A.reloads) > cfg.reload_inflight or len(A.spill_queue) > cfg.spill_queue_cap:
            bad(9, "more L3 operations in flight or queued than the caps allow")

    # ---- 10 Counts -----------------------------------------------------------------------------
    ondev_check = set()
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        if a is not None and (b is None or a.ondev != b.ondev or a.children is not b.children):
            ondev_check.add(nid)
        if a is not None and b is not None and bool(a.dev) != bool(b.dev) and a.parent in An:
            ondev_check.add(a.parent)
        if a is None and b is not None and b.parent in An:
            ondev_check.add(b.parent)
        if a is not None and b is None and a.parent in An:
            ondev_check.add(a.parent)
    for nid in ondev_check:
        n = An[nid]
        ondev = sum(1 for c in n.children.values() if An[c].dev)
        if n.ondev != ondev:
            bad(10, f"node {nid} counts {n.ondev} children on L1, has {ondev}")
    d_dev = d_host = d_backup = 0
    for nid in nodes:
        a, b = An.get(nid), Bn.get(nid)
        ka = dev_victim_key(a, nid in Ap, cfg) if a is not None else None
        kb = dev_victim_key(b, nid in Bp, cfg) if b is not None else None
        if ka is not None and ka not in A.dev_index:
            bad(10, "the device victim index differs from its recomputation")
        if kb is not None and kb != ka and kb in A.dev_index:
            bad(10, "the device victim index differs from its recomputation")
        d_dev += (ka is not None) - (kb is not None)
        ha = host_victim_key(a, cfg) if a is not None else None
        hb = host_victim_key(b, cfg) if b is not None else None
        if ha is not None and ha not in A.host_index:
            bad(10, "the host victim index differs from its recomputation")
        if hb is not None and hb != ha and hb in A.host_index:
            bad(10, "the host victim index differs from its recomputation")
        d_host += (ha is not None) - (hb is not None)
        ba = a is not None and backup_candidate(a, nid in Ap, cfg)
        bb = b is not None and backup_candidate(b, nid in Bp, cfg)
        if ba != (nid in A.backup_index):
            bad(10, "the backup candidate index differs from its recomputation")
        d_backup += ba - bb
    if len(A.dev_index) - len(B.dev_index) != d_dev:
        bad(10, "the device victim index differs from its recomputation")
    if len(A.host_index) - len(B.host_index) != d_host:
        bad(10, "the host victim index differs from its recomputation")
    if len(A.backup_index) - len(B.backup_index) != d_backup:
        bad(10, "the backup candidate index differs from its recomputation")
    if A.spills is not B.spills or any(An[n].pin != Bn[n].pin for n in nodes if n in An and n in Bn) or any(An[n].pin for n in nodes if n in An and n not in Bn):
        pins: Counter[int] = Counter(op.node for op in A.spills if op.pinned)
        for nid in nodes | {op.node for op in A.spills} | {op.node for op in B.spills}:
            n = An.get(nid)
            if n is not None and n.pin != pins.get(nid, 0):
                bad(10, f"node {nid} has pin {n.pin} but {pins.get(nid, 0)} pinning spills")
    if (A.spills is not B.spills or A.spill_gathered != B.spill_gathered or A.spill_done != B.spill_done
            or A.spill_staged != B.spill_staged or A.reload_done != B.reload_done or reloads_changed):
        for r in range(R):
            if not len(A.spill_done[r]) <= A.spill_gathered[r] <= len(A.spills):
                bad(10, f"rank {r}'s spill progress {len(A.spill_done[r])} written / {A.spill_gathered[r]} gathered is off")
            if len(A.spill_staged[r]) != A.spill_gathered[r] - len(A.spill_done[r]):
                bad(10, f"rank {r} stages {len(A.spill_staged[r])} spills, not gathered minus written")
            if len(A.reload_done[r]) > len(A.reloads):
                bad(10, f"rank {r} has read more reloads than are in flight")
    if l3_w or A.l3_used != B.l3_used:
        delta = [0] * R
        for key in l3_w:
            r = key[0]
            if 0 <= r < R:
                delta[r] += (key in A.l3) - (key in B.l3)
        for r in range(R):
            if A.l3_used[r] - B.l3_used[r] != delta[r]:
                bad(10, f"rank {r}'s disk holds {B.l3_used[r] + delta[r]} pages but counts {A.l3_used[r]}")
            if A.l3_used[r] > cfg.L3:
                bad(10, f"rank {r}'s disk holds more than {cfg.L3} pages")
    if A.next_id < B.next_id or A.clock < B.clock or A.next_rid < B.next_rid:
        bad(10, "a counter (next_id, clock or next_rid) went back")

    # ---- 5, 10: in-flight load-backs (few pages: checked whole while any is in flight) ----------
    if A.loads and (loads_changed or dev_pages or nodes):
        for op in A.loads:
            for p, hp in op.pages:
                holders = sh.dev.get(p, ())
                if not holders or holders[0][0] != "node":
                    bad(5, f"a load-back in flight targets device page {p}, which {_holder(holders[0]) if holders else 'the free list'} holds, not a node")
                    continue
                n = An[holders[0][1]]
                i = n.dev.index(p)
                obj = A.objects.get(n.host) if n.host is not None else None
                if obj is None or obj.base + i != hp:
                    bad(5, f"a load-back in flight copies host page {hp} into device page {p}, page {i} of node {n.id}, which is not that page's copy")
        if min(A.load_done) > 0:
            bad(10, f"the oldest load-back is done on every rank {list(A.load_done)} but still in flight")
    if loads_changed:
        for op in A.loads:
            if op.node not in An:
                bad(3, f"a load-back in flight locks missing node {op.node}")
        for r in range(R):
            if not 0 <= A.load_done[r] <= len(A.loads):
                bad(10, f"rank {r} has finished {A.load_done[r]} of {len(A.loads)} loads in flight")

    # ---- 12 Collectives ------------------------------------------------------------------------
    rounds = A.commit_round
    if rounds != B.commit_round or A.writes is not B.writes:
        for why in collectives_violations(rounds, A.writes):
            bad(12, why)

    # ---- 13 Agreement ------------------------------------------------------------------------
    disagreement = agreement_violation(A)
    if disagreement:
        bad(13, disagreement)
    return out


def _copying(s: ClusterState) -> frozenset[int]:
    R = s.config.R
    return frozenset(p for k, op in enumerate(s.loads) for p, _ in op.pages if k >= s.load_done[p % R])


def _last(n: Any) -> int | None:
    return None if n is None else n.last_content


def _path(s: ClusterState, nid: int) -> list[int]:
    out = []
    seen = set()
    while nid != ROOT_ID and nid in s.nodes and nid not in seen:
        seen.add(nid)
        out.append(nid)
        nid = s.nodes[nid].parent
    return out


def _node_content(A: ClusterState, nid: int, n: Any, prev: int, obj: Any, bad: Any, copying: frozenset = frozenset()) -> None:
    expect = _chain(prev, n.key)
    if n.hashes != expect:
        bad(7, f"node {nid} carries page hashes that are not its prefix's")
    dc = A.dev_content
    for i, p in enumerate(n.dev):
        if p in copying:
            if p in dc:
                bad(7, f"device page {p} of node {nid} (page {i}) holds content while rank {lane_of(p, A.config.R)}'s load-back copy into it is in flight")
        elif dc.get(p) != expect[i]:
            bad(7, f"device page {p} of node {nid} (page {i}) does not hold its prefix's KV")
    if obj is not None:
        hc = A.host_content
        L2 = A.config.L2
        for region in range(len(A.config.payloads)):
            for i in range(min(obj.length, len(expect))):
                if hc.get(region * L2 + obj.base + i) != expect[i]:
                    bad(7, f"host page {obj.base + i} of node {nid} (region {region}) does not hold its prefix's KV")
