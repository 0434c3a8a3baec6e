"""`ClusterState`: one immutable value holding the whole cluster (MODEL.md section 3).

Replicated part: `nodes`, `next_id`, `clock`, `next_rid`, `dev_free`, `l2_free`,
`objects`, `pending`, `writes`, `requests`. Local part (per rank): `write_done`.
Ghost part (checking only, never an input to a decision): `dev_content` and
`host_content`, the identity of the prefix whose KV each page holds (absent =
poisoned/free).

Derived part, kept so that a transition costs time proportional to what it changes
(invariant 10 recomputes each from scratch): `dev_index` and `host_index` (the
device and host victim orders), `backup_index` (nodes a `Reserve` may take), each
node's `children`, `ondev` (children on L1) and `hashes`, and the digest sums.

Maps are `immutables.Map` (HAMT). Transitions never mutate a state; they open a
`Tx` on it, which records every write, maintains the derived part for exactly the
entries written, and produces a new state. A transition that rejects raises before
`Tx.commit()`, so nothing is half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import immutables

from . import content
from .config import Config
from .digest import MOD, combine, content_hash, entry_hash, free_page_hash, memo_hash
from .sortedset import PSortedSet, RunSet

ROOT_ID = 0
NO_PARENT = -1

QUEUED, MATCHED, DECODING = "queued", "matched", "decoding"
PHASES = (QUEUED, MATCHED, DECODING)


def _tup(t: tuple) -> str:
    return ",".join(map(str, t))


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    parent: int
    key: tuple[int, ...]  # one symbol per page (P tokens); never empty except at the root
    dev: tuple[int, ...]  # device page ids, one per page, or () when not on L1
    host: int | None  # key of its committed L2 object, or None
    durable: bool
    lock: int
    pin: int
    hits: int
    touched: int
    # derived
    children: immutables.Map  # first symbol -> child id
    ondev: int  # children on L1
    hashes: tuple[int, ...]  # content identity of each page (prefix-chained)

    # `dev` is digested as an entry of its own ("bulky"), re-hashed only when it changes
    BULKY = "dev"

    def encode(self) -> str:
        # The key is written as its length and the identity of its last page: with the
        # parent fixed, that identifies the key (the identity chains the whole prefix)
        # without re-encoding a long tuple at every touch.
        host = "~" if self.host is None else str(self.host)
        return (
            f"N{self.id}|{self.parent}|{len(self.key)}:{self.last_content}|{host}|"
            f"{int(self.durable)}|{self.lock}|{self.pin}|{self.hits}|{self.touched}"
        )

    def with_(self, **c: Any) -> "Node":
        """A copy with some fields changed (what `dataclasses.replace` does, several times
        faster: one slot store per field, written out; tests check it covers every field)."""
        new = _new(Node)
        _S["id"](new, c.get("id", self.id))
        _S["parent"](new, c.get("parent", self.parent))
        _S["key"](new, c.get("key", self.key))
        _S["dev"](new, c.get("dev", self.dev))
        _S["host"](new, c.get("host", self.host))
        _S["durable"](new, c.get("durable", self.durable))
        _S["lock"](new, c.get("lock", self.lock))
        _S["pin"](new, c.get("pin", self.pin))
        _S["hits"](new, c.get("hits", self.hits))
        _S["touched"](new, c.get("touched", self.touched))
        _S["children"](new, c.get("children", self.children))
        _S["ondev"](new, c.get("ondev", self.ondev))
        _S["hashes"](new, c.get("hashes", self.hashes))
        return new

    @property
    def on_l1(self) -> bool:
        return bool(self.dev) or self.id == ROOT_ID

    @property
    def committed(self) -> bool:
        return self.host is not None

    @property
    def pages(self) -> int:
        return len(self.key)

    @property
    def last_content(self) -> int:
        return self.hashes[-1] if self.hashes else content.ROOT


_NODE_FIELDS = Node.__slots__
_new = object.__new__
# the slot setters of Node (a frozen dataclass refuses plain assignment)
_S = {f: getattr(Node, f).__set__ for f in _NODE_FIELDS}


@dataclass(frozen=True, slots=True)
class Obj:
    """An L2 object: one contiguous run `(base, length)` per payload region."""

    base: int
    length: int
    committed: bool
    owner: int  # node id of the backup it holds

    def encode(self) -> str:
        return f"O{self.base}|{self.length}|{int(self.committed)}|{self.owner}"


@dataclass(frozen=True, slots=True)
class Pending:
    obj: int
    locked: bool

    def encode(self) -> str:
        return f"B{self.obj}|{int(self.locked)}"


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    tokens: tuple[int, ...]  # page symbols of its cacheable prompt
    out_pages: int  # pages it holds while decoding (output tokens and the sub-page tail)
    phase: str
    node: int  # where its lock sits (root = none)
    pages: tuple[int, ...]  # device pages it holds itself (allocated at Insert)
    reload_tried: bool = False  # an L3 reload is looked up once per request

    BULKY = "tokens"

    def encode(self) -> str:
        tried = "|R" if self.reload_tried else ""
        return f"Q{self.id}|{self.out_pages}|{self.phase}|{self.node}|{_tup(self.pages)}{tried}"


@dataclass(frozen=True, slots=True)
class SpillOp:
    """An in-flight spill of a committed L2 object to every rank's disk. The object stays
    pinned until every rank has gathered its pages (`pinned`)."""

    obj: int
    node: int
    hashes: tuple[int, ...]
    pinned: bool

    def encode(self) -> str:
        return f"S{self.obj}|{self.node}|{_tup(self.hashes)}|{int(self.pinned)}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A queued request whose key misses the radix tree below `anchor`, marked for an L3
    reload of `tokens` (whose page hashes are `hashes`)."""

    anchor: int
    tokens: tuple[int, ...]
    hashes: tuple[int, ...]

    def encode(self) -> str:
        return f"C{self.anchor}|{_tup(self.tokens)}|{_tup(self.hashes)}"


