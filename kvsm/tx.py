"""`Tx`: a transient, mutable view of one `ClusterState` for the duration of one transition.

A transition opens a `Tx` on a state, reads and writes through it, and `commit()`s a new
state; a guard that fails raises `Rejected` before `commit()`, so nothing is
half-applied. The transaction records every write, so that the derived part of the
state (victim orders, backup candidates, the digest sums) is maintained for exactly the
entries written. It also owns the allocators (device pages per lane here; host pages in its
mixin `kvsm.hostalloc.HostAlloc`) and is the only way a transition emits an effect
(`kvsm.effects`).
"""

from __future__ import annotations

from typing import Any, Iterable

from .digest import MOD, free_page_hash
from .digest_sums import I_DEV_FREE, I_L2_FREE, I_WRITES, MAP_COMPONENTS, seq_sum
from . import content
from . import effects as fx
from .maptx import MapTx
from .hostalloc import HostAlloc
from .state import GONE, NO_PARENT, ROOT_ID, ClusterState, Node, Rejected, draft_of
from .victims import reindex
from .writes import EMPTY, committed


# the persistent maps and the per-lane / per-rank sequences a `Tx` copies on first use
# (`_OnFirstUse`): a transition pays only for the parts of the state it reads
_LAZY_MAPS = frozenset(MAP_COMPONENTS)
_LIST_NAMES = (
    "dev_free", "l2_free", "write_done", "spill_gathered", "spill_done", "reload_done", "disk_ok", "l3_used",
    "spill_staged", "load_done", "commit_round", "acked",
)
_LAZY_LISTS = frozenset(_LIST_NAMES)
_MAP_INDEX = {name: i for i, name in enumerate(MAP_COMPONENTS)}
_SEQS = ((I_WRITES, "writes"), (I_WRITES + 1, "spill_queue"), (I_WRITES + 2, "spills"), (I_WRITES + 3, "reloads"),
         (I_WRITES + 4, "spill_staged"), (I_WRITES + 5, "loads"))
_WRITTEN_MAPS = ("nodes", "objects", "pending", "requests", "dev_content", "host_content", "reload_candidates", "l3")
_WRITTEN_INDEX = {name: i for i, name in enumerate(_WRITTEN_MAPS)}
_EMPTY = EMPTY  # the empty key set of a map no write reached
# the keys written per map of _WRITTEN_MAPS by a transaction that wrote none (a map no
# write reached has the shared empty set, as `committed` wants)
_NONE_WRITTEN = (_EMPTY,) * len(_WRITTEN_MAPS)


class _OnFirstUse:
    """A map's `MapTx` or a tuple's list, made from the transaction's state the first time
    the transition reads it and kept in the transaction's `__dict__` from then on (a
    descriptor without `__set__`, which the instance's own attribute hides)."""

    __slots__ = ("name", "make")

    def __init__(self, name: str, make: Any) -> None:
        self.name, self.make = name, make

    def __get__(self, tx: Any, owner: Any = None) -> Any:
        if tx is None:
            return self
        v = tx.__dict__[self.name] = self.make(self.name, getattr(tx.s, self.name))
        return v


