"""A persistent (immutable) sorted set.

Neither `immutables` nor `pyrsistent` offers an ordered collection, and the model
needs several: the device and host victim orders and the free lists. This one keeps
its elements in a tuple of sorted chunks; an update copies the chunks it changes and
the top-level tuples, which CPython does at memcpy speed, so it costs
O(n / CHUNK + CHUNK) pointer copies and old versions stay valid (structural sharing
of every untouched chunk).

A subclass may keep one summary value per chunk (`summarize`), maintained on every
update; `RunSet` uses it to find the lowest free run of a given length without
scanning every run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain
from operator import itemgetter
from typing import Any, Iterable, Iterator

CHUNK = 512


class PSortedSet:
    __slots__ = ("_chunks", "_maxes", "_len", "_aux")

    def __init__(self, items: Iterable[Any] = ()) -> None:
        ordered = sorted(set(items))
        chunks = tuple(tuple(ordered[i : i + CHUNK]) for i in range(0, len(ordered), CHUNK))
        self._chunks: tuple[tuple[Any, ...], ...] = chunks
        self._maxes: tuple[Any, ...] = tuple(c[-1] for c in chunks)
        self._len = len(ordered)
        self._aux: tuple[Any, ...] = tuple(self.summarize(c) for c in chunks) if self.HAS_AUX else ()

    # ---- per-chunk summaries (none in the base class) ----------------------------------
    @staticmethod
    def summarize(chunk: tuple[Any, ...]) -> Any:
        return None

    @classmethod
    def _make(cls, chunks: tuple, maxes: tuple, length: int, aux: tuple) -> "PSortedSet":
        obj = cls.__new__(cls)
        obj._chunks, obj._maxes, obj._len, obj._aux = chunks, maxes, length, aux
        return obj

    HAS_AUX = False

    def _replace(self, i: int, j: int, parts: tuple[tuple[Any, ...], ...], delta: int) -> "PSortedSet":
        """The set with chunks i..j-1 replaced by `parts` (each non-empty)."""
        chunks, maxes = self._chunks, self._maxes
        if len(parts) == 1 and j == i + 1:
            p = parts[0]
            new_chunks = (*chunks[:i], p, *chunks[j:])
            new_maxes = (*maxes[:i], p[-1], *maxes[j:])
        else:
            new_chunks = chunks[:i] + parts + chunks[j:]
            new_maxes = maxes[:i] + tuple(p[-1] for p in parts) + maxes[j:]
        aux = self._aux
        if self.HAS_AUX:
            aux = aux[:i] + tuple(self.summarize(p) for p in parts) + aux[j:]
        return self._make(new_chunks, new_maxes, self._len + delta, aux)

    # ---- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._chunks:
            yield from chunk

    def to_list(self) -> list[Any]:
        """The elements in order, as a list (read chunk by chunk at C speed, where
        `list(self)` steps the generator once per element)."""
        return list(chain.from_iterable(self._chunks))

    def __contains__(self, item: Any) -> bool:
        i = bisect_left(self._maxes, item)
        if i == len(self._maxes):
            return False
        chunk = self._chunks[i]
        j = bisect_left(chunk, item)
        return j < len(chunk) and chunk[j] == item

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PSortedSet) and self._len == other._len and list(self) == list(other)

    def __hash__(self) -> int:  # pragma: no cover - sets are compared, never hashed
        raise TypeError("PSortedSet is not hashable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __getitem__(self, i: int) -> Any:
        """The i-th smallest element (O(number of chunks))."""
        if not 0 <= i < self._len:
            raise IndexError(i)
        for chunk in self._chunks:
            if i < len(chunk):
                return chunk[i]
            i -= len(chunk)
        raise IndexError(i)  # pragma: no cover - lengths are consistent

    def first(self) -> Any:
        if not self._len:
            raise KeyError("first() of an empty set")
        return self._chunks[0][0]

    def floor_lt(self, item: Any) -> Any:
        """The largest element strictly below `item`, or None."""
        i = bisect_left(self._maxes, item)
        if i < len(self._chunks):
            chunk = self._chunks[i]
            j = bisect_left(chunk, item)
            if j > 0:
                return chunk[j - 1]
        if i > 0:
            return self._chunks[i - 1][-1]
        return None

    def ceil_ge(self, item: Any) -> Any:
        """The smallest element at or above `item`, or None."""
        i = bisect_left(self._maxes, item)
        if i == len(self._chunks):
            return None
        chunk = self._chunks[i]
        return chunk[bisect_left(chunk, item)]

    def iter_from(self, item: Any) -> Iterator[Any]:
        """Elements strictly above `item`, in order."""
        # the chunk holding the first element > item is the first whose max > item
        i = bisect_right(self._maxes, item)
        if i == len(self._chunks):
            return
        chunk = self._chunks[i]
        yield from chunk[bisect_right(chunk, item) :]
        for c in self._chunks[i + 1 :]:
            yield from c

    # ---- updating ---------------------------------------------------------------------------
    def add(self, item: Any) -> "PSortedSet":
        chunks = self._chunks
        if not chunks:
            return self._replace(0, 0, ((item,),), 1)
        i = bisect_left(self._maxes, item)
        if i == len(chunks):
            i -= 1
        chunk = chunks[i]
        j = bisect_left(chunk, item)
        if j < len(chunk) and chunk[j] == item:
            return self
        new = chunk[:j] + (item,) + chunk[j:]
        if len(new) > 2 * CHUNK:
            half = len(new) // 2
            return self._replace(i, i + 1, (new[:half], new[half:]), 1)
        return self._replace(i, i + 1, (new,), 1)

    def remove(self, item: Any) -> "PSortedSet":
        chunks = self._chunks
        i = bisect_left(self._maxes, item)
        if i == len(chunks):
            raise KeyError(item)
        chunk = chunks[i]
        j = bisect_left(chunk, item)
        if j == len(chunk) or chunk[j] != item:
            raise KeyError(item)
        new = chunk[:j] + chunk[j + 1 :]
        return self._replace(i, i + 1, (new,) if new else (), -1)

    def add_many(self, items: Iterable[Any]) -> "PSortedSet":
        """The set with every element of `items` added, in one pass over the chunks."""
        new_items = sorted(set(items))
        if not new_items:
            return self
        if not self._chunks:
            return type(self)(new_items)
        chunks, maxes = self._chunks, self._maxes
        last = len(chunks) - 1
        groups: dict[int, list[Any]] = {}
        for x in new_items:
            i = bisect_left(maxes, x)
            groups.setdefault(min(i, last), []).append(x)
        out = self
        for i in sorted(groups, reverse=True):  # right to left: indices stay valid
            chunk = out._chunks[i]
            merged = sorted(set(chunk).union(groups[i]))
            added = len(merged) - len(chunk)
            if len(merged) > 2 * CHUNK:
                parts = tuple(tuple(merged[j : j + CHUNK]) for j in range(0, len(merged), CHUNK))
            else:
                parts = (tuple(merged),)
            out = out._replace(i, i + 1, parts, added)
        return out

    def remove_many(self, items: Iterable[Any]) -> "PSortedSet":
        out = self
        for x in items:
            out = out.remove(x)
        return out

    def take_first(self, k: int) -> tuple[tuple[Any, ...], "PSortedSet"]:
        """The `k` smallest elements and the set without them."""
        if k > self._len:
            raise KeyError(f"take_first({k}) of a set of {self._len}")
        taken: list[Any] = []
        chunks = self._chunks
        i = 0
        while len(taken) < k:
            need = k - len(taken)
            c = chunks[i]
            if len(c) <= need:
                taken.extend(c)
                i += 1
            else:
                taken.extend(c[:need])
                return tuple(taken), self._replace(0, i + 1, (c[need:],), -k)
        return tuple(taken), self._replace(0, i, (), -k)

    def discard(self, item: Any) -> "PSortedSet":
        return self.remove(item) if item in self else self


_LENGTH = itemgetter(1)


class RunSet(PSortedSet):
    """Free runs `(base, length)` ordered by base, with the longest run of each chunk kept,
    so that the lowest-based run of at least n pages is found by skipping whole chunks."""

    __slots__ = ()
    HAS_AUX = True

    @staticmethod
    def summarize(chunk: tuple[Any, ...]) -> int:
        return max(map(_LENGTH, chunk))

    def first_fit(self, length: int) -> tuple[int, int] | None:
        for longest, chunk in zip(self._aux, self._chunks):
            if longest >= length:
                for run in chunk:
                    if run[1] >= length:
                        return run
        return None
