"""A persistent (immutable) sorted set.

Neither `immutables` nor `pyrsistent` offers an ordered collection, and the model
needs three: the device and host victim orders and the free lists. This one keeps
its elements in a tuple of sorted chunks; an update copies one chunk and the
two top-level tuples, which CPython does at memcpy speed, so it costs
O(n / CHUNK + CHUNK) pointer copies and old versions stay valid (structural
sharing of every untouched chunk).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Iterator

CHUNK = 256


class PSortedSet:
    __slots__ = ("_chunks", "_maxes", "_len")

    def __init__(self, items: Iterable[Any] = ()) -> None:
        ordered = sorted(set(items))
        chunks = tuple(tuple(ordered[i : i + CHUNK]) for i in range(0, len(ordered), CHUNK))
        self._chunks: tuple[tuple[Any, ...], ...] = chunks
        self._maxes: tuple[Any, ...] = tuple(c[-1] for c in chunks)
        self._len = len(ordered)

    @classmethod
    def _make(cls, chunks: tuple, maxes: tuple, length: int) -> "PSortedSet":
        obj = cls.__new__(cls)
        obj._chunks, obj._maxes, obj._len = chunks, maxes, length
        return obj

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._chunks:
            yield from chunk

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
        return f"PSortedSet({list(self)!r})"

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

    def add(self, item: Any) -> "PSortedSet":
        chunks, maxes = self._chunks, self._maxes
        if not chunks:
            return PSortedSet._make(((item,),), (item,), 1)
        i = bisect_left(maxes, item)
        if i == len(chunks):
            i -= 1
        chunk = chunks[i]
        j = bisect_left(chunk, item)
        if j < len(chunk) and chunk[j] == item:
            return self
        new = chunk[:j] + (item,) + chunk[j:]
        if len(new) > 2 * CHUNK:
            half = len(new) // 2
            parts = (new[:half], new[half:])
        else:
            parts = (new,)
        return PSortedSet._make(
            chunks[:i] + parts + chunks[i + 1 :],
            maxes[:i] + tuple(p[-1] for p in parts) + maxes[i + 1 :],
            self._len + 1,
        )

    def remove(self, item: Any) -> "PSortedSet":
        chunks, maxes = self._chunks, self._maxes
        i = bisect_left(maxes, item)
        if i == len(chunks):
            raise KeyError(item)
        chunk = chunks[i]
        j = bisect_left(chunk, item)
        if j == len(chunk) or chunk[j] != item:
            raise KeyError(item)
        new = chunk[:j] + chunk[j + 1 :]
        if new:
            return PSortedSet._make(
                chunks[:i] + (new,) + chunks[i + 1 :],
                maxes[:i] + (new[-1],) + maxes[i + 1 :],
                self._len - 1,
            )
        return PSortedSet._make(chunks[:i] + chunks[i + 1 :], maxes[:i] + maxes[i + 1 :], self._len - 1)

    def add_many(self, items: Iterable[Any]) -> "PSortedSet":
        """The set with every element of `items` added, in one pass over the chunks."""
        new_items = sorted(set(items))
        if not new_items:
            return self
        if not self._chunks:
            return PSortedSet(new_items)
        chunks = list(self._chunks)
        maxes = self._maxes
        last = len(chunks) - 1
        groups: dict[int, list[Any]] = {}
        for x in new_items:
            i = bisect_left(maxes, x)
            groups.setdefault(min(i, last), []).append(x)
        added = 0
        for i in sorted(groups, reverse=True):
            merged = sorted(set(chunks[i]).union(groups[i]))
            added += len(merged) - len(chunks[i])
            if len(merged) > 2 * CHUNK:
                chunks[i : i + 1] = [tuple(merged[j : j + CHUNK]) for j in range(0, len(merged), CHUNK)]
            else:
                chunks[i] = tuple(merged)
        return PSortedSet._make(tuple(chunks), tuple(c[-1] for c in chunks), self._len + added)

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
                rest = c[need:]
                return tuple(taken), PSortedSet._make((rest,) + chunks[i + 1 :], (rest[-1],) + self._maxes[i + 1 :], self._len - k)
        return tuple(taken), PSortedSet._make(chunks[i:], self._maxes[i:], self._len - k)

    def discard(self, item: Any) -> "PSortedSet":
        return self.remove(item) if item in self else self

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
