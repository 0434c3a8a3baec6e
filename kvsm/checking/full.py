"""The from-scratch check of invariants 1-10, 12 and 13, decided fast (`kvsm.checking`):
`holds` recomputes every invariant from the state's values, remembering pure functions
for the value they were last computed from; `full_violations` asks
`kvsm.invariants.violations` to name what fails.

The maps too large to go through entry by entry at every check (the device and host
pages' contents, the disks) are each compared whole with a dict copy of the last one
seen (`_Mirror`: every key and value of the new map read and compared, runs of equal
entries at the speed of comparing lists). What differs gives their digest sums and the
disks' counts, and says which remembered findings no longer stand: a node's pages found
holding its prefix's KV stay found while the node's facts are the same object and the
copy has seen none of those pages change (`_Pages`); a durable node's keys found on the
disks stay found while no disk entry has gone (`_Disks.epoch`). Nothing is taken from
how the state was made (the transaction's record of what it wrote), so a value changed
behind a transaction's back is found like any other, and `holds(s)` is exactly
`violations(s) == []` whatever states it was asked about before."""

from __future__ import annotations

from collections import Counter
from itertools import chain, compress, count, cycle, repeat
from operator import attrgetter, is_not, itemgetter, methodcaller, mul, ne
from typing import Any

from .. import content
from ..digest import MOD, free_page_hash, memo_hash, page_weight
from ..digest_sums import COMPONENTS, CONTENT_COMPONENTS, MAP_COMPONENTS, value_hash
from ..invariants import NAMES, contract, prepared_ids, prepared_violations, violations
from ..state import MATCHED, QUEUED, ROOT_ID, ClusterState
from ..victims import backup_candidate, dev_victim_key, host_victim_key

INVARIANTS = tuple(f"{i} {NAMES[i]}" for i in sorted(NAMES))
# the invariants of a state (every one but 11, Ownership, which is of a transition)
STATE_INVARIANTS = tuple(k for k in INVARIANTS if not k.startswith("11 "))

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


class _Memo(dict):
    """A pure function's values by argument, computed when first asked for (so that a
    sum over a map's entries runs as one `sum(map(...))`)."""

    __slots__ = ("f",)

    def __init__(self, f: Any) -> None:
        super().__init__()
        self.f = f

    def __missing__(self, k: Any) -> Any:
        v = self[k] = self.f(k)
        return v


_NONE = object()


