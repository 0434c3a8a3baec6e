"""The whole-state check decided fast: `holds(s, cache)` is exactly `violations(s) == []`
(`kvsm.invariants`), computed from the state's values with what pure functions of them
gave last time remembered in `cache` (a `Cache`, which `kvsm.checking.Checker` owns).

One pass over the nodes checks what reads only a node, its parent's last page identity,
its object and whether it has a pending backup (invariants 1, 2, 6-10 of one node),
remembered by node id for the values it was computed from (a node that did not change
since the previous check costs a lookup), with what the other rules read of it: the
pages it holds and what they must hold, the disk entries it needs, its victim keys.
The rest of each invariant's fast form is that invariant's module's `holds`.

The maps too large to go through entry by entry (the pages' contents, the disks) are
compared whole with a copy of the last one seen (`kvsm.invariants.mirror`): a node's
pages found holding its prefix's KV stay found while the node's facts are the same
object and the copy has seen none of those pages change; a durable node's keys found
on the disks stay found while no disk entry has gone. Nothing is taken from how the
state was made (the transaction's record of what it wrote), so a value changed behind a
transaction's back is found like any other, whatever states `cache` saw before."""

from __future__ import annotations

from collections import Counter
from itertools import chain, cycle, repeat
from operator import attrgetter, methodcaller
from typing import Any

from .. import content as prefixes
from ..digest import MOD, free_page_hash, memo_hash
from ..digest_sums import COMPONENTS, CONTENT_COMPONENTS, MAP_COMPONENTS, value_hash
from ..state import GONE, MATCHED, PHASES, QUEUED, ROOT_ID, ClusterState
from ..victims import backup_candidate, dev_victim_key, host_victim_key
from . import agreement, collectives, content, counts, device_pages, durable, host_pages, isolation, pending, reload, running
from .common import contract, copying, prepared_ids
from .facts import DEV, DEV_EXP, GET_DEV, GET_DEV_EXP, GET_DURABLE, HOST, HOST_EXP
from .mirror import Disks, Pages

CHAIN_MAX = 1 << 16

_LOCK, _ONDEV, _TOUCHED, _CHILDREN = (attrgetter(f) for f in ("lock", "ondev", "touched", "children"))
_VALUES = methodcaller("values")


def _free_sum(chunk: tuple[int, ...]) -> int:
    return sum(map(free_page_hash, chunk))


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


class Cache:
    """What the fast checks remember between states (pure functions of immutable values,
    each for the last value seen in its slot, which the entry keeps alive so that an
    identity match is sound; one value per slot, so no old state is kept alive)."""

    def __init__(self) -> None:
        self.chains: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}
        self.by_ids: dict[Any, tuple[Any, Any]] = {}
        self.summers: dict[str, Any] = {}
        self.disks = Disks()
        self.dev_pages = Pages("dev_content")
        self.host_pages = Pages("host_content")
        self.pages = {"dev_content": self.dev_pages, "host_content": self.host_pages}
        self.nodes: dict[int, tuple] = {}  # node id -> its facts (`_node_facts`)
        self.nodes_cfg: Any = None  # the config the nodes' facts are for
        self.durable: list = [None, [], set()]  # the disks' epoch last checked at, the durable keys found

    def chain(self, prev: int, key: tuple[int, ...]) -> tuple[int, ...]:
        """`kvsm.content.chain(prev, key)`, remembered."""
        k = (prev, key)
        h = self.chains.get(k)
        if h is None:
            if len(self.chains) >= CHAIN_MAX:
                self.chains.clear()
            h = self.chains[k] = prefixes.chain(prev, key)
        return h

    def by_id(self, slot: Any, obj: Any, f: Any) -> Any:
        """`f(obj)`, remembered for the last `obj` seen in `slot`."""
        hit = self.by_ids.get(slot)
        if hit is not None and hit[0] is obj:
            return hit[1]
        v = f(obj)
        self.by_ids[slot] = (obj, v)
        return v

    def recompute_sums(self, s: ClusterState) -> tuple[int, ...]:
        """`kvsm.digest_sums.recompute_sums(s)`, with each component's (and each free-list
        chunk's) sum remembered for the value it was computed from."""
        out = []
        for name in COMPONENTS:
            if name in MAP_COMPONENTS:
                if name == "l3":
                    total = self.disks.update(s.l3).total
                elif name in CONTENT_COMPONENTS:
                    pages = self.pages[name]
                    pages.update(getattr(s, name))
                    total = pages.total
                else:
                    f = self.summers.get(name)
                    if f is None:
                        f = self.summers[name] = _map_sum(name)
                    total = self.by_id("sum:" + name, getattr(s, name), f)
            elif name == "dev_free":
                total = 0
                for k, lane in enumerate(s.dev_free):
                    for j, chunk in enumerate(lane._chunks):
                        total += self.by_id(("sum:dev_free", k, j), chunk, _free_sum)
            elif name == "l2_free":
                total = 0
                for i, runs in enumerate(s.l2_free):
                    for j, chunk in enumerate(runs._chunks):
                        total += self.by_id(("sum:l2_free", i, j), chunk, lambda c, i=i: sum(memo_hash("l2_free", (i, run), True) for run in c))
            else:
                total = 0
                for k, v in enumerate(getattr(s, name)):
                    if v != ():
                        total += value_hash(name, k, v)
            out.append(total % MOD)
        return tuple(out)


