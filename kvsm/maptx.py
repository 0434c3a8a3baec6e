"""`MapTx`: one of a state's persistent maps (`immutables.Map`) during a transaction
(`kvsm.tx.Tx`), with the keys it wrote and the change of its digest sum."""

from __future__ import annotations

from typing import Any, Iterable

import immutables

from .digest import memo_hash, page_weight, page_weights
from .digest_sums import CONTENT_COMPONENTS, value_hash

_MISSING = object()

class MapTx:
    """One persistent map under a transaction: read through, copied on the first write,
    and the keys written remembered, so that `finish` returns the new map and the change
    of its digest sum computed from those keys alone."""

    __slots__ = ("name", "orig", "mut", "dirty")

    def __init__(self, name: str, m: immutables.Map) -> None:
        self.name = name
        self.orig = m
        self.mut: Any = None
        self.dirty: set = set()

    def get(self, k: Any, default: Any = None) -> Any:
        return (self.mut if self.mut is not None else self.orig).get(k, default)

    def __getitem__(self, k: Any) -> Any:
        return (self.mut if self.mut is not None else self.orig)[k]

    def __contains__(self, k: Any) -> bool:
        return k in (self.mut if self.mut is not None else self.orig)

    def __len__(self) -> int:
        return len(self.mut if self.mut is not None else self.orig)

    def keys(self) -> Iterable[Any]:
        return (self.mut if self.mut is not None else self.orig).keys()

    def writable(self) -> Any:
        """The map's mutation, made on first use: a caller that stores into it directly
        must add each key it stores to `dirty` (the hot paths of `kvsm.tx.Tx` do)."""
        m = self.mut
        if m is None:
            m = self.mut = self.orig.mutate()
        return m

    def set(self, k: Any, v: Any) -> None:
        if self.mut is None:
            self.mut = self.orig.mutate()
        self.mut[k] = v
        self.dirty.add(k)

    def delete(self, k: Any) -> None:
        if self.mut is None:
            self.mut = self.orig.mutate()
        del self.mut[k]
        self.dirty.add(k)

    def set_many(self, keys: tuple, values: Iterable[Any]) -> None:
        """`set` of each key to its value, in order."""
        if self.mut is None:
            self.mut = self.orig.mutate()
        self.mut.update(zip(keys, values))
        self.dirty.update(keys)

    def delete_present(self, keys: Iterable[Any]) -> None:
        """`delete` of each of `keys` that the map holds."""
        m = self.mut
        if m is None:
            m = self.mut = self.orig.mutate()
        # one lookup per key: `pop` deletes it where present and says whether it was
        pop, dirty, missing = m.pop, self.dirty, _MISSING
        for k in keys:
            if pop(k, missing) is not missing:
                dirty.add(k)

    def finish(self, track: bool = True) -> tuple[immutables.Map, int]:
        """The new map and (with `track`) the change of its digest sum."""
        if self.mut is None or not self.dirty:  # (nothing written: the map as it was)
            return self.orig, 0
        new = self.mut.finish()
        delta = 0
        if not track:
            return new, 0
        name = self.name
        if name in CONTENT_COMPONENTS:
            # a ghost content entry counts (content + 1) * the page's weight (`content_hash`),
            # so a change of it counts the difference times the weight
            weights = page_weights(name)
            old_get, new_get = self.orig.get, new.get
            missing = _MISSING
            for k in self.dirty:
                o = old_get(k, missing)
                n = new_get(k, missing)
                if o is n:
                    continue
                c = (0 if n is missing else n + 1) - (0 if o is missing else o + 1)
                if c:
                    w = weights.get(k)
                    delta += c * (w if w is not None else page_weight(name, k))
            return new, delta
        old_get, new_get, missing = self.orig.get, new.get, _MISSING
        for k in self.dirty:
            o = old_get(k, missing)
            n = new_get(k, missing)
            if o is n:
                continue
            if o is missing:
                delta += value_hash(name, k, n)
            elif n is missing:
                delta -= value_hash(name, k, o)
            else:
                # (the old value first: its hash is remembered, the new one's is then kept)
                delta -= memo_hash(name, k, o)
                delta += memo_hash(name, k, n)
                bulky = getattr(n, "BULKY", None)
                if bulky is not None:
                    bo, bn = getattr(o, bulky), getattr(n, bulky)
                    if bo is not bn and bo != bn:
                        delta -= memo_hash(name + "#", k, bo)
                        delta += memo_hash(name + "#", k, bn)
        return new, delta