@dataclass(frozen=True, slots=True)
class ReloadOp:
    """An in-flight reload from L3 into the reserved, uncommitted L2 object `obj`.
    `key` is the hash of its last page (identical reloads share one op)."""

    key: int
    obj: int
    anchor: int
    tokens: tuple[int, ...]
    hashes: tuple[int, ...]
    waiters: tuple[int, ...]
    ttl: int

    def encode(self) -> str:
        return f"L{self.key}|{self.obj}|{self.anchor}|{_tup(self.tokens)}|{_tup(self.hashes)}|{_tup(self.waiters)}|{self.ttl}"


def reload_object_key(key: int) -> int:
    """Reload objects are keyed apart from node ids (which are >= 0)."""
    return -(key + 1)


# digest components: maps are summed incrementally, free sets by their deltas, and the
# short sequences (bounded by caps) are re-summed when they change
MAP_COMPONENTS = ("nodes", "objects", "pending", "requests", "dev_content", "host_content", "reload_candidates", "l3")
SET_COMPONENTS = ("dev_free", "l2_free")
SEQ_COMPONENTS = ("writes", "spill_queue", "spills", "reloads", "spill_staged")
COMPONENTS = MAP_COMPONENTS + SET_COMPONENTS + SEQ_COMPONENTS
_I_DEV_FREE = COMPONENTS.index("dev_free")
_I_L2_FREE = COMPONENTS.index("l2_free")
_I_WRITES = COMPONENTS.index("writes")
assert COMPONENTS[_I_WRITES:] == SEQ_COMPONENTS
REPLICATED_COMPONENTS = (
    "nodes", "objects", "pending", "requests", "reload_candidates", "dev_free", "l2_free", "writes", "spill_queue", "spills", "reloads",
)


