"""`HostAlloc`: the host-page allocator of a `Tx` (`kvsm.tx`), a mixin of it: free runs
per payload region (`l2_free`, with their digest sum kept), first fit of a run or the
lowest free pages (`l2_alloc`), and the L2 objects made and freed on them. It reads
and writes the transaction's `l2_free`, `objects` and `host_content` and emits its
`PoisonHost` effects; `Tx` is its only user.
"""

from __future__ import annotations

from . import effects as fx
from .digest import entry_hash
from .records import Obj, page_runs


class HostAlloc:
    """The host-page methods of `Tx` (which holds the state they read and write)."""

    __slots__ = ()

    def _take_run(self, i: int, run: tuple[int, int]) -> None:
        self.l2_free[i] = self.l2_free[i].remove(run)
        if self.track:
            self._l2_free_delta -= entry_hash("l2_free", (i, run), True)

    def _put_run(self, i: int, run: tuple[int, int]) -> None:
        self.l2_free[i] = self.l2_free[i].add(run)
        if self.track:
            self._l2_free_delta += entry_hash("l2_free", (i, run), True)

    def first_fit(self, length: int) -> int | None:
        """Base of the lowest free run of `length` pages in every payload region, or None."""
        found = None
        for runs in self.l2_free:
            run = runs.first_fit(length)
            if run is None:
                return None
            base = run[0]
            if found is None:
                found = base
            elif found != base:  # regions are allocated in lockstep, so this cannot differ
                raise AssertionError("payload regions diverged")
        return found

    def host_room(self, length: int) -> bool:
        """Whether an object of `length` pages fits the free host pages: a free run of
        them (`l2_alloc = "run"`), or as many free pages anywhere (`"pages"`)."""
        if self.cfg.l2_alloc == "pages":
            return self._lowest_free(length) is not None
        return self.first_fit(length) is not None

    def _lowest_free(self, length: int) -> list[tuple[int, int]] | None:
        """The lowest `length` free host pages as runs `(base, length)`, or None."""
        out, left = [], length
        if left <= 0:
            return out
        for base, n in self.l2_free[0]:
            k = min(n, left)
            out.append((base, k))
            left -= k
            if not left:
                return out
        return None

    def host_alloc(self, length: int) -> tuple[int, ...] | None:
        """The host pages, in the object's order, of a new object of `length` pages
        (first fit of a run, or the lowest free pages: `l2_alloc`), not taken yet; None
        when it does not fit."""
        if self.cfg.l2_alloc == "pages":
            runs = self._lowest_free(length)
            return None if runs is None else tuple(p for b, k in runs for p in range(b, b + k))
        base = self.first_fit(length)
        return None if base is None else tuple(range(base, base + length))

    def new_object(self, pages: tuple[int, ...], committed: bool, owner: int) -> Obj:
        """Take host pages `pages` (from `host_alloc`) for an object and return it."""
        if self.cfg.l2_alloc != "pages":  # (one run)
            self.alloc_host(pages[0], len(pages))
            return Obj(pages[0], len(pages), committed, owner)
        for base, n in page_runs(pages):
            self.alloc_host(base, n)
        return Obj(pages[0], len(pages), committed, owner, pages)

    def free_pages_of(self, obj: Obj) -> None:
        """Free (and poison) the host pages of object `obj`, keeping its registration."""
        if not obj.pages:
            self.free_host(obj.base, obj.length)
            return
        i = 0
        for base, n in page_runs(obj.pages):
            self.free_host(base, n, i)
            i += n

    def alloc_host(self, base: int, length: int) -> None:
        for i, runs in enumerate(self.l2_free):
            run = runs.floor_lt((base + 1, 0)) if runs else None
            if run is None or run[0] > base or run[0] + run[1] < base + length:
                raise AssertionError(f"host pages {base}..{base + length - 1} are not free")
            self._take_run(i, run)
            if run[0] < base:
                self._put_run(i, (run[0], base - run[0]))
            end = run[0] + run[1]
            if base + length < end:
                self._put_run(i, (base + length, end - base - length))

    def free_host(self, base: int, length: int, index: int = 0) -> None:
        """Free host pages `base .. base+length-1`, indices `index ..` of their object."""
        L2 = self.cfg.L2
        for i, runs in enumerate(self.l2_free):
            lo, n = base, length
            before = runs.floor_lt((lo, 0))
            if before is not None and before[0] + before[1] == lo:
                self._take_run(i, before)
                lo, n = before[0], before[1] + n
            after = self.l2_free[i].ceil_ge((base + length, 0))
            if after is not None and after[0] == base + length:
                self._take_run(i, after)
                n += after[1]
            self._put_run(i, (lo, n))
            for page in range(base, base + length):
                k = i * L2 + page
                if k in self.host_content:
                    self.host_content.delete(k)
        self.effects.append(fx.PoisonHost(base, length, index))

    def free_object(self, key: int) -> None:
        self.free_pages_of(self.objects[key])
        self.objects.delete(key)