class _Mirror:
    """A dict copy of the last map seen, brought up to date from each new map by reading
    it whole (its keys and values, compared with the copy's: nothing is taken on trust
    from how the map was made) and returning what differs, so that a sum over the map
    costs the comparison and the work for the entries that changed.

    The comparison walks the new map's entries beside the last map's, in iteration
    order: a map iterates its keys in an order fixed by their hashes, so two versions
    mostly differ by entries put in or taken out between runs of equal entries, which
    are skipped a block at a time (at the speed of comparing lists). Where they differ,
    a key the copy lacks is new, and otherwise the last map's key there is gone; when
    that guess is wrong (keys whose hashes collide keep no fixed order) the key is put
    back when the walk reaches it, so the copy ends equal to the map whatever the order."""

    __slots__ = ("d", "src", "keys", "vals", "block")

    def __init__(self, block: int = 32) -> None:
        self.block = block  # entries compared at once while the maps agree
        self.d: dict | None = None
        self.src: Any = None
        self.keys: list = []
        self.vals: list = []

    def update(self, m: Any) -> tuple[list, list] | None:
        """The entries of `m` that differ from the copy's, `[(key, old or None, new)]`, and
        those gone, `[(key, old)]`; None when the copy was made afresh."""
        if m is self.src:
            return [], []
        keys, vals = list(m.keys()), list(m.values())  # (they iterate in one order)
        d, ok, ov = self.d, self.keys, self.vals
        self.src, self.keys, self.vals = m, keys, vals
        if d is None:
            self.d = dict(zip(keys, vals))
            return None
        changed: list = []
        if keys == ok:  # the same keys: only values to compare
            if vals != ov:
                for i in compress(range(len(keys)), map(ne, vals, ov)):
                    k, v = keys[i], vals[i]
                    changed.append((k, ov[i], v))
                    d[k] = v
            return changed, []
        B = self.block
        n, on = len(keys), len(ok)
        gone: dict = {}  # keys taken out of the copy, with their values
        i = j = 0
        steps = 16 + n // 32  # keys the walk takes one by one before it looks every key up
        while j < n and i < on:
            kb, ob = keys[j : j + B], ok[i : i + B]
            # the keys before the first that differs are the same: compare their values
            t = len(kb) if kb == ob else next(compress(count(), map(ne, kb, ob)), min(len(kb), len(ob)))
            if t:
                vb, ovb = vals[j : j + t], ov[i : i + t]
                if vb != ovb:
                    for x in compress(range(t), map(ne, vb, ovb)):
                        k, v = kb[x], vb[x]
                        changed.append((k, ovb[x], v))
                        d[k] = v
                i += t
                j += t
                if t == len(kb) or j >= n or i >= on:
                    continue
            steps -= 1
            if steps < 0:
                return self._lookup(keys, vals, changed, gone)
            k, o = keys[j], ok[i]  # (k != o)
            if k not in d:  # a new key (or one taken out above, put back)
                v = vals[j]
                old = gone.pop(k, _NONE)
                if old is _NONE or old != v:
                    changed.append((k, None if old is _NONE else old, v))
                d[k] = v
                j += 1
            else:  # the last map's key here is gone (or comes later: then put back there)
                gone[o] = d.pop(o)
                i += 1
        for o in ok[i:]:  # (none of them is in the new map)
            gone[o] = d.pop(o)
        for k, v in zip(keys[j:], vals[j:]):  # (none of them is in the copy)
            old = gone.pop(k, _NONE)
            if old is _NONE or old != v:
                changed.append((k, None if old is _NONE else old, v))
            d[k] = v
        return changed, list(gone.items())

    def _lookup(self, keys: list, vals: list, changed: list, gone: dict) -> tuple[list, list]:
        """The rest of `update` when the maps differ in many places: each key of the new
        map looked up in the copy (brought part of the way by the walk: `changed` and
        `gone` say how)."""
        d = self.d
        olds = list(map(d.get, keys, repeat(_NONE)))
        for x in compress(range(len(keys)), map(ne, vals, olds)):
            k, v, old = keys[x], vals[x], olds[x]
            if old is _NONE:
                old = gone.pop(k, _NONE)
                if old is not _NONE and old == v:
                    d[k] = v
                    continue
            changed.append((k, None if old is _NONE else old, v))
            d[k] = v
        if len(d) != len(keys):
            for k in d.keys() - set(keys):
                gone[k] = d.pop(k)
        return changed, list(gone.items())


class _Pages:
    """A content map's facts, kept with a mirror of it: the digest sum of its entries
    (each page's `(content + 1) * weight(page)`), and which nodes' pages were found to
    hold what they must (`verified`: node id -> the node's facts they were checked
    for), with the node each such page was checked for (`owner`). Every page whose
    entry the mirror sees change, appear or go un-verifies its owner, and so does a page
    checked for another node, so a node stays verified exactly while its facts are the
    same object and none of its pages changed: checking it again would find the same."""

    __slots__ = ("name", "weights", "mirror", "total", "verified", "owner")

    def __init__(self, name: str) -> None:
        self.name = name
        self.weights = _Memo(lambda k: page_weight(name, k))
        self.mirror = _Mirror()
        self.total = 0
        self.verified: dict[int, tuple] = {}
        self.owner: dict[int, int] = {}

    def update(self, m: Any) -> dict:
        """Brings the mirror up to `m` (read whole) and returns it as a dict."""
        diff = self.mirror.update(m)
        weights = self.weights
        if diff is None:
            d = self.mirror.d
            ws = list(map(weights.__getitem__, d.keys()))
            self.total = sum(map(mul, ws, d.values())) + sum(ws)
            self.verified.clear()
            self.owner.clear()
            return d
        changed, removed = diff
        if changed or removed:
            t = self.total
            owner, verified = self.owner, self.verified
            for k, old, new in changed:
                t += (new + 1 - (0 if old is None else old + 1)) * weights[k]
                q = owner.pop(k, None)
                if q is not None:
                    verified.pop(q, None)
            for k, old in removed:
                t -= (old + 1) * weights[k]
                q = owner.pop(k, None)
                if q is not None:
                    verified.pop(q, None)
            self.total = t
        return self.mirror.d

    def holds(self, m: Any, facts: list, pages_at: int, want_at: int) -> bool:
        """Whether every node's pages in `m` hold what its facts say (`facts[i][pages_at]`,
        `facts[i][want_at]`): checked for the nodes not verified, remembered for those
        found to hold."""
        d = self.update(m)
        verified, owner = self.verified, self.owner
        if len(verified) > 2 * len(facts) + 1024:  # (nodes gone since: forget them)
            verified.clear()
            owner.clear()
        # (the facts not verified, found at C speed: most are)
        for e in compress(facts, map(is_not, map(verified.get, map(_GET_NID, facts)), facts)):
            nid = e[_NID]
            pages = e[pages_at]
            if tuple(map(d.get, pages)) != e[want_at]:
                return False
            for p in pages:
                q = owner.get(p)
                if q != nid:
                    if q is not None:
                        verified.pop(q, None)
                    owner[p] = nid
            verified[nid] = e
        return True


