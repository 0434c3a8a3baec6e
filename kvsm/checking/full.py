"""The from-scratch check of invariants 1-10, decided fast (`kvsm.checking`): `holds`
recomputes every invariant from the state's values, remembering pure functions for the
value they were last computed from; `full_violations` asks `kvsm.invariants.violations`
to name what fails."""

from __future__ import annotations

from collections import Counter
from itertools import cycle
from operator import itemgetter
from typing import Any

from .. import content
from ..digest import MOD, free_page_hash, memo_hash, page_weight
from ..digest_sums import COMPONENTS, CONTENT_COMPONENTS, MAP_COMPONENTS, value_hash
from ..invariants import NAMES, violations
from ..state import MATCHED, QUEUED, ROOT_ID, ClusterState, backup_candidate, dev_victim_key, host_victim_key

INVARIANTS = tuple(f"{i} {NAMES[i]}" for i in sorted(NAMES))

_CHAIN: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}
_CHAIN_MAX = 1 << 16


def _chain(prev: int, key: tuple[int, ...]) -> tuple[int, ...]:
    """`content.chain(prev, key)`, remembered (a pure function of its arguments)."""
    k = (prev, key)
    h = _CHAIN.get(k)
    if h is None:
        if len(_CHAIN) >= _CHAIN_MAX:
            _CHAIN.clear()
        h = _CHAIN[k] = content.chain(prev, key)
    return h


def full_violations(s: ClusterState) -> list[str]:
    """`kvsm.invariants.violations(s)`, decided faster: `holds` recomputes every
    invariant from the state's values (never from its derived structures) and says only
    whether all hold; when one does not, `violations` recomputes it all to name it."""
    return [] if holds(s) else violations(s)


# Pure functions of immutable values, remembered for the last value seen in each slot
# (the entry keeps a reference to that value, so an identity match is sound; one value
# per slot, so no old state is kept alive): the sum of a component of the digest, a
# free-list chunk's sum and lane check, the l3 map's own checks. A component that did
# not change since the previous check costs nothing to check again.
_BY_ID: dict[Any, tuple[Any, Any]] = {}


def _by_id(slot: Any, obj: Any, f: Any) -> Any:
    hit = _BY_ID.get(slot)
    if hit is not None and hit[0] is obj:
        return hit[1]
    v = f(obj)
    _BY_ID[slot] = (obj, v)
    return v


def _map_sum(name: str) -> Any:
    """The sum of a map component's entry hashes (`value_hash`), each remembered here by
    key for the value object it was computed for."""
    memo: dict[Any, tuple[Any, int]] = {}

    def f(m: Any) -> int:
        if len(memo) > 4 * len(m) + 1024:
            memo.clear()
        total = 0
        get = memo.get
        for k, v in m.items():
            e = get(k)
            if e is not None and e[0] is v:
                total += e[1]
            else:
                h = value_hash(name, k, v)
                memo[k] = (v, h)
                total += h
        return total

    return f


def _content_sum(name: str) -> Any:
    """The sum of a content component: each page's `(content + 1) * weight(page)`."""
    weights: dict[int, int] = {}

    def f(m: Any) -> int:
        total = 0
        get = weights.get
        for k, v in m.items():
            w = get(k)
            if w is None:
                w = weights[k] = page_weight(name, k)
            total += (v + 1) * w
        return total

    return f


_SUMMERS: dict[str, Any] = {}


def _free_sum(chunk: tuple[int, ...]) -> int:
    return sum(map(free_page_hash, chunk))

_FIRST = itemgetter(0)


def recompute_sums_fast(s: ClusterState) -> tuple[int, ...]:
    """`kvsm.digest_sums.recompute_sums(s)`, with each component's (and each free-list
    chunk's) sum remembered for the value it was computed from."""
    out = []
    for name in COMPONENTS:
        if name in MAP_COMPONENTS:
            f = _SUMMERS.get(name)
            if f is None:
                f = _SUMMERS[name] = _content_sum(name) if name in CONTENT_COMPONENTS else _map_sum(name)
            total = _by_id("sum:" + name, getattr(s, name), f)
        elif name == "dev_free":
            total = 0
            for k, lane in enumerate(s.dev_free):
                for j, chunk in enumerate(lane._chunks):
                    total += _by_id(("sum:dev_free", k, j), chunk, _free_sum)
        elif name == "l2_free":
            total = 0
            for i, runs in enumerate(s.l2_free):
                for j, chunk in enumerate(runs._chunks):
                    total += _by_id(("sum:l2_free", i, j), chunk, lambda c, i=i: sum(memo_hash("l2_free", (i, run), True) for run in c))
        else:
            total = 0
            for k, v in enumerate(getattr(s, name)):
                if v != ():
                    total += value_hash(name, k, v)
        out.append(total % MOD)
    return tuple(out)


