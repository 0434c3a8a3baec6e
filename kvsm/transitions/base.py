"""What every transition family shares: the `Transition` value, the registry, the rank
check, and the tree operations more than one family performs (walking a key,
splitting a node, evicting a device or host victim, evicting host leaves to fit an
object)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator

import immutables

from ..config import RANK_VIEW_BUGS, Config
from ..state import ROOT_ID, ClusterState, Node, Rejected, lane_of
from ..victims import dev_victim_key, in_rank_order, rank_order_key
from ..tx import Tx


@dataclass(frozen=True)
class Transition:
    """One transition with its arguments. `rank` is set for per-rank transitions."""

    name: str
    args: tuple[tuple[str, Any], ...] = ()
    rank: int | None = None

    @staticmethod
    def make(name: str, rank: int | None = None, **args: Any) -> "Transition":
        return Transition(name, tuple(sorted((k, _freeze(v)) for k, v in args.items())), rank)

    def arg(self, key: str) -> Any:
        for k, v in self.args:
            if k == key:
                return v
        raise KeyError(key)

    def kwargs(self) -> dict[str, Any]:
        return dict(self.args)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if self.rank is not None:
            d["rank"] = self.rank
        d["args"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.args}
        return d

    def __str__(self) -> str:
        parts = [f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.args]
        if self.rank is not None:
            parts.insert(0, f"r={self.rank}")
        return f"{self.name}({', '.join(parts)})"


def _freeze(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


@dataclass(frozen=True)
class Spec:
    """A transition's definition: how to apply it, which instances might be enabled (a
    cheap superset; the guard in `apply` decides), its argument types, whether it is a
    per-rank step, and whether it is an agreement: a MIN or AND over every rank's
    progress, after which each rank may read what the others wrote (whoever executes
    the log meets all ranks there).

    A replicated step is one every rank takes at the same point of its program, so none
    is enabled while a round of the commit collective is open (some rank has reached its
    call and the round has not completed: that rank waits in the collective and cannot
    take it). `register` adds that guard to every step that is not per-rank, except the
    collective's own completion (`in_round`)."""

    name: str
    family: str
    apply: Callable[..., ClusterState]
    candidates: Callable[[ClusterState], Iterable[Transition]]
    args: dict[str, str]  # name -> "int" | "ints"
    per_rank: bool = False
    agreement: bool = False
    in_round: bool = False
    # Its outcome is a decision every rank takes from its own replica (victims, host
    # room, an L3 claim): `apply(state, t, view)` is rank `view`'s decision.
    decides: bool = False


REGISTRY: dict[str, Spec] = {}


def register(spec: Spec) -> Spec:
    if spec.decides:
        spec = replace(spec, apply=_every_rank_decides(spec.apply))
    if not spec.per_rank and not spec.in_round:
        spec = replace(spec, apply=_after_round(spec.apply))
    REGISTRY[spec.name] = spec
    return spec


def cluster_view(cfg: Config) -> int | None:
    """The rank whose decisions the cluster's state follows: rank 0 under a defect that
    lets ranks decide from their own views, else None (every rank decides alike)."""
    return 0 if cfg.bug in RANK_VIEW_BUGS else None