class _Disks:
    """The disks' facts, kept with a mirror of the l3 map: the digest sum of its entries,
    entries per rank, how many entries hold content other than their hash names, and
    `epoch`, which changes whenever an entry goes from the mirror (or it is made
    afresh): a key found on the disks stays there while the epoch is the same."""

    __slots__ = ("mirror", "total", "per_rank", "wrong", "epoch")

    def __init__(self) -> None:
        self.mirror = _Mirror()
        self.total = 0
        self.per_rank: Counter = Counter()
        self.wrong = 0
        self.epoch = 0

    def update(self, m: Any) -> "_Disks":
        diff = self.mirror.update(m)
        if diff is None:
            d = self.mirror.d
            self.total = sum(value_hash("l3", k, v) for k, v in d.items())
            self.per_rank = Counter(map(_FIRST, d.keys()))
            self.wrong = sum(1 for k, v in d.items() if k[1] != v)
            self.epoch += 1
            return self
        per_rank = self.per_rank
        for k, old, new in diff[0]:
            if old is None:
                per_rank[k[0]] += 1
            else:
                self.total -= value_hash("l3", k, old)
                self.wrong -= k[1] != old
            self.total += value_hash("l3", k, new)
            self.wrong += k[1] != new
        if diff[1]:
            self.epoch += 1
        for k, old in diff[1]:
            per_rank[k[0]] -= 1
            self.total -= value_hash("l3", k, old)
            self.wrong -= k[1] != old
        return self


_DISKS = _Disks()
_DEV_PAGES = _Pages("dev_content")
_HOST_PAGES = _Pages("host_content")
_PAGES = {"dev_content": _DEV_PAGES, "host_content": _HOST_PAGES}


_SUMMERS: dict[str, Any] = {}


def _free_sum(chunk: tuple[int, ...]) -> int:
    return sum(map(free_page_hash, chunk))

_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


def recompute_sums_fast(s: ClusterState) -> tuple[int, ...]:
    """`kvsm.digest_sums.recompute_sums(s)`, with each component's (and each free-list
    chunk's) sum remembered for the value it was computed from."""
    out = []
    for name in COMPONENTS:
        if name in MAP_COMPONENTS:
            if name == "l3":
                total = _DISKS.update(s.l3).total
            elif name in CONTENT_COMPONENTS:
                pages = _PAGES[name]
                pages.update(getattr(s, name))
                total = pages.total
            else:
                f = _SUMMERS.get(name)
                if f is None:
                    f = _SUMMERS[name] = _map_sum(name)
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


def _l3_facts(m: Any) -> tuple[bool, Counter, dict]:
    """Whether every disk entry holds the content its hash names, entries per rank, and
    the entries as a dict (faster to probe than the map)."""
    disks = _DISKS.update(m)
    return disks.wrong == 0, disks.per_rank, disks.mirror.d


def _copying(s: ClusterState) -> frozenset[int]:
    """Device pages a load-back still copies on their owner rank (they hold nothing yet)."""
    R = s.config.R
    return frozenset(p for k, op in enumerate(s.loads) for p, _ in op.pages if k >= s.load_done[p % R])


def _loads_hold(s: ClusterState) -> bool:
    """5: each in-flight copy targets the page its node holds at the copied page's index;
    10: per-rank load progress in range and in normal form; 12: the commit round pairs."""
    nodes, R = s.nodes, s.config.R
    if s.loads:
        held_at = {}
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
                if obj is None or obj.base + w[1] != hp:
                    return False
        if min(s.load_done) > 0:
            return False
    for r in range(R):
        if not 0 <= s.load_done[r] <= len(s.loads):
            return False
    rounds = s.commit_round
    if any(rounds):
        if any(c not in (0, 1, 2) for c in rounds) or (1 in rounds and 2 in rounds) or not s.writes:
            return False
    return True


