"""A persistent (immutable) sorted set.

Neither `immutables` nor `pyrsistent` offers an ordered collection, and the model
needs several: the device and host victim orders, the backup candidates and the free
lists. This one is a B+ tree of tuples: leaves are sorted tuples of up to 2 * B
elements, inner nodes hold up to 2 * B children with each child's largest element; a
node that grows past 2 * B is split in halves, one that shrinks below B / 4 is merged
with a neighbour. An update copies the path from the root to the leaf it changes (each
node of it a tuple copy of at most 2 * B pointers), so it costs O(B log_B n) and old
versions stay valid (every untouched node is shared). A copy touches each pointer it
copies (a reference count), and on a large set those are cache misses: the copies are
kept short, so that an update on a set of a million elements costs about what it costs
on a thousand.

A subclass may keep one summary value per child (`summarize` of a leaf; the largest of
a node's summaries for an inner node), maintained on every update; `RunSet` uses it to
find the lowest free run of a given length without scanning every run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain
from operator import itemgetter
from typing import Any, Iterable, Iterator

B = 32  # a node holds up to 2 * B entries; one built from a list is filled to B
_MERGE = B // 4  # a node below this many entries is merged with a neighbour


class _Inner:
    """An inner node: its children (leaf tuples or inner nodes, all at one height), the
    largest element under each, the number of elements under it, and (`HAS_AUX`) the
    summary of each child."""

    __slots__ = ("kids", "maxes", "n", "aux")

    def __init__(self, kids: tuple, maxes: tuple, n: int, aux: tuple | None) -> None:
        self.kids, self.maxes, self.n, self.aux = kids, maxes, n, aux


def _size(node: Any) -> int:
    return node.n if type(node) is _Inner else len(node)


def _top(node: Any) -> Any:
    """The largest element under a node."""
    return node.maxes[-1] if type(node) is _Inner else node[-1]


class PSortedSet:
    __slots__ = ("_root", "_height", "_len")

    HAS_AUX = False

    def __init__(self, items: Iterable[Any] = ()) -> None:
        ordered = sorted(set(items))
        self._set(*self._build(ordered), len(ordered))

    def _set(self, root: Any, height: int, length: int) -> None:
        self._root, self._height, self._len = root, height, length

    # ---- per-child summaries (none in the base class) ----------------------------------
    @staticmethod
    def summarize(chunk: tuple[Any, ...]) -> Any:
        return None

    def _summary(self, node: Any) -> Any:
        return max(node.aux) if type(node) is _Inner else self.summarize(node)

    def _inner(self, kids: tuple, n: int) -> _Inner:
        return _Inner(kids, tuple(map(_top, kids)), n, tuple(map(self._summary, kids)) if self.HAS_AUX else None)

    def _build(self, ordered: list[Any]) -> tuple[Any, int]:
        """A tree of the sorted elements `ordered`: its root and height."""
        if len(ordered) <= 2 * B:
            return tuple(ordered), 0
        level: list[Any] = [tuple(ordered[i : i + B]) for i in range(0, len(ordered), B)]
        height = 0
        while len(level) > 2 * B:
            level = [self._inner(tuple(level[i : i + B]), sum(map(_size, level[i : i + B]))) for i in range(0, len(level), B)]
            height += 1
        return self._inner(tuple(level), len(ordered)), height + 1

    def _make(self, root: Any, height: int, length: int) -> "PSortedSet":
        obj = object.__new__(type(self))
        obj._root, obj._height, obj._len = root, height, length
        return obj

    # ---- updating along a path ------------------------------------------------------------
    def _path(self, item: Any, bisect: Any = bisect_left) -> tuple[list[tuple[_Inner, int]], tuple]:
        """The inner nodes from the root down to the leaf where `item` belongs (the last
        leaf when it is larger than every element), each with the index of the child
        taken, and that leaf."""
        path = []
        node = self._root
        for _ in range(self._height):
            maxes = node.maxes
            i = bisect(maxes, item)
            if i == len(maxes):
                i -= 1
            path.append((node, i))
            node = node.kids[i]
        return path, node

    def _rebuild(self, path: list[tuple[_Inner, int]], parts: tuple, delta: int) -> "PSortedSet":
        """The set whose leaf at the end of `path` is replaced by the leaves `parts` (none,
        one or two), with `delta` elements more; nodes are split, merged and dropped on the
        way up as their sizes need."""
        height = self._height
        if len(parts) == 1 and not self.HAS_AUX and _no_merge(path, parts[0]):
            # the common case: one leaf replaced by one leaf, no node on the path to merge or
            # split (what the loop below does then, without its checks)
            part = parts[0]
            for node, i in reversed(path):
                kids, maxes = node.kids, node.maxes
                part = _Inner(kids[:i] + (part,) + kids[i + 1 :], maxes[:i] + (_top(part),) + maxes[i + 1 :], node.n + delta, None)
            return self._make(part, height, self._len + delta)
        for node, i in reversed(path):
            kids = node.kids
            lo, hi = i, i + 1
            if len(parts) == 1 and len(kids) > 1 and _entries(parts[0]) < _MERGE:
                # merge a small node with a neighbour (split again if that is too large)
                if i + 1 < len(kids):
                    parts, hi = _join(self, parts[0], kids[i + 1]), i + 2
                else:
                    parts, lo = _join(self, kids[i - 1], parts[0]), i - 1
            n = node.n + delta
            new_kids = kids[:lo] + parts + kids[hi:]
            if not new_kids:
                parts = ()
                continue
            new_maxes = node.maxes[:lo] + tuple(map(_top, parts)) + node.maxes[hi:]
            aux = node.aux[:lo] + tuple(map(self._summary, parts)) + node.aux[hi:] if self.HAS_AUX else None
            if len(new_kids) > 2 * B:
                h = len(new_kids) // 2
                left_n = sum(map(_size, new_kids[:h]))
                parts = (
                    _Inner(new_kids[:h], new_maxes[:h], left_n, aux[:h] if aux is not None else None),
                    _Inner(new_kids[h:], new_maxes[h:], n - left_n, aux[h:] if aux is not None else None),
                )
            else:
                parts = (_Inner(new_kids, new_maxes, n, aux),)
        length = self._len + delta
        if not parts:
            return self._make((), 0, 0)
        if len(parts) == 2:
            return self._make(self._inner(parts, length), height + 1, length)
        root = parts[0]
        while type(root) is _Inner and len(root.kids) == 1:
            root, height = root.kids[0], height - 1
        return self._make(root, height, length)

    # ---- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    @property
    def _chunks(self) -> tuple[tuple[Any, ...], ...]:
        """The leaves in order (each a sorted tuple; an unchanged leaf is the same object
        in every version that shares it)."""
        level = [self._root]
        for _ in range(self._height):
            level = [k for node in level for k in node.kids]
        return tuple(level) if self._len else ()

    def __iter__(self) -> Iterator[Any]:
        """The elements in order, lazily: the first costs a walk down the tree, so that a
        caller who stops early (the first victims of an order) pays for what it reads."""
        if not self._len:
            return
        if not self._height:
            yield from self._root
            return
        stack = [iter(self._root.kids)]
        while stack:
            kid = next(stack[-1], None)
            if kid is None:
                stack.pop()
            elif len(stack) == self._height:
                yield from kid
            else:
                stack.append(iter(kid.kids))

    def to_list(self) -> list[Any]:
        """The elements in order, as a list (read leaf by leaf at C speed, where
        `list(self)` steps the generator once per element)."""
        return list(chain.from_iterable(self._chunks))

    def __contains__(self, item: Any) -> bool:
        if not self._len:
            return False
        path, leaf = self._path(item)
        j = bisect_left(leaf, item)
        return j < len(leaf) and leaf[j] == item

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PSortedSet) and self._len == other._len and self.to_list() == other.to_list()

    def __hash__(self) -> int:  # pragma: no cover - sets are compared, never hashed
        raise TypeError("PSortedSet is not hashable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_list()!r})"

    def __getitem__(self, i: int) -> Any:
        """The i-th smallest element (O(B log_B n))."""
        if not 0 <= i < self._len:
            raise IndexError(i)
        node = self._root
        for _ in range(self._height):
            for kid in node.kids:
                k = _size(kid)
                if i < k:
                    node = kid
                    break
                i -= k
        return node[i]

    def first(self) -> Any:
        if not self._len:
            raise KeyError("first() of an empty set")
        node = self._root
        for _ in range(self._height):
            node = node.kids[0]
        return node[0]

    def floor_lt(self, item: Any) -> Any:
        """The largest element strictly below `item`, or None."""
        node = self._root
        below = None  # the largest element of the subtrees left of the path
        for _ in range(self._height):
            maxes = node.maxes
            i = bisect_left(maxes, item)
            if i == len(maxes):
                return maxes[-1]
            if i:
                below = maxes[i - 1]
            node = node.kids[i]
        j = bisect_left(node, item)
        return node[j - 1] if j else below

    def ceil_ge(self, item: Any) -> Any:
        """The smallest element at or above `item`, or None."""
        if not self._len or item > _top(self._root):
            return None
        path, leaf = self._path(item)
        return leaf[bisect_left(leaf, item)]

    def iter_from(self, item: Any) -> Iterator[Any]:
        """Elements strictly above `item`, in order."""
        if not self._len:
            return
        path, leaf = self._path(item, bisect_right)
        yield from leaf[bisect_right(leaf, item) :]
        # then the leaves right of the path, from the deepest level up
        stack = [node.kids[i + 1 :] for node, i in path]
        while stack:
            rest = stack.pop()
            depth = len(stack)
            for kid in rest:
                yield from _leaf_items(kid, self._height - depth - 1)

    # ---- updating ---------------------------------------------------------------------------
    def add(self, item: Any) -> "PSortedSet":
        if not self._len:
            return self._make((item,), 0, 1)
        path, leaf = self._path(item)
        j = bisect_left(leaf, item)
        if j < len(leaf) and leaf[j] == item:
            return self
        new = leaf[:j] + (item,) + leaf[j:]
        if len(new) > 2 * B:
            h = len(new) // 2
            return self._rebuild(path, (new[:h], new[h:]), 1)
        return self._rebuild(path, (new,), 1)

    def remove(self, item: Any) -> "PSortedSet":
        if not self._len:
            raise KeyError(item)
        path, leaf = self._path(item)
        j = bisect_left(leaf, item)
        if j == len(leaf) or leaf[j] != item:
            raise KeyError(item)
        new = leaf[:j] + leaf[j + 1 :]
        return self._rebuild(path, (new,) if new else (), -1)

    def discard(self, item: Any) -> "PSortedSet":
        return self.remove(item) if item in self else self

    def add_many(self, items: Iterable[Any]) -> "PSortedSet":
        """The set with every element of `items` added: one at a time when they are few
        against the set, else by building the merged set at once."""
        new_items = set(items)
        if len(new_items) * 16 <= self._len:
            out = self
            for x in sorted(new_items):
                out = out.add(x)
            return out
        if not new_items:
            return self
        merged = sorted(new_items.union(self.to_list()))
        out = self._make((), 0, len(merged))
        out._root, out._height = self._build(merged)
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
        if k == 0:
            return (), self
        taken: list[Any] = []
        root = self._drop(self._root, self._height, k, taken)
        height = self._height
        while type(root) is _Inner and len(root.kids) == 1:
            root, height = root.kids[0], height - 1
        return tuple(taken), self._make(root if self._len > k else (), height if self._len > k else 0, self._len - k)

    def _drop(self, node: Any, height: int, k: int, taken: list[Any]) -> Any:
        """`node` without its `k` smallest elements (appended to `taken`); None if empty."""
        if not height:
            taken.extend(node[:k])
            return node[k:] or None
        kids = node.kids
        j = 0
        while k and k >= _size(kids[j]):
            k -= _size(kids[j])
            taken.extend(_leaf_items(kids[j], height - 1))
            j += 1
            if j == len(kids):
                return None
        if not k:
            first = kids[j]
        else:
            first = self._drop(kids[j], height - 1, k, taken)
        dropped = sum(map(_size, kids[:j])) + (_size(kids[j]) - _size(first))
        aux = ((self._summary(first),) + node.aux[j + 1 :]) if self.HAS_AUX else None
        return _Inner((first,) + kids[j + 1 :], node.maxes[j:], node.n - dropped, aux)


def _no_merge(path: list[tuple[_Inner, int]], leaf: tuple) -> bool:
    """Whether `_rebuild` merges no node when `leaf` replaces the leaf at the end of
    `path` (each node below the root, and the leaf, keeps at least `_MERGE` entries)."""
    if path and len(leaf) < _MERGE:
        return False
    for node, _ in path[1:]:
        if len(node.kids) < _MERGE:
            return False
    return True


def _entries(node: Any) -> int:
    return len(node.kids) if type(node) is _Inner else len(node)


def _join(s: PSortedSet, a: Any, b: Any) -> tuple:
    """Two neighbouring nodes of one height as one node, or as two halves if too large."""
    if type(a) is _Inner:
        kids = a.kids + b.kids
        if len(kids) <= 2 * B:
            return (s._inner(kids, a.n + b.n),)
        h = len(kids) // 2
        return (s._inner(kids[:h], sum(map(_size, kids[:h]))), s._inner(kids[h:], sum(map(_size, kids[h:]))))
    items = a + b
    if len(items) <= 2 * B:
        return (items,)
    h = len(items) // 2
    return (items[:h], items[h:])


def _leaf_items(node: Any, height: int) -> Iterator[Any]:
    """The elements under `node`, a node `height` levels above the leaves, in order."""
    if not height:
        return iter(node)
    level = [node]
    for _ in range(height):
        level = [k for n in level for k in n.kids]
    return chain.from_iterable(level)


_LENGTH = itemgetter(1)


class RunSet(PSortedSet):
    """Free runs `(base, length)` ordered by base, with the longest run under each child
    kept, so that the lowest-based run of at least n pages is found by skipping whole
    subtrees."""

    __slots__ = ()
    HAS_AUX = True

    @staticmethod
    def summarize(chunk: tuple[Any, ...]) -> int:
        return max(map(_LENGTH, chunk))

    def first_fit(self, length: int) -> tuple[int, int] | None:
        if not self._len:
            return None
        node = self._root
        for _ in range(self._height):
            for longest, kid in zip(node.aux, node.kids):
                if longest >= length:
                    node = kid
                    break
            else:
                return None
        for run in node:
            if run[1] >= length:
                return run
        return None