@dataclass(frozen=True, slots=True)
class ClusterState:
    config: Config
    nodes: immutables.Map
    next_id: int
    clock: int
    next_rid: int
    dev_free: tuple[PSortedSet, ...]  # per lane
    l2_free: tuple[RunSet, ...]  # per payload: free runs (base, length)
    objects: immutables.Map
    pending: immutables.Map
    writes: tuple[int, ...]
    requests: immutables.Map
    write_done: tuple[int, ...]
    dev_content: immutables.Map
    host_content: immutables.Map  # key: payload_index * L2 + page
    # L3 (all empty when config.L3 == 0)
    spill_queue: tuple[int, ...]  # committed objects (= node ids) waiting to be spilled
    spills: tuple[SpillOp, ...]  # in flight, submit order
    reload_candidates: immutables.Map  # rid -> Candidate
    reloads: tuple[ReloadOp, ...]  # in flight, submit order
    spill_gathered: tuple[int, ...]  # local: ops at the head of `spills` rank r gathered
    spill_done: tuple[tuple[bool, ...], ...]  # local: ok bit of each op rank r wrote, from the head
    reload_done: tuple[tuple[bool, ...], ...]  # local: ok bit of each op rank r read, from the head
    disk_ok: tuple[bool, ...]  # local
    disk_faults: int  # DiskFail transitions so far (bounded by config.max_disk_faults)
    l3: immutables.Map  # local: (rank, page hash) -> content held on that rank's disk
    l3_used: tuple[int, ...]  # derived: entries of `l3` per rank
    spill_staged: tuple[tuple[tuple[tuple[int, int | None], ...], ...], ...]  # ghost: per rank, gathered copies not yet written
    dev_index: PSortedSet
    host_index: PSortedSet
    backup_index: PSortedSet
    # per COMPONENTS; None when not tracked (see `untracked`): then `digest` sums the state
    sums: tuple[int, ...] | None
    # What the transition that produced this state does to real pages (see `Tx`); not
    # part of the state's identity or digest. The GPU backend executes these.
    effects: tuple[tuple, ...] = ()
    _digest: str | None = field(default=None, compare=False, repr=False)

    # ---- reading -------------------------------------------------------------------
    def node(self, nid: int) -> Node:
        return self.nodes[nid]

    def root(self) -> Node:
        return self.nodes[ROOT_ID]

    def lane(self, page: int) -> int:
        return page % self.config.R

    def scalars(self, replicated_only: bool = False) -> dict[str, Any]:
        s: dict[str, Any] = {
            "next_id": self.next_id,
            "clock": self.clock,
            "next_rid": self.next_rid,
        }
        if not replicated_only:
            s["write_done"] = self.write_done
            if self.config.L3:
                s["spill_gathered"] = self.spill_gathered
                s["spill_done"] = self.spill_done
                s["reload_done"] = self.reload_done
                s["disk_ok"] = self.disk_ok
                s["disk_faults"] = self.disk_faults
        return s

    def digest(self) -> str:
        # a memo of a pure function of this immutable value (it cannot drift)
        d = self._digest
        if d is None:
            d = combine(self.scalars(), dict(zip(COMPONENTS, self.current_sums())))
            object.__setattr__(self, "_digest", d)
        return d

    def replicated_digest(self) -> str:
        sums = {n: v for n, v in zip(COMPONENTS, self.current_sums()) if n in REPLICATED_COMPONENTS}
        return combine(self.scalars(replicated_only=True), sums)

    def current_sums(self) -> tuple[int, ...]:
        """The digest sums: maintained per transition, or (untracked) summed over the whole
        state now, in time proportional to its size."""
        return self.sums if self.sums is not None else recompute_sums(self)

    def untracked(self) -> "ClusterState":
        """This state, and every state a transition derives from it, without digest sums:
        a transition then skips hashing what it changed. For a run that reads no digest
        until the end (one rank, no log); `digest` still gives the same value."""
        return replace(self, sums=None, _digest=None)

    def path_to_root(self, nid: int) -> list[int]:
        """Ids from `nid` up to (excluding) the root."""
        out = []
        while nid != ROOT_ID:
            out.append(nid)
            nid = self.nodes[nid].parent
        return out


# ---- derived-part membership ---------------------------------------------------------------


def victim_order(node: Node, cfg: Config) -> tuple:
    """The replicated victim order (MODEL.md section 5), for device and host victims and
    the planner's ties: `(hits >= 2, touched, id)` under `eviction = "slru"` (nodes hit
    twice or more go last), `(False, touched, id)` under `"lru"`."""
    return (cfg.eviction == "slru" and node.hits >= 2, node.touched, node.id)


def dev_victim_key(node: Node, is_pending: bool, cfg: Config) -> tuple | None:
    """Victim-order key of a node that `EvictDevice` may take now, else None.

    Evictable from L1: on L1, unlocked, no pending backup, no child on L1, and either
    backed (it keeps its host copy) or, under write_through, unbacked with no
    children at all (it is deleted; deleting one with host-only children would orphan
    them). Under write_back an unbacked leaf must be written back first (`Reserve`).
    """
    if node.id == ROOT_ID or not node.dev or node.lock or is_pending or node.ondev:
        return None
    if node.host is None and (cfg.policy != "write_through" or len(node.children)):
        return None
    return victim_order(node, cfg)


def host_victim_key(node: Node, cfg: Config) -> tuple | None:
    """Victim-order key of a node that `EvictHost` may take now: evicted from L1, backed,
    no children, not pinned by a spill."""
    if node.id == ROOT_ID or node.dev or node.host is None or len(node.children) or node.pin or node.lock:
        return None
    return victim_order(node, cfg)