def _node_facts(nid: int, n: Any, prev: int, obj: Any, pend: bool, cfg: Any, chain_: Any) -> tuple | None:
    """The node's own checks (None when one fails) and what the rest reads of it."""
    key, dev, hashes = n.key, n.dev, n.hashes
    if nid != n.id or not key:
        return None
    if hashes != (chain_(prev, key) if not n.ns else prefixes.chain_in(n.ns, prev, key, chain_)):
        return None
    if dev:
        if len(dev) != len(key) or min(dev) < 0 or max(dev) >= cfg.device_pages:
            return None
    elif obj is None:
        if n.parent != GONE:  # (a husk is on no tier: `_nodes_hold` checked it is one)
            return None  # neither on L1 nor backed
    elif not obj.committed:
        return None  # backed by an uncommitted object
    if n.lock and not dev:
        return None
    host: tuple = ()
    host_exp: tuple = ()
    if obj is not None:
        if obj.owner != nid or not (len(key) == obj.length == len(hashes)):
            return None
        k = min(obj.length, len(hashes))
        L2 = cfg.L2
        host = tuple(region * L2 + p for region in range(len(cfg.payloads)) for p in obj.page_list()[:k])
        host_exp = hashes[:k] * len(cfg.payloads)
    durable_keys = tuple(zip(cycle(range(cfg.R)), durable.l3_keys_of(n, cfg))) if n.durable else ()
    return (n, prev, obj, pend, dev, hashes[: len(dev)], host, host_exp, durable_keys,
            dev_victim_key(n, pend, cfg), host_victim_key(n, cfg), backup_candidate(n, pend, cfg), nid)


def _nodes_hold(s: ClusterState, cache: Cache) -> list | None:
    """The pass over the nodes: 1 Tree, 2 Residency, 6 and 9 of a node and its object, 10
    of its children on L1 and the counters; each node is its parent's child under its
    first page and its hashes chain from its parent's last (so, once every node reaches
    the root, every node's hashes are its prefix's). The nodes' facts, None if one fails."""
    cfg, nodes, objects, pending_ = s.config, s.nodes, s.objects, s.pending
    root = nodes.get(ROOT_ID)
    if cache.nodes_cfg is not cfg or len(cache.nodes) > 2 * len(nodes) + 1024:
        cache.nodes.clear()
        cache.nodes_cfg = cfg
    memo = cache.nodes
    facts = []
    on_dev_parents = []
    husks: list[int] = []  # (unbacked_evict = "reference": the orphans hang under them)
    orphans = cfg.unbacked_evict == "reference"
    get = memo.get
    ROOT = prefixes.ROOT
    for nid, n in nodes.items():
        if nid == ROOT_ID:
            if n.id != nid:
                return None
            continue
        parent = n.parent
        key = n.key
        if parent == GONE:
            # a husk (invariant 1): on no tier, with children, its key its whole prefix
            if not orphans or n.dev or n.host is not None or not len(n.children):
                return None
            husks.append(nid)
            p, prev = None, ROOT
        else:
            p = nodes.get(parent)
            if p is None or not key or p.children.get(n.child_key) != nid:
                return None
            prev = ROOT if parent == ROOT_ID else prefixes.rebase(p.last_content, p.ns, n.ns)
        obj = objects.get(n.host) if n.host is not None else None
        pend = nid in pending_
        e = get(nid)
        if e is None or e[0] is not n or e[1] != prev or e[2] is not obj or e[3] is not pend:
            e = _node_facts(nid, n, prev, obj, pend, cfg, cache.chain)
            if e is None:
                return None
            memo[nid] = e
        if n.dev:
            if parent != ROOT_ID and not p.dev:
                return None
            on_dev_parents.append(parent)
        facts.append(e)
    # every child entry is some node's (as many entries as non-root nodes, each node in its
    # own), so the nodes reached from the root through them are those that reach the root
    keys, vals = list(nodes.keys()), list(nodes.values())  # (in one order)
    if sum(map(len, map(_CHILDREN, vals))) + len(husks) != len(nodes) - 1:
        return None
    reached = 1 + len(husks)
    level = [root] + list(map(nodes.__getitem__, husks))
    while level:
        ids = list(chain.from_iterable(map(_VALUES, map(_CHILDREN, level))))
        reached += len(ids)
        level = list(map(nodes.__getitem__, ids))
    if reached != len(nodes):
        return None
    if max(map(_TOUCHED, vals)) > s.clock or max(keys) >= s.next_id:
        return None
    ondev = Counter(on_dev_parents)
    if list(map(_ONDEV, vals)) != list(map(ondev.get, keys, repeat(0))):
        return None
    return facts