# Per node, the checks that read only the node, its parent's last page identity, its
# object and whether it has a pending backup, remembered by node id for the values they
# were computed from (a node that did not change since the previous check costs a lookup),
# with what the rest of the check reads of it: the pages it holds and what they must hold,
# the disk entries it needs, its victim keys.
_NODES: dict[int, tuple] = {}
_NODES_CFG: list = [None]
_DEV, _DEV_EXP, _HOST, _HOST_EXP, _DURABLE, _DKEY, _HKEY, _BACKUP = range(4, 12)
_GET_DEV, _GET_DEV_EXP, _GET_HOST, _GET_HOST_EXP, _GET_DURABLE, _GET_DKEY, _GET_HKEY = (
    itemgetter(i) for i in (_DEV, _DEV_EXP, _HOST, _HOST_EXP, _DURABLE, _DKEY, _HKEY))
_GET_BACKUP = itemgetter(_BACKUP)
_NID = 12
_GET_NID = itemgetter(_NID)
_LOCK, _ONDEV, _PIN, _TOUCHED, _CHILDREN = (attrgetter(f) for f in ("lock", "ondev", "pin", "touched", "children"))
_VALUES = methodcaller("values")
# the disks' epoch last checked at and the durable nodes' keys found on them
_DURABLE: list = [None, [], set()]


def _node_facts(nid: int, n: Any, prev: int, obj: Any, pend: bool, cfg: Any) -> tuple | None:
    """The node's own checks (None when one fails) and what the rest reads of it."""
    key, dev, hashes = n.key, n.dev, n.hashes
    if nid != n.id or not key:
        return None
    if hashes != _chain(prev, key):
        return None
    if dev:
        if len(dev) != len(key) or min(dev) < 0 or max(dev) >= cfg.device_pages:
            return None
    elif obj is None or not obj.committed:
        return None  # neither on L1 nor backed (or backed by an uncommitted object)
    if n.lock and not dev:
        return None
    host: tuple = ()
    host_exp: tuple = ()
    if obj is not None:
        if obj.owner != nid or not (len(key) == obj.length == len(hashes)):
            return None
        k = min(obj.length, len(hashes))
        L2 = cfg.L2
        host = tuple(p for region in range(len(cfg.payloads)) for p in range(region * L2 + obj.base, region * L2 + obj.base + k))
        host_exp = hashes[:k] * len(cfg.payloads)
    durable = tuple(zip(cycle(range(cfg.R)), hashes)) if n.durable else ()
    return (n, prev, obj, pend, dev, hashes[: len(dev)], host, host_exp, durable,
            dev_victim_key(n, pend, cfg), host_victim_key(n, cfg), backup_candidate(n, pend, cfg), nid)