def backup_candidate(node: Node, is_pending: bool, cfg: Config) -> bool:
    """Whether `Reserve` may start a backup of this node (before capacity is considered)."""
    if node.id == ROOT_ID or not node.dev or node.host is not None or is_pending:
        return False
    if cfg.policy == "write_through":
        return node.hits >= cfg.write_threshold
    return node.lock == 0 and node.ondev == 0


# ---- construction ---------------------------------------------------------------------------


def initial_state(cfg: Config) -> ClusterState:
    root = Node(
        id=ROOT_ID,
        parent=NO_PARENT,
        key=(),
        dev=(),
        host=None,
        durable=False,
        lock=0,
        pin=0,
        hits=0,
        touched=0,
        children=immutables.Map(),
        ondev=0,
        hashes=(),
    )
    nodes = immutables.Map({ROOT_ID: root})
    dev_free = tuple(PSortedSet(range(lane, cfg.device_pages, cfg.R)) for lane in range(cfg.R))
    l2_free = tuple(RunSet([(0, cfg.L2)]) for _ in cfg.payloads)
    s = ClusterState(
        config=cfg,
        nodes=nodes,
        next_id=1,
        clock=0,
        next_rid=0,
        dev_free=dev_free,
        l2_free=l2_free,
        objects=immutables.Map(),
        pending=immutables.Map(),
        writes=(),
        requests=immutables.Map(),
        write_done=(0,) * cfg.R,
        dev_content=immutables.Map(),
        host_content=immutables.Map(),
        spill_queue=(),
        spills=(),
        reload_candidates=immutables.Map(),
        reloads=(),
        spill_gathered=(0,) * cfg.R,
        spill_done=((),) * cfg.R,
        reload_done=((),) * cfg.R,
        disk_ok=(True,) * cfg.R,
        disk_faults=0,
        l3=immutables.Map(),
        l3_used=(0,) * cfg.R,
        spill_staged=((),) * cfg.R,
        dev_index=PSortedSet(),
        host_index=PSortedSet(),
        backup_index=PSortedSet(),
        sums=(0,) * len(COMPONENTS),
    )
    return replace(s, sums=recompute_sums(s))


def component_items(s: ClusterState, name: str) -> Iterable[tuple[Any, Any]]:
    if name == "dev_free":
        return ((p, True) for lane in s.dev_free for p in lane)
    if name == "l2_free":
        return (((i, run), True) for i, runs in enumerate(s.l2_free) for run in runs)
    if name in SEQ_COMPONENTS:
        return _seq_items(getattr(s, name))
    return getattr(s, name).items()


def _seq_items(seq: tuple) -> Iterable[tuple[int, Any]]:
    # an ordered sequence is summarised by its (position, item) pairs; empty items (a rank
    # with nothing staged) count as absent so that an unused tier adds nothing
    return ((k, v) for k, v in enumerate(seq) if v != ())


def seq_sum(name: str, seq: tuple) -> int:
    total = 0
    for k, v in _seq_items(seq):
        total += entry_hash(name, k, v)
    return total % MOD


CONTENT_COMPONENTS = frozenset({"dev_content", "host_content"})


def value_hash(name: str, k: Any, v: Any) -> int:
    """A map entry's contribution to its component's sum: the entry's text, plus its bulky
    field (if it has one) as an entry of its own; ghost page contents are weighted instead."""
    if name in CONTENT_COMPONENTS:
        return content_hash(name, k, v)
    h = memo_hash(name, k, v)
    bulky = getattr(v, "BULKY", None)
    if bulky is not None:
        h += memo_hash(name + "#", k, getattr(v, bulky))
    return h


def recompute_sums(s: ClusterState) -> tuple[int, ...]:
    out = []
    for name in COMPONENTS:
        total = 0
        for k, v in component_items(s, name):
            total += value_hash(name, k, v)
        out.append(total % MOD)
    return tuple(out)


# ---- the transaction ----------------------------------------------------------------------------

_MISSING = object()