def _pages_hold(s: ClusterState, facts: list, cache: Cache) -> bool:
    """7 of the nodes' device and host pages, 8 Durable."""
    dc = s.dev_content
    cp = copying(s) if s.loads else None
    if not cp:
        if not cache.dev_pages.holds(dc, facts, DEV, DEV_EXP):
            return False
    else:  # a page a load-back still copies into holds nothing yet: checked whole
        d = cache.dev_pages.update(dc)
        used = chain.from_iterable(map(GET_DEV, facts))
        for p, want in zip(used, chain.from_iterable(map(GET_DEV_EXP, facts))):
            if d.get(p) != (None if p in cp else want):
                return False
    if not cache.host_pages.holds(s.host_content, facts, HOST, HOST_EXP):
        return False
    return durable.holds(list(filter(None, map(GET_DURABLE, facts))), cache.disks.mirror.d, cache)


def _locks_hold(s: ClusterState) -> bool:
    """3 Locks (a lock off L1 is a node's own check) and the request ids."""
    nodes, requests = s.nodes, s.requests
    holders: Counter[int] = Counter()
    for req in requests.values():
        if req.phase not in PHASES:
            return False
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
    for nid, pend in s.pending.items():
        if pend.locked:
            holders[nid] += 1
    for op in s.loads:
        cur = op.node
        if cur not in nodes:
            return False
        while cur != ROOT_ID:
            holders[cur] += 1
            cur = nodes[cur].parent
    return list(map(_LOCK, nodes.values())) == list(map(holders.get, nodes.keys(), repeat(0)))


def holds(s: ClusterState, cache: Cache | None = None) -> bool:
    """Whether invariants 1-10 and 12-15 all hold in `s`: exactly `violations(s) == []`.
    `cache` remembers what helps the next state's check (a fresh one when None)."""
    if cache is None:
        cache = Cache()
    root = s.nodes.get(ROOT_ID)
    if root is None or root.key or root.dev or root.host is not None:
        return False
    disks = cache.disks.update(s.l3)
    if not agreement.holds(s) or not running.holds(s):
        return False
    facts = _nodes_hold(s, cache)
    if facts is None or not _pages_hold(s, facts, cache):
        return False
    if not _locks_hold(s):
        return False
    prepared = prepared_ids(s)
    if not pending.holds(s, prepared, contract(s.config)):
        return False
    used = list(chain.from_iterable(map(GET_DEV, facts)))
    if not device_pages.holds(s, used, cache.dev_pages.update(s.dev_content), cache.by_id):
        return False
    if not host_pages.holds(s, prepared) or not content.holds(s, content.disks_hold(s, disks.wrong)):
        return False
    if not reload.holds(s, cache.chain):
        return False
    if s.loads and not device_pages.loads_hold(s):
        return False
    if not collectives.holds(s) or not isolation.holds(s):
        return False
    return counts.holds(s, facts, disks.per_rank, cache.recompute_sums)