def holds(s: ClusterState) -> bool:
    """Whether invariants 1-10, 12 and 13 all hold in `s`: exactly `violations(s) == []`."""
    cfg = s.config
    nodes = s.nodes
    R, L2 = cfg.R, cfg.L2
    root = nodes.get(ROOT_ID)
    if root is None or root.key or root.dev or root.host is not None:
        return False
    objects, pending, requests = s.objects, s.pending, s.requests
    dc, hc, l3 = s.dev_content, s.host_content, s.l3
    l3_ok, per_rank, l3_keys = _l3_facts(l3)
    bare = contract(cfg)
    if s.diverged is not None:  # 13 Agreement
        return False
    if _NODES_CFG[0] is not cfg or len(_NODES) > 2 * len(nodes) + 1024:
        _NODES.clear()
        _NODES_CFG[0] = cfg
    memo = _NODES

    # 1 Tree, 2 Residency, 6/9 node and object, 7 Content, 8 Durable, per node: each node is
    # its parent's child under its first page and its hashes chain from its parent's last
    # (so, once every node reaches the root, every node's hashes are its prefix's)
    facts = []
    on_dev_parents = []
    get = memo.get
    ROOT = content.ROOT
    for nid, n in nodes.items():
        if nid == ROOT_ID:
            if n.id != nid:
                return False
            continue
        parent = n.parent
        p = nodes.get(parent)
        key = n.key
        if p is None or not key or p.children.get(key[0]) != nid:
            return False
        prev = ROOT if parent == ROOT_ID else p.last_content
        obj = objects.get(n.host) if n.host is not None else None
        pend = nid in pending
        e = get(nid)
        if e is None or e[0] is not n or e[1] != prev or e[2] is not obj or e[3] is not pend:
            e = _node_facts(nid, n, prev, obj, pend, cfg)
            if e is None:
                return False
            memo[nid] = e
        if n.dev:
            if parent != ROOT_ID and not p.dev:
                return False
            on_dev_parents.append(parent)
        facts.append(e)
    # every child entry is some node's (as many entries as non-root nodes, each node in its
    # own), so the nodes reached from the root through them are those that reach the root
    keys, vals = list(nodes.keys()), list(nodes.values())  # (in one order)
    if sum(map(len, map(_CHILDREN, vals))) != len(nodes) - 1:
        return False
    reached = 1
    level = [root]
    while level:
        ids = list(chain.from_iterable(map(_VALUES, map(_CHILDREN, level))))
        reached += len(ids)
        level = list(map(nodes.__getitem__, ids))
    if reached != len(nodes):
        return False
    if max(map(_TOUCHED, vals)) > s.clock or max(keys) >= s.next_id:
        return False
    ondev = Counter(on_dev_parents)
    if list(map(_ONDEV, vals)) != list(map(ondev.get, keys, repeat(0))):
        return False
    used = list(chain.from_iterable(map(_GET_DEV, facts)))
    copying = _copying(s) if s.loads else None
    if not copying:
        if not _DEV_PAGES.holds(dc, facts, _DEV, _DEV_EXP):
            return False
    else:  # a page a load-back still copies into holds nothing yet: checked whole
        d = _DEV_PAGES.update(dc)
        for p, want in zip(used, chain.from_iterable(map(_GET_DEV_EXP, facts))):
            if d.get(p) != (None if p in copying else want):
                return False
    if not _HOST_PAGES.holds(hc, facts, _HOST, _HOST_EXP):
        return False
    durable = list(filter(None, map(_GET_DURABLE, facts)))
    disks = _DISKS
    if _DURABLE[0] == disks.epoch:  # no disk entry went since: only the durable nodes' keys not checked yet
        held = _DURABLE[2]
        todo = [d for d in durable if id(d) not in held]
    else:
        todo = durable
    if not all(map(l3_keys.__contains__, chain.from_iterable(todo))):
        return False
    # (the list keeps the tuples alive, so their ids name them)
    _DURABLE[:] = [disks.epoch, durable, set(map(id, durable))]

    # 3 Locks
    holders: Counter[int] = Counter()
    req_pages: list[int] = []
    for req in requests.values():
        if req.phase not in ("queued", "matched", "decoding"):
            return False
        used.extend(req.pages)
        req_pages.extend(req.pages)
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
    for op in s.loads:
        cur = op.node
        if cur not in nodes:
            return False
        while cur != ROOT_ID:
            holders[cur] += 1
            cur = nodes[cur].parent
    if list(map(_LOCK, vals)) != list(map(holders.get, keys, repeat(0))):
        return False  # (a lock off L1 is a node's own check)

    # 4 Pending
    writes = s.writes
    prepared = prepared_ids(s)
    if len(writes) != len(set(writes)) or set(writes) != set(pending.keys()) | prepared:
        return False
    if s.prepared and prepared_violations(s):
        return False
    for nid, pend in pending.items():
        n = nodes.get(nid)
        if n is None or not n.lock or not n.dev or n.host is not None or dev_victim_key(n, True, bare) is not None:
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
    # (a node's pages are in range by its own check)
    if len(used_set) != len(used) or (req_pages and (min(req_pages) < 0 or max(req_pages) >= pages)):
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
    if not used_set.issuperset(_DEV_PAGES.update(dc)):
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
        elif key in prepared:
            pass
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
    # (the root is never a victim nor a backup candidate: its facts are not in the list)
    dev_keys = sorted(filter(None, map(_GET_DKEY, facts)))
    if len(s.dev_index) != len(dev_keys) or s.dev_index.to_list() != dev_keys:
        return False
    host_keys = sorted(filter(None, map(_GET_HKEY, facts)))
    if len(s.host_index) != len(host_keys) or s.host_index.to_list() != host_keys:
        return False
    backups = sorted(compress(map(_GET_NID, facts), map(_GET_BACKUP, facts)))
    if len(s.backup_index) != len(backups) or s.backup_index.to_list() != backups:
        return False
    pins: Counter[int] = Counter(op.node for op in s.spills if op.pinned)
    if list(map(_PIN, vals)) != list(map(pins.get, keys, repeat(0))):
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
    if not _loads_hold(s):
        return False
    if s.sums is not None and s.sums != recompute_sums_fast(s):
        return False
    return True
