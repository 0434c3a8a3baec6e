"""The victim policy: which nodes the derived victim indexes of a `ClusterState` hold
(`dev_index`, `host_index`, `backup_index`) and in which order a rank takes them.

A node is a device victim, a host victim or a backup candidate by its own fields and
whether a backup of it is pending; `kvsm.tx` keeps the indexes up to date as it writes
nodes, and invariant 10 recomputes them from scratch with the same functions.
"""

from __future__ import annotations

from typing import Any, Iterable

from .config import Config
from .state import ROOT_ID, Node


def victim_order(node: Node, cfg: Config) -> tuple:
    """The replicated victim order (docs/model.md, Deterministic choices), for device and host victims and
    the planner's ties: `(hits >= 2, touched, id)` under `eviction = "slru"` (nodes hit
    twice or more go last), `(False, touched, id)` under `"lru"`."""
    return (cfg.eviction == "slru" and node.hits >= 2, node.touched, node.id)


def rank_order_key(key: tuple, cfg: Config, view: int | None) -> tuple:
    """Where a victim with replicated order key `key` stands in the order rank `view`
    decides by (None: the replicated order itself)."""
    if cfg.bug == "wallclock_tiebreak" and view is not None:
        # The rank stamps an access with its own wall clock, which ticks once every two
        # logical accesses at a phase of its own (rank r's reading of access t is
        # (t + r) div 2): two accesses that share a tick tie there and fall to the node
        # id, while on a rank whose tick falls between them they are ordered by time.
        return (key[0], (key[1] + view) // 2, key[2])
    return key


def in_rank_order(keys: Iterable[tuple], cfg: Config, view: int | None) -> Iterable[tuple]:
    """Victim order keys (of an index, in replicated order) in the order rank `view`
    takes them: the index itself, read lazily (a caller that takes the first few victims
    does not pay for the whole order), except where the rank's order differs."""
    if cfg.bug == "wallclock_tiebreak" and view is not None:
        return sorted(keys, key=lambda k: rank_order_key(k, cfg, view))
    return keys


def sync_write_back(cfg: Config) -> bool:
    """Whether a load-back writes its unbacked device victims back synchronously, inside
    its own step (`write_back_evict = "sync"` or `"deferred"` under the write_back
    policy)."""
    return cfg.policy == "write_back" and cfg.write_back_evict != "locked"


def evict_write_back(cfg: Config) -> bool:
    """Whether `EvictDevice` takes unbacked device leaves too, writing each back inside
    its step (`evict_write_back = "sync"` or `"sync_fixed"` under the write_back
    policy)."""
    return cfg.policy == "write_back" and cfg.evict_write_back != "locked"


def held_on_l1(node: Node, is_pending: bool, cfg: Config) -> bool:
    """Whether something holds the node on L1: a lock (requests, its own pending backup)
    or a backup in flight."""
    if is_pending and cfg.bug == "evict_pending":
        # the victim test does not see the backup in flight: neither that the node is
        # pending nor the lock its backup holds on it, so the node is taken mid-backup
        return node.lock > 1
    return bool(node.lock) or is_pending


def dev_victim_key(node: Node, is_pending: bool, cfg: Config) -> tuple | None:
    """Victim-order key of a node that `EvictDevice` may take now, else None.

    Evictable from L1: on L1, unlocked, no pending backup, no child on L1, and either
    backed (it keeps its host copy) or, under write_through, unbacked with no
    children at all (it is deleted; deleting one with host-only children would orphan
    them, which the reference does: `unbacked_evict = "reference"` allows it). Under
    write_back an unbacked leaf must be written back first (`Reserve`).
    """
    if node.id == ROOT_ID or not node.dev or node.ondev or held_on_l1(node, is_pending, cfg):
        return None
    if node.host is None and (
        cfg.policy != "write_through" or (len(node.children) and cfg.unbacked_evict != "reference")
    ):
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


def index_entries(node: Node, is_pending: bool, cfg: Config) -> tuple[tuple | None, tuple | None, bool]:
    """Where a node stands in the three derived indexes at once: its `dev_victim_key`,
    its `host_victim_key` and whether it is a `backup_candidate` (what `kvsm.tx` compares
    before and after a write). A node without a host copy is never a host victim and one
    with a host copy never a backup candidate, so only one of those two is asked."""
    if node.host is None:
        return dev_victim_key(node, is_pending, cfg), None, backup_candidate(node, is_pending, cfg)
    return dev_victim_key(node, is_pending, cfg), host_victim_key(node, cfg), False


_NO_ENTRIES = (None, None, False)  # `index_entries` of no node


def reindex(s: Any, nodes: Any, pending: Any, dirty: Iterable[int]) -> tuple[Any, Any, Any]:
    """State `s`'s three derived indexes (`dev_index`, `host_index`, `backup_index`) after
    a transaction that left the maps `nodes` and `pending` and wrote the node ids `dirty`
    in one of them: each written node leaves the index entries it had and takes those it
    has now, where they differ (`kvsm.tx.Tx.commit`)."""
    cfg = s.config
    dev_index, host_index, backup_index = s.dev_index, s.host_index, s.backup_index
    old_nodes, old_pending = s.nodes, s.pending
    for nid in dirty:
        was = old_nodes.get(nid)
        now = nodes.get(nid)
        old_p = nid in old_pending
        new_p = old_p if pending is old_pending else nid in pending
        if was is now and old_p == new_p:
            continue
        ok, oh, ob = _NO_ENTRIES if was is None else index_entries(was, old_p, cfg)
        nk, nh, nb = _NO_ENTRIES if now is None else index_entries(now, new_p, cfg)
        if ok != nk:
            if ok is not None:
                dev_index = dev_index.remove(ok)
            if nk is not None:
                dev_index = dev_index.add(nk)
        if oh != nh:
            if oh is not None:
                host_index = host_index.remove(oh)
            if nh is not None:
                host_index = host_index.add(nh)
        if ob != nb:
            backup_index = backup_index.add(nid) if nb else backup_index.remove(nid)
    return dev_index, host_index, backup_index