def _l3_facts(m: Any) -> tuple[bool, Counter, set]:
    """Whether every disk entry holds the content its hash names, entries per rank, and
    the entries' keys as a set (faster to probe than the map)."""
    ok = all(k[1] == c for k, c in m.items())
    keys = set(m.keys())
    return ok, Counter(map(_FIRST, keys)), keys


def holds(s: ClusterState) -> bool:
    """Whether invariants 1-10 all hold in `s`: exactly `violations(s) == []`."""
    cfg = s.config
    nodes = s.nodes
    R, L2 = cfg.R, cfg.L2
    root = nodes.get(ROOT_ID)
    if root is None or root.key or root.dev or root.host is not None:
        return False
    objects, pending, requests = s.objects, s.pending, s.requests
    dc, hc, l3 = s.dev_content, s.host_content, s.l3
    regions = len(cfg.payloads)
    l3_ok, per_rank, l3_keys = _by_id("l3", l3, _l3_facts)

    # 1 Tree: ids, keys, parent links both ways; every node reaches the root (the depth
    # of each node is found once, memoised; a cycle never reaches it)
    state_of: dict[int, int] = {ROOT_ID: 1}  # 1 reaches the root, 0 on the current walk
    expect_last: dict[int, int] = {ROOT_ID: content.ROOT}
    for nid, n in nodes.items():
        if nid != n.id:
            return False
        for sym, cid in n.children.items():
            c = nodes.get(cid)
            if c is None or c.parent != nid or not c.key or c.key[0] != sym:
                return False
        if nid == ROOT_ID:
            continue
        if not n.key:
            return False
        p = nodes.get(n.parent)
        if p is None or p.children.get(n.key[0]) != nid:
            return False
        if nid not in state_of:
            walk = []
            cur = nid
            while cur not in state_of:
                state_of[cur] = 0
                walk.append(cur)
                if not nodes[cur].key:
                    return False
                cur = nodes[cur].parent
                if cur not in nodes:
                    return False
            if state_of[cur] == 0:
                return False  # a cycle
            for w in reversed(walk):
                state_of[w] = 1
                expect_last[w] = _chain(expect_last[nodes[w].parent], nodes[w].key)[-1]

    # 2 Residency, 7 Content, 8 Durable, 9 node-object lengths, 10 ondev, stamps, ids
    clock = s.clock
    max_id = -1
    used: list[int] = []
    for nid, n in nodes.items():
        if nid > max_id:
            max_id = nid
        if n.touched > clock:
            return False
        ondev = 0
        for c in n.children.values():
            if nodes[c].dev:
                ondev += 1
        if n.ondev != ondev:
            return False
        if nid == ROOT_ID:
            continue
        dev = n.dev
        if dev:
            if len(dev) != len(n.key):
                return False
            if n.parent != ROOT_ID and not nodes[n.parent].dev:
                return False
            used.extend(dev)
        elif n.host is None:
            return False
        obj = objects.get(n.host) if n.host is not None else None
        if not dev and (obj is None or not obj.committed):
            return False
        expect = _chain(expect_last[n.parent], n.key)
        if n.hashes != expect:
            return False
        if dev and tuple(map(dc.get, dev)) != expect[: len(dev)]:
            return False
        if obj is not None:
            if obj.owner != nid or not (n.pages == obj.length == len(n.hashes)):
                return False
            k = min(obj.length, len(expect))
            for region in range(regions):
                lo = region * L2 + obj.base
                if tuple(map(hc.get, range(lo, lo + k))) != expect[:k]:
                    return False
        if n.durable and not l3_keys.issuperset(zip(cycle(range(R)), n.hashes)):
            return False
    if nodes and max_id >= s.next_id:
        return False

    # 3 Locks
    holders: Counter[int] = Counter()
    for req in requests.values():
        if req.phase not in ("queued", "matched", "decoding"):
            return False
        used.extend(req.pages)
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                return False
            continue
        cur = req.node
        if cur not in nodes:
            return False
        if req.phase == MATCHED and cur != ROOT_ID and not nodes[cur].dev:
            return False
        while cur != ROOT_ID:
            holders[cur] += 1
            cur = nodes[cur].parent
    if requests and max(requests.keys()) >= s.next_rid:
        return False
    for nid, pend in pending.items():
        if pend.locked:
            holders[nid] += 1
    for nid, n in nodes.items():
        if n.lock != holders.get(nid, 0):
            return False
        if n.lock and nid != ROOT_ID and not n.dev:
            return False

    # 4 Pending
    writes = s.writes
    if len(writes) != len(set(writes)) or set(writes) != set(pending.keys()):
        return False
    for nid, pend in pending.items():
        n = nodes.get(nid)
        if n is None or not n.lock or not n.dev or n.host is not None or dev_victim_key(n, True, cfg) is not None:
            return False
        obj = objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            return False
    for d in s.write_done:
        if not 0 <= d <= len(writes):
            return False

    # 5 Device pages: the used pages are distinct, in range and not free; each lane's free
    # pages are its own and in range; together they are every page
    pages = cfg.device_pages
    used_set = set(used)
    if len(used_set) != len(used) or (used and (min(used) < 0 or max(used) >= pages)):
        return False
    free_count = 0
    free_set: set[int] = set()
    for lane, free in enumerate(s.dev_free):
        for j, chunk in enumerate(free._chunks):
            if not _by_id(("lane", R, lane, pages, j), chunk, lambda c, lane=lane: all(p % R == lane and 0 <= p < pages for p in c)):
                return False
            free_set.update(chunk)
        free_count += len(free)
    if len(free_set) != free_count or not used_set.isdisjoint(free_set) or len(used) + free_count != pages:
        return False
    if not used_set.issuperset(dc.keys()):
        return False

    # 6 Host pages: per region, the objects and the free runs tile the pool, free runs
    # neither overlap nor touch; each object belongs where it says
    spans = sorted((o.base, o.length) for o in objects.values() if o.length > 0)
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
    for key, obj in objects.items():
        if obj.length < 0:
            return False
        if obj.committed:
            n = nodes.get(obj.owner)
            if n is None or n.host != key or obj.length != n.pages:
                return False
        elif key in pending:
            if pending[key].obj != key:
                return False
        else:
            ops = [op for op in s.reloads if op.obj == key]
            if len(ops) != 1 or obj.length != len(ops[0].hashes):
                return False

    # 7 Content on the disks and in staging
    if not l3_ok:
        return False
    for staged in s.spill_staged:
        for op_pages in staged:
            for h, c in op_pages:
                if c != h:
                    return False

    # 9 Reload
    for op in s.reloads:
        if not (len(op.tokens) == len(op.hashes) >= 1):
            return False
        if op.hashes[1:] != _chain(op.hashes[0], op.tokens[1:]) or op.key != op.hashes[-1]:
            return False
    waiting = [w for op in s.reloads for w in op.waiters]
    if len(waiting) != len(set(waiting)) or any(w not in requests or requests[w].phase != QUEUED for w in waiting):
        return False
    for rid in s.reload_candidates.keys():
        if rid not in requests or requests[rid].phase != QUEUED or rid in waiting:
            return False
    if len(s.spills) > cfg.spill_inflight or len(s.reloads) > cfg.reload_inflight or len(s.spill_queue) > cfg.spill_queue_cap:
        return False

    # 10 Counts: derived indexes, digest sums, pins, per-rank progress, disk counts
    dev_keys = sorted(k for k in (dev_victim_key(n, nid in pending, cfg) for nid, n in nodes.items()) if k)
    if len(s.dev_index) != len(dev_keys) or list(s.dev_index) != dev_keys:
        return False
    host_keys = sorted(k for k in (host_victim_key(n, cfg) for n in nodes.values()) if k)
    if len(s.host_index) != len(host_keys) or list(s.host_index) != host_keys:
        return False
    backups = sorted(nid for nid, n in nodes.items() if backup_candidate(n, nid in pending, cfg))
    if len(s.backup_index) != len(backups) or list(s.backup_index) != backups:
        return False
    pins: Counter[int] = Counter(op.node for op in s.spills if op.pinned)
    for nid in set(pins) | {nid for nid, n in nodes.items() if n.pin}:
        n = nodes.get(nid)
        if n is not None and n.pin != pins.get(nid, 0):
            return False
    for r in range(R):
        if not len(s.spill_done[r]) <= s.spill_gathered[r] <= len(s.spills):
            return False
        if len(s.spill_staged[r]) != s.spill_gathered[r] - len(s.spill_done[r]):
            return False
        if len(s.reload_done[r]) > len(s.reloads):
            return False
        if per_rank.get(r, 0) != s.l3_used[r] or per_rank.get(r, 0) > cfg.L3:
            return False
    if s.sums is not None and s.sums != recompute_sums_fast(s):
        return False
    return True