def _every_rank_decides(decide: Callable[..., ClusterState]) -> Callable[..., ClusterState]:
    """`apply(state, t, view=None)` of a deciding transition. With a `view`, that rank's
    decision. Without one, the cluster's step: every rank decides from its own replica
    (under a defect in `RANK_VIEW_BUGS` a rank's view can differ), the state follows
    rank 0, and when some rank decides otherwise (another successor, or none) the state
    records it in `diverged`, the first time (invariant 13)."""

    def apply(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
        if view is not None or s.config.bug not in RANK_VIEW_BUGS:
            return decide(s, t, view)
        first = decide(s, t, 0)  # a rejection by rank 0 is the cluster's
        if s.diverged is not None:
            return first
        want = first.replicated_digest()
        others = []
        for r in range(1, s.config.R):
            try:
                if decide(s, t, r).replicated_digest() != want:
                    others.append(r)
            except Rejected:
                others.append(r)
        if not others:
            return first
        return replace(first, diverged=(t.name, tuple(others)), _digest=None)

    apply.__name__ = getattr(decide, "__name__", "apply")
    return apply


def _after_round(apply: Callable[..., ClusterState]) -> Callable[..., ClusterState]:
    def guarded(s: ClusterState, t: Transition, *view: int | None) -> ClusterState:
        if any(s.commit_round):
            waiting = [r for r, c in enumerate(s.commit_round) if c]
            raise Rejected(f"ranks {waiting} are at the commit collective's call; replicated steps wait for the round to complete")
        return apply(s, t, *view)

    guarded.__name__ = getattr(apply, "__name__", "guarded")
    guarded.__wrapped__ = apply  # type: ignore[attr-defined]
    return guarded


def rank_of(s: ClusterState, t: Transition) -> int:
    """The rank of a per-rank transition, which must be one of the config's ranks."""
    r = t.rank
    if r is None or not 0 <= r < s.config.R:
        raise Rejected(f"rank {r} is not one of 0..{s.config.R - 1}")
    return r


# ---- walking a key through the tree -------------------------------------------------------------


@dataclass(frozen=True)
class KeyWalk:
    """Where a key leads: the nodes it covers whole (root to leaf), how many pages they
    cover, and where it diverges inside a node (`cut` = (node id, pages in common))."""

    full: tuple[int, ...]
    covered: int
    cut: tuple[int, int] | None


def walk_key(nodes: Any, tokens: tuple[int, ...], start: int = ROOT_ID, offset: int = 0) -> KeyWalk:
    full: list[int] = []
    i = offset
    cur = nodes[start]
    cut = None
    while i < len(tokens):
        cid = cur.children.get(tokens[i])
        if cid is None:
            break
        child = nodes[cid]
        key = child.key
        n = 1
        limit = min(len(key), len(tokens) - i)
        while n < limit and key[n] == tokens[i + n]:
            n += 1
        if n == len(key):
            full.append(cid)
            i += n
            cur = child
            continue
        cut = (cid, n)
        break
    return KeyWalk(tuple(full), i, cut)


def enqueue_spill(tx: Tx, nid: int) -> None:
    """Queue a just-committed object for spilling to L3 (dropped when the queue is full)."""
    if tx.cfg.L3 and len(tx.spill_queue) < tx.cfg.spill_queue_cap:
        tx.spill_queue = tx.spill_queue + (nid,)


def split_blocked_by_backup(cfg: Config, nid: int, pending: Any) -> bool:
    """Whether a pending backup keeps node `nid` from being split."""
    if cfg.bug == "split_pending":
        # the split does not look for a backup in flight: the node is split under it
        return False
    return nid in pending


def unsplittable(tx: Tx, nid: int) -> bool:
    """A node whose backup is pending: the reference refuses to split it (a node an
    in-flight spill pins is split like any other)."""
    return split_blocked_by_backup(tx.cfg, nid, tx.pending)


def split_node(tx: Tx, nid: int, at: int) -> int:
    """Split `nid` after `at` pages, as the reference does: a new upper node (fresh id)
    takes the first `at` pages, their device pages, their L2 pages as a new object and
    their hashes, and the lower part's `lock`, `hits` and stamp; it is neither pinned
    nor durable (a new node of the reference starts without either). The lower part
    keeps its id, stamp, object key and pin (an in-flight spill of it still reads the
    host pages it pinned, see `spill_base`). Its durable flag: under
    `durable_split = "fixed"` it stays durable only if `at` is a multiple of R (else its
    pages' owners are not the ranks that wrote them to disk); the reference keeps it.
    A backed node's new upper object is queued for spilling. Returns the upper id."""
    n = tx.node(nid)
    if split_blocked_by_backup(tx.cfg, nid, tx.pending):
        raise Rejected(f"node {nid} has a pending backup and cannot be split")
    if not 0 < at < n.pages:
        raise Rejected(f"node {nid} has {n.pages} pages; cannot split after {at}")
    uid = tx.new_id()
    upper = Node(
        id=uid,
        parent=n.parent,
        key=n.key[:at],
        dev=n.dev[:at],
        host=uid if n.host is not None else None,
        durable=False,
        lock=n.lock,
        pin=0,
        hits=n.hits,
        touched=n.touched,
        children=immutables.Map({n.key[at]: nid}),
        ondev=1 if n.dev else 0,
        hashes=n.hashes[:at],
    )
    parent = tx.node(n.parent)
    tx.put(parent.with_(children=parent.children.set(n.key[0], uid)))
    tx.put(upper)
    keep = tx.cfg.durable_split == "reference" or lane_of(at, tx.cfg.R) == 0
    tx.put(n.with_(parent=uid, key=n.key[at:], dev=n.dev[at:], hashes=n.hashes[at:],
                   durable=n.durable and keep))
    if n.host is not None:
        obj = tx.objects[n.host]
        tx.objects.set(uid, obj.with_(length=at, owner=uid))
        tx.objects.set(n.host, obj.with_(base=obj.base + at, length=obj.length - at))
        enqueue_spill(tx, uid)
    return uid


def drop_write(tx: Tx, nid: int) -> None:
    """Take node id `nid`'s write out of `writes` (a rank that finished it counts one
    less) and free its object: a rollback, of a pending or of a prepared backup."""
    j = tx.writes.index(nid)
    tx.writes = tx.writes[:j] + tx.writes[j + 1 :]
    tx.write_done = [d - 1 if d > j else d for d in tx.write_done]
    tx.free_object(nid)


# ---- victims -----------------------------------------------------------------------------------


def evict_device_node(tx: Tx, nid: int) -> None:
    """Drop a device victim: a backed node keeps its host copy, an unbacked one is
    deleted. An unbacked one with (L2-only) children is a victim only under
    `unbacked_evict = "reference"`: like the reference's `_delete_leaf`, it detaches
    the node, and the subtree below it is unreachable from then on; it leaves the tree
    while its L2 objects stay allocated, owned by no node (leaked)."""
    n = tx.node(nid)
    tx.free_dev(n.dev)
    if n.host is not None:
        tx.set_dev(nid, ())
    elif len(n.children):
        orphans = [nid]
        i = 0
        while i < len(orphans):
            orphans.extend(tx.node(orphans[i]).children.values())
            i += 1
        tx.put(n.with_(children=immutables.Map()))
        tx.remove_leaf(nid)
        for o in orphans[1:]:
            tx.nodes.delete(o)
    else:
        tx.remove_leaf(nid)


def evict_host_node(tx: Tx, nid: int) -> None:
    """Drop a host victim: free its object and remove the node."""
    n = tx.node(nid)
    tx.free_object(n.host)
    tx.remove_leaf(nid)


def first_victim(index: Any, cfg: Config, view: int | None) -> int:
    """The first node of a (non-empty) victim index in the order rank `view` decides by."""
    if cfg.bug == "wallclock_tiebreak" and view is not None:
        return min(index, key=lambda k: rank_order_key(k, cfg, view))[2]
    return index.first()[2]


def device_victims(tx: Tx, exclude: frozenset[int] = frozenset(), view: int | None = None) -> Iterator[int]:
    """Device victims in victim order (rank `view`'s), re-checked against the
    transaction as it goes: a parent that becomes an evictable leaf while the caller
    evicts joins the order. The caller must evict each id it receives before asking
    for the next."""
    import heapq

    cfg = tx.cfg
    base = iter(in_rank_order(tx.s.dev_index, cfg, view))
    head = next(base, None)
    extra: list[tuple] = []  # (rank order key, replicated key)
    while True:
        if extra and (head is None or extra[0][0] < rank_order_key(head, cfg, view)):
            key = heapq.heappop(extra)[1]
        elif head is not None:
            key, head = head, next(base, None)
        else:
            return
        nid = key[2]
        node = tx.nodes.get(nid)
        if nid in exclude or node is None or dev_victim_key(node, nid in tx.pending, cfg) != key:
            continue
        parent_id = node.parent
        yield nid
        if parent_id != ROOT_ID and parent_id not in exclude:
            p = tx.nodes.get(parent_id)
            pk = dev_victim_key(p, parent_id in tx.pending, cfg) if p is not None else None
            if pk is not None:
                heapq.heappush(extra, (rank_order_key(pk, cfg, view), pk))


def evict_host_to_fit(tx: Tx, length: int, view: int | None = None) -> int | None:
    """The base of a free host run of `length` pages, evicting host leaves to make one:
    a snapshot of the host victim order (rank `view`'s) taken before the first
    eviction, released one at a time with a retry after each (a parent that becomes a
    host leaf meanwhile is not added). None when the snapshot runs out; the evictions
    made stay in `tx`."""
    need = length
    if tx.cfg.bug == "local_host_alloc" and view is not None:
        # the rank sizes the room it needs from its own view: the pages of the object it
        # owns itself (index i mod R), not the whole object every rank shares
        need = len(tx.owned_indices(view, length))
    if need and tx.first_fit(need) is None:
        for victim in [k[2] for k in in_rank_order(tx.s.host_index, tx.cfg, view)]:
            evict_host_node(tx, victim)
            if tx.first_fit(need) is not None:
                break
    return tx.first_fit(length)