class _MapTx:
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

    def finish(self, track: bool = True) -> tuple[immutables.Map, int]:
        """The new map and (with `track`) the change of its digest sum."""
        if self.mut is None:
            return self.orig, 0
        new = self.mut.finish()
        delta = 0
        if not track:
            return new, 0
        name = self.name
        for k in self.dirty:
            o = self.orig.get(k, _MISSING)
            n = new.get(k, _MISSING)
            if o is n:
                continue
            if o is _MISSING:
                delta += value_hash(name, k, n)
            elif n is _MISSING:
                delta -= value_hash(name, k, o)
            elif name in CONTENT_COMPONENTS:
                delta += content_hash(name, k, n) - content_hash(name, k, o)
            else:
                delta -= memo_hash(name, k, o)
                delta += memo_hash(name, k, n)
                bulky = getattr(n, "BULKY", None)
                if bulky is not None:
                    bo, bn = getattr(o, bulky), getattr(n, bulky)
                    if bo is not bn and bo != bn:
                        delta -= memo_hash(name + "#", k, bo)
                        delta += memo_hash(name + "#", k, bn)
        return new, delta


class Rejected(Exception):
    """A transition's guard is false; the state is unchanged. The message says why."""


class Tx:
    """A transient, mutable view of one state for the duration of one transition."""

    def __init__(self, s: ClusterState) -> None:
        self.s = s
        self.cfg = s.config
        self.nodes = _MapTx("nodes", s.nodes)
        self.objects = _MapTx("objects", s.objects)
        self.pending = _MapTx("pending", s.pending)
        self.requests = _MapTx("requests", s.requests)
        self.dev_content = _MapTx("dev_content", s.dev_content)
        self.host_content = _MapTx("host_content", s.host_content)
        self.reload_candidates = _MapTx("reload_candidates", s.reload_candidates)
        self.l3 = _MapTx("l3", s.l3)
        self.l3_used = list(s.l3_used)
        self.spill_queue = s.spill_queue
        self.spills = s.spills
        self.reloads = s.reloads
        self.spill_staged = list(s.spill_staged)
        self.spill_gathered = list(s.spill_gathered)
        self.spill_done = list(s.spill_done)
        self.reload_done = list(s.reload_done)
        self.disk_ok = list(s.disk_ok)
        self.disk_faults = s.disk_faults
        self.next_id = s.next_id
        self.clock = s.clock
        self.next_rid = s.next_rid
        self.writes = s.writes
        self.write_done = list(s.write_done)
        self.dev_free = list(s.dev_free)
        self.l2_free = list(s.l2_free)
        self._dev_free_delta = 0
        self._l2_free_delta = 0
        self.track = s.sums is not None  # maintain the digest sums
        self.effects: list[tuple] = []

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
        self.update(nid, touched=self.clock)

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
        self.put(p.with_(children=p.children.set(node.key[0], node.id), ondev=p.ondev + (1 if node.dev else 0)))
        return self.put(node)

    def remove_leaf(self, nid: int) -> None:
        """Delete a node that has no children, detaching it from its parent."""
        n = self.nodes[nid]
        assert not len(n.children), "remove_leaf on a node with children"
        p = self.nodes[n.parent]
        self.put(p.with_(children=p.children.delete(n.key[0]), ondev=p.ondev - (1 if n.dev else 0)))
        self.nodes.delete(nid)

    def lock_path(self, nid: int, delta: int) -> None:
        while nid != ROOT_ID:
            n = self.nodes[nid]
            self.put(n.with_(lock=n.lock + delta))
            nid = n.parent

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
        need: dict[int, int] = {}
        for lane in lanes:
            need[lane] = need.get(lane, 0) + 1
        got: dict[int, list[int]] = {}
        for lane, k in need.items():
            free = self.dev_free[lane]
            if len(free) < k:
                raise Rejected(f"device lane {lane} has {len(free)} free pages, {k} needed")
            pages, self.dev_free[lane] = free.take_first(k)
            if self.track:
                for p in pages:
                    self._dev_free_delta -= free_page_hash(p)
            got[lane] = list(reversed(pages))
        return tuple(got[lane].pop() for lane in lanes)

    def free_dev(self, pages: Iterable[int]) -> None:
        R = self.cfg.R
        dev_content = self.dev_content
        by_lane: dict[int, list[int]] = {}
        track = self.track
        for p in pages:
            by_lane.setdefault(p % R, []).append(p)
            if track:
                self._dev_free_delta += free_page_hash(p)
            if p in dev_content:
                dev_content.delete(p)
            self.effects.append(("poison_dev", p))
        for lane, ps in by_lane.items():
            self.dev_free[lane] = self.dev_free[lane].add_many(ps)

    # ---- page contents (the ghost) and the physical effects that move them -------------------
    def fill_dev(self, page: int, c: int) -> None:
        """The forward pass computed the KV of prefix `c` into device page `page`."""
        self.dev_content.set(page, c)
        self.effects.append(("fill", page, c))

    def load_dev(self, page: int, host_page: int) -> None:
        """Copy host page `host_page` (of every payload region) into device page `page`."""
        c = self.host_content.get(host_page)
        if c is None:
            if page in self.dev_content:
                self.dev_content.delete(page)
        else:
            self.dev_content.set(page, c)
        self.effects.append(("load", host_page, page))

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
        self.effects.append(("store", rank, page, host_page))

    # ---- host pages -------------------------------------------------------------------------------
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

    def free_host(self, base: int, length: int) -> None:
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
        self.effects.append(("poison_host", base, length))

    def free_object(self, key: int) -> None:
        obj = self.objects[key]
        self.free_host(obj.base, obj.length)
        self.objects.delete(key)

    # ---- commit ---------------------------------------------------------------------------------
    def commit(self) -> ClusterState:
        s, cfg, track = self.s, self.cfg, self.track
        sums = list(s.sums) if track else None
        maps = []
        for i, name in enumerate(MAP_COMPONENTS):
            mtx = getattr(self, name)
            if mtx.mut is None:
                maps.append(mtx.orig)
                continue
            m, delta = mtx.finish(track)
            maps.append(m)
            if delta:
                sums[i] = (sums[i] + delta) % MOD
        nodes, objects, pending, requests, dev_content, host_content, reload_candidates, l3 = maps
        spill_staged = tuple(self.spill_staged)
        if track:
            if self._dev_free_delta:
                sums[_I_DEV_FREE] = (sums[_I_DEV_FREE] + self._dev_free_delta) % MOD
            if self._l2_free_delta:
                sums[_I_L2_FREE] = (sums[_I_L2_FREE] + self._l2_free_delta) % MOD
            for i, name, seq in (
                (_I_WRITES, "writes", self.writes),
                (_I_WRITES + 1, "spill_queue", self.spill_queue),
                (_I_WRITES + 2, "spills", self.spills),
                (_I_WRITES + 3, "reloads", self.reloads),
                (_I_WRITES + 4, "spill_staged", spill_staged),
            ):
                old = getattr(s, name)
                if seq is not old and seq != old:
                    sums[i] = seq_sum(name, seq)

        dev_index, host_index, backup_index = s.dev_index, s.host_index, s.backup_index
        dirty = self.nodes.dirty | self.pending.dirty if self.pending.dirty else self.nodes.dirty
        for nid in dirty:
            old = s.nodes.get(nid)
            new = nodes.get(nid)
            if old is new and (nid in s.pending) == (nid in pending):
                continue
            old_p, new_p = nid in s.pending, nid in pending
            ok = dev_victim_key(old, old_p, cfg) if old is not None else None
            nk = dev_victim_key(new, new_p, cfg) if new is not None else None
            if ok != nk:
                if ok is not None:
                    dev_index = dev_index.remove(ok)
                if nk is not None:
                    dev_index = dev_index.add(nk)
            ok = host_victim_key(old, cfg) if old is not None else None
            nk = host_victim_key(new, cfg) if new is not None else None
            if ok != nk:
                if ok is not None:
                    host_index = host_index.remove(ok)
                if nk is not None:
                    host_index = host_index.add(nk)
            ob = old is not None and backup_candidate(old, old_p, cfg)
            nb = new is not None and backup_candidate(new, new_p, cfg)
            if ob != nb:
                backup_index = backup_index.add(nid) if nb else backup_index.remove(nid)

        return ClusterState(
            config=cfg,
            nodes=nodes,
            next_id=self.next_id,
            clock=self.clock,
            next_rid=self.next_rid,
            dev_free=tuple(self.dev_free),
            l2_free=tuple(self.l2_free),
            objects=objects,
            pending=pending,
            writes=self.writes,
            requests=requests,
            write_done=tuple(self.write_done),
            dev_content=dev_content,
            host_content=host_content,
            spill_queue=self.spill_queue,
            spills=self.spills,
            reload_candidates=reload_candidates,
            reloads=self.reloads,
            spill_gathered=tuple(self.spill_gathered),
            spill_done=tuple(self.spill_done),
            reload_done=tuple(self.reload_done),
            disk_ok=tuple(self.disk_ok),
            disk_faults=self.disk_faults,
            l3=l3,
            l3_used=tuple(self.l3_used),
            spill_staged=spill_staged,
            dev_index=dev_index,
            host_index=host_index,
            backup_index=backup_index,
            sums=tuple(sums) if track else None,
            effects=tuple(self.effects),
        )