class Tx(HostAlloc):
    """A transient, mutable view of one state for the duration of one transition.

    The state's maps are read and written through a `MapTx` each (`tx.nodes`, ...), its
    per-lane and per-rank tuples through a list each (`tx.dev_free`, `tx.write_done`,
    ...), its scalars and short sequences as plain attributes (`tx.clock`, `tx.writes`,
    ...). A map's `MapTx` and a tuple's list are made the first time the transition
    reads them; `commit` takes the parts never read from the old state as they are."""

    def __init__(self, s: ClusterState) -> None:
        self.s = s
        self.cfg = s.config
        self.spill_queue = s.spill_queue
        self.spills = s.spills
        self.reloads = s.reloads
        self.loads = s.loads
        self.disk_faults = s.disk_faults
        self.next_id = s.next_id
        self.clock = s.clock
        self.next_rid = s.next_rid
        self.writes = s.writes
        self._dev_free_delta = 0
        self._l2_free_delta = 0
        self.track = s.sums is not None  # maintain the digest sums
        self.effects: list[fx.Effect] = []

    def peek(self, name: str) -> Any:
        """Map `name` as this transaction sees it, for reading only: its `MapTx` if the
        transaction opened it, else the state's map (not opened for a lookup)."""
        mtx = self.__dict__.get(name)
        return mtx if mtx is not None else getattr(self.s, name)

    # ---- nodes ---------------------------------------------------------------------------------
    def node(self, nid: int) -> Node:
        return self.nodes[nid]

    def put(self, node: Node) -> Node:
        self.nodes.set(node.id, node)
        return node

    def update(self, nid: int, **changes: Any) -> Node:
        return self.put(self.nodes[nid].with_(**changes))

    def touch(self, nid: int) -> None:
        self.clock += 1
        nodes = self.nodes
        m = nodes.writable()
        m[nid] = m[nid].with_(touched=self.clock)
        nodes.dirty.add(nid)

    def set_dev(self, nid: int, dev: tuple[int, ...]) -> None:
        """Give a node device pages or take them away, keeping its parent's `ondev` count."""
        n = self.nodes[nid]
        was, now = bool(n.dev), bool(dev)
        self.put(n.with_(dev=dev))
        if was != now and n.parent != NO_PARENT:
            p = self.nodes[n.parent]
            self.put(p.with_(ondev=p.ondev + (1 if now else -1)))

    def add_child(self, node: Node) -> Node:
        """Attach a new node under its parent (its first symbol must be free there)."""
        p = self.nodes[node.parent]
        self.put(p.with_(children=p.children.set(node.child_key, node.id), ondev=p.ondev + (1 if node.dev else 0)))
        return self.put(node)

    def remove_leaf(self, nid: int) -> None:
        """Delete a node that has no children, detaching it from its parent; a husk
        (`GONE`) left with no orphan under it goes too."""
        n = self.nodes[nid]
        assert not len(n.children), "remove_leaf on a node with children"
        p = self.nodes[n.parent]
        if p.parent == GONE and len(p.children) == 1:
            self.nodes.delete(p.id)
        else:
            self.put(p.with_(children=p.children.delete(n.child_key), ondev=p.ondev - (1 if n.dev else 0)))
        self.nodes.delete(nid)

    def orphan_below(self, nid: int) -> None:
        """Take unbacked node `nid`, off L1 now, out of the tree and leave a husk in its
        place for its (L2-only) children: it keeps its id and children, its parent is
        `GONE` and its key is its whole prefix, so what its orphans' pages hold still
        follows from their parent links; no match reaches it or them."""
        n = self.nodes[nid]
        # its ancestors, read in this transaction (an insert may have split one): all on
        # L1 as it was, so in the tree, up to the root
        path = []
        cur = n.parent
        while cur != ROOT_ID:
            path.append(cur)
            cur = self.nodes[cur].parent
        above = tuple(x for a in reversed(path) for x in self.nodes[a].key)
        p = self.nodes[n.parent]
        self.put(p.with_(children=p.children.delete(n.child_key), ondev=p.ondev - (1 if n.dev else 0)))
        key = above + n.key
        self.put(n.with_(parent=GONE, key=key, hashes=content.prefix_content_in(n.ns, key), dev=()))

    def lock_path(self, nid: int, delta: int) -> None:
        if nid == ROOT_ID:
            return
        nodes = self.nodes
        m, dirty = nodes.writable(), nodes.dirty
        while nid != ROOT_ID:
            n = m[nid]
            m[nid] = n.with_(lock=n.lock + delta)
            dirty.add(nid)
            nid = n.parent

    def move_lock(self, src: int, dst: int) -> None:
        """`lock_path(dst, +1)` and then `lock_path(src, -1)`, in one pass: a node on both
        paths keeps its lock, and is not copied."""
        if src == dst:
            return
        nodes = self.nodes
        m = nodes.writable()
        delta: dict[int, int] = {}
        nid = dst
        while nid != ROOT_ID:
            delta[nid] = 1
            nid = m[nid].parent
        nid = src
        while nid != ROOT_ID:
            delta[nid] = delta.get(nid, 0) - 1
            nid = m[nid].parent
        dirty = nodes.dirty
        for nid, d in delta.items():
            if d:
                n = m[nid]
                m[nid] = n.with_(lock=n.lock + d)
                dirty.add(nid)

    def new_id(self) -> int:
        nid = self.next_id
        self.next_id += 1
        return nid

    # ---- device pages ---------------------------------------------------------------------------
    def free_in_lane(self, lane: int) -> int:
        return len(self.dev_free[lane])

    def alloc_dev(self, lane: int) -> int:
        return self.alloc_lanes([lane])[0]

    def alloc_lanes(self, lanes: list[int]) -> tuple[int, ...]:
        """One device page per entry of `lanes`, each the lowest free page of its lane
        (pages of one lane are handed out in ascending order)."""
        if self.cfg.R == 1:
            return self._take(0, len(lanes))
        need: dict[int, int] = {}
        for lane in lanes:
            need[lane] = need.get(lane, 0) + 1
        got: dict[int, list[int]] = {}
        for lane, k in need.items():
            got[lane] = list(reversed(self._take(lane, k)))
        return tuple(got[lane].pop() for lane in lanes)

    def alloc_positions(self, start: int, n: int) -> tuple[int, ...]:
        """Device pages for the pages at positions `start .. start+n-1` of a key, each from
        its owner lane (`alloc_lanes` of their lanes)."""
        R = self.cfg.R
        if R == 1:
            return self._take(0, n)
        # (what `alloc_lanes` gives, lane by lane: the pages at positions j with
        # (start + j) mod R == lane are that lane's lowest free pages, in order)
        out: list[int] = [0] * n
        for j0 in range(min(R, n)):
            out[j0::R] = self._take((start + j0) % R, len(range(j0, n, R)))
        return tuple(out)

    def _take(self, lane: int, k: int) -> tuple[int, ...]:
        """The `k` lowest free pages of `lane`, taken."""
        free = self.dev_free[lane]
        if len(free) < k:
            raise Rejected(f"device lane {lane} has {len(free)} free pages, {k} needed")
        if not k:
            return ()
        pages, self.dev_free[lane] = free.take_first(k)
        if self.track:
            self._dev_free_delta -= sum(map(free_page_hash, pages))
        return pages

    def free_dev(self, pages: Iterable[int]) -> None:
        """Free device pages (in this order): each leaves its lane's free set's complement,
        loses its content (the ghost) and is poisoned by its owner."""
        pages = tuple(pages)
        if not pages:
            return
        R = self.cfg.R
        if self.track:
            self._dev_free_delta += sum(map(free_page_hash, pages))
        self.dev_content.delete_present(pages)
        self.effects.extend(fx.poison_dev_batch(pages))
        if R == 1:
            self.dev_free[0] = self.dev_free[0].add_many(pages)
            return
        for lane, ps in _by_lane(pages, R):
            self.dev_free[lane] = self.dev_free[lane].add_many(ps)

    # ---- page contents (the ghost) and the physical effects that move them -------------------
    def fill_dev(self, page: int, c: int) -> None:
        """The forward pass computed the KV of prefix `c` into device page `page`."""
        self.dev_content.set(page, c)
        self.effects.append(fx.Fill(page, c))

    def fill_devs(self, pages: tuple[int, ...], contents: tuple[int, ...]) -> None:
        """`fill_dev` of each page with its content, in order."""
        self.dev_content.set_many(pages, contents)
        self.effects.extend(fx.fill_batch(pages, contents))

    def load_dev(self, page: int, host_page: int, claim: int) -> None:
        """Copy host page `host_page` (of every payload region) into device page `page`, for
        a node that claims it holds the KV of prefix `claim`."""
        c = self.host_content.get(host_page)
        if c is None:
            if page in self.dev_content:
                self.dev_content.delete(page)
        else:
            self.dev_content.set(page, c)
        self.effects.append(fx.Load(host_page, page, claim))

    def put_l3(self, rank: int, h: int, c: int | None) -> None:
        """Rank `rank`'s disk now holds content `c` under page hash `h`."""
        if (rank, h) not in self.l3:
            self.l3_used[rank] += 1
        self.l3.set((rank, h), c)

    def put_host(self, host_page: int, c: int | None) -> None:
        """Host page `host_page` of every region now holds content `c` (None = garbage)."""
        for region in range(len(self.cfg.payloads)):
            k = region * self.cfg.L2 + host_page
            if c is None:
                if k in self.host_content:
                    self.host_content.delete(k)
            else:
                self.host_content.set(k, c)

    def store_host(self, rank: int, page: int, host_page: int) -> None:
        """Rank `rank` copies device page `page` into host page `host_page` of every region."""
        self.put_host(host_page, self.dev_content.get(page))
        self.effects.append(fx.Store(rank, page, host_page))

    def store_hosts(self, rank: int, pages: list[int], host_pages: list[int]) -> None:
        """`store_host(rank, page, host_page)` of each pair in turn, in one pass per
        region (the same map, effects and digest change)."""
        if not pages:
            return
        dev_get = self.dev_content.get
        contents = [dev_get(p) for p in pages]
        L2 = self.cfg.L2
        host = self.host_content
        if None in contents:  # (a page without content makes its host pages garbage)
            for hp, c in zip(host_pages, contents):
                self.put_host(hp, c)
        else:
            for region in range(len(self.cfg.payloads)):
                off = region * L2
                host.set_many(tuple(off + hp for hp in host_pages), contents)
        self.effects.extend(fx.store_batch((rank,) * len(pages), pages, host_pages))

    def owned_indices(self, rank: int, n: int) -> list[int]:
        """Indices `i` in `0..n-1` of an object's pages that rank `rank` owns."""
        return list(range(rank, n, self.cfg.R))

    def gather_spill(self, rank: int, base: int, hashes: tuple[int, ...]) -> None:
        """Rank `rank` copies the pages it owns of the object at `base` (page `i` has hash
        `hashes[i]`) out of the slab into its staging, the newest staged copy."""
        pages = tuple(fx.HostPage(host=base + i, hash=hashes[i]) for i in self.owned_indices(rank, len(hashes)))
        staged = tuple((p.hash, self.host_content.get(p.host)) for p in pages)
        self.spill_staged[rank] = self.spill_staged[rank] + (staged,)
        self.effects.append(fx.SpillGather(rank=rank, base=base, pages=pages))

    def write_spill(self, rank: int, ok: bool) -> None:
        """Rank `rank` writes its oldest staged copy to its disk (nothing lands when not ok)."""
        staged = self.spill_staged[rank][0]
        self.spill_staged[rank] = self.spill_staged[rank][1:]
        if ok:
            for h, c in staged:
                self.put_l3(rank, h, c)
        self.effects.append(fx.SpillWrite(rank, tuple(h for h, _ in staged), ok))

    def read_reload(self, rank: int, base: int, hashes: tuple[int, ...], ok: bool) -> None:
        """Rank `rank` reads the pages it owns of a reload (page `i` has hash `hashes[i]`)
        from its disk into the object at `base` (nothing is written when not ok)."""
        pages = tuple(fx.HostPage(host=base + i, hash=hashes[i]) for i in self.owned_indices(rank, len(hashes)))
        if ok:
            for p in pages:
                self.put_host(p.host, self.l3[(rank, p.hash)])
        self.effects.append(fx.ReloadRead(rank=rank, base=base, pages=pages, ok=ok))

    # ---- commit ---------------------------------------------------------------------------------
    def commit(self) -> ClusterState:
        s, track = self.s, self.track
        d = self.__dict__
        # the new state starts as a draft of the old one; the parts this transaction
        # changed replace theirs, the others are the old state's
        new = draft_of(s)
        sums = list(s.sums) if track else None
        written = list(_NONE_WRITTEN)  # per map of _WRITTEN_MAPS, the keys written
        for name in d.keys() & _LAZY_MAPS:  # the maps this transaction read
            mtx = d[name]
            if mtx.mut is None:
                continue
            m, delta = mtx.finish(track)
            setattr(new, name, m)
            if mtx.dirty and name in _WRITTEN_INDEX:
                written[_WRITTEN_INDEX[name]] = mtx.dirty
            if delta:
                i = _MAP_INDEX[name]
                sums[i] = (sums[i] + delta) % MOD
        for name in d.keys() & _LAZY_LISTS:  # the tuples it read or replaced
            setattr(new, name, tuple(d[name]))
        new.next_id, new.clock, new.next_rid, new.writes = self.next_id, self.clock, self.next_rid, self.writes
        new.spill_queue, new.spills, new.reloads, new.loads = self.spill_queue, self.spills, self.reloads, self.loads
        new.disk_faults = self.disk_faults
        if track:
            if self._dev_free_delta:
                sums[I_DEV_FREE] = (sums[I_DEV_FREE] + self._dev_free_delta) % MOD
            if self._l2_free_delta:
                sums[I_L2_FREE] = (sums[I_L2_FREE] + self._l2_free_delta) % MOD
            for i, name in _SEQS:
                seq = getattr(new, name)
                old = getattr(s, name)
                if seq is not old and seq != old:
                    sums[i] = seq_sum(name, seq)
            new.sums = tuple(sums)
        else:
            new.sums = None

        ntx, ptx = d.get("nodes"), d.get("pending")
        dirty = ntx.dirty if ntx is not None else _EMPTY
        if ptx is not None and ptx.dirty:
            dirty = dirty | ptx.dirty
        if dirty:
            new.dev_index, new.host_index, new.backup_index = reindex(s, new.nodes, new.pending, dirty)
        new.effects = tuple(self.effects)
        # what this transaction wrote, on its result beside the effects (`kvsm.writes`)
        new.written = committed(s, tuple(written))
        if "halted" in d:  # (a ghost scalar, set only where the reference would stop)
            new.halted = d["halted"]
        new.__class__ = ClusterState
        return new


def _by_lane(pages: tuple[int, ...], R: int) -> list[tuple[int, Any]]:
    """`pages` grouped by lane (`lane_of`; the order within a group and of the groups is
    the caller's to ignore). A node's pages cycle through the lanes, so every R-th page
    from one start is usually of one lane: taken as a slice when it is (its lanes
    computed at C speed), else page by page."""
    rmod = R.__rmod__  # (p % R)
    groups = []
    for j in range(min(R, len(pages))):
        sl = pages[j::R]
        lanes = set(map(rmod, sl))
        if len(lanes) != 1:
            break
        groups.append((lanes.pop(), sl))
    else:
        if len({lane for lane, _ in groups}) == len(groups):
            return groups
    by_lane: dict[int, list[int]] = {}
    for p in pages:
        by_lane.setdefault(p % R, []).append(p)
    return list(by_lane.items())


for _name in _LAZY_MAPS:
    setattr(Tx, _name, _OnFirstUse(_name, MapTx))
for _name in _LAZY_LISTS:
    setattr(Tx, _name, _OnFirstUse(_name, lambda _n, v: list(v)))

