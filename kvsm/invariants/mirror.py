"""Copies of the maps too large to go through entry by entry at every whole-state check
(the device and host pages' contents, the disks), each compared whole with the last
map seen (`Mirror`: every key and value of the new map read and compared, runs of
equal entries at the speed of comparing lists). What differs gives their digest sums
and the disks' counts, and says which remembered findings no longer stand (`Pages`,
`Disks`), for `kvsm.invariants.fast`."""

from __future__ import annotations

from collections import Counter
from itertools import compress, count, repeat
from operator import is_not, itemgetter, mul, ne
from typing import Any

from ..digest import page_weight
from ..digest_sums import value_hash
from .facts import NID

_FIRST = itemgetter(0)
_GET_NID = itemgetter(NID)


class Memo(dict):
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


class Mirror:
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


class Pages:
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
        self.weights = Memo(lambda k: page_weight(name, k))
        self.mirror = Mirror()
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
            nid = e[NID]
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


class Disks:
    """The disks' facts, kept with a mirror of the l3 map: the digest sum of its entries,
    entries per rank, how many entries hold content other than their hash names, and
    `epoch`, which changes whenever an entry goes from the mirror (or it is made
    afresh): a key found on the disks stays there while the epoch is the same."""

    __slots__ = ("mirror", "total", "per_rank", "wrong", "epoch")

    def __init__(self) -> None:
        self.mirror = Mirror()
        self.total = 0
        self.per_rank: Counter = Counter()
        self.wrong = 0
        self.epoch = 0

    def update(self, m: Any) -> "Disks":
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
