"""Evicting victims, shared by the transitions that evict (`EvictDevice`, `EvictHost`)
and those that make room as they go (`Insert`, `Reserve`, the L3 reload): dropping a
device or host victim, the victim order a rank takes them in, and evicting host leaves
until an object fits."""

from __future__ import annotations

import heapq
from typing import Any, Iterator


from ..config import Config
from ..state import ROOT_ID, lane_of
from ..tx import Tx
from ..victims import dev_victim_key, host_victim_key, in_rank_order, rank_order_key


def evict_device_node(tx: Tx, nid: int) -> None:
    """Drop a device victim: a backed node keeps its host copy, an unbacked one is
    deleted. An unbacked one with (L2-only) children is a victim only under
    `unbacked_evict = "reference"`: like the reference's `_delete_leaf`, it leaves its
    parent's children and the tree, and the subtree below it stays as it is, orphaned
    under a husk (`Tx.orphan_below`): no match reaches its nodes, which are host
    victims like any other, so host evictions free them leaf by leaf (docs/model.md,
    "Orphans")."""
    n = tx.node(nid)
    tx.free_dev(n.dev)
    if n.host is not None:
        tx.set_dev(nid, ())
    elif len(n.children):
        tx.orphan_below(nid)
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


def evict_host_to_fit(tx: Tx, length: int, view: int | None = None, snapshot: list[int] | None = None) -> tuple[int, ...] | None:
    """The host pages of an object of `length` pages (`Tx.host_alloc`: a free run, or
    the lowest free pages under `l2_alloc = "pages"`), evicting host leaves to make room:
    a snapshot of the host victim order (rank `view`'s) taken before the first
    eviction, released one at a time with a retry after each (a parent that becomes a
    host leaf meanwhile is not added). None when the snapshot runs out; the evictions
    made stay in `tx`. `snapshot` is the host victims to take, in order (default: those
    of the state the transaction started from)."""
    need = length
    if tx.cfg.bug == "local_host_alloc" and view is not None:
        # the rank sizes the room it needs from its own view: the pages of the object it
        # owns itself (index i mod R), not the whole object every rank shares
        need = len(tx.owned_indices(view, length))
    if need and not tx.host_room(need):
        # (the state's index, which the evictions do not change, read as they go)
        for victim in snapshot if snapshot is not None else (k[2] for k in in_rank_order(tx.s.host_index, tx.cfg, view)):
            evict_host_node(tx, victim)
            if tx.host_room(need):
                break
    if tx.cfg.bug == "backup_host_uaf" and need and not tx.host_room(need):
        release_inflight_backups(tx, need)
    return tx.host_alloc(length)


def host_victims_now(tx: Tx, view: int | None, keep: frozenset[int]) -> list[int]:
    """The host victims of the transaction as it stands (not as it started: nodes it
    evicted from L1 are host leaves now), but `keep`, in rank `view`'s order."""
    cfg = tx.cfg
    keys = [k for k in tx.s.host_index if k[2] not in tx.nodes.dirty]
    for nid in tx.nodes.dirty:
        n = tx.nodes.get(nid)
        k = host_victim_key(n, cfg) if n is not None else None
        if k is not None:
            keys.append(k)
    return [k[2] for k in in_rank_order(sorted(keys), cfg, view) if k[2] not in keep]


def write_back(tx: Tx, nid: int, view: int | None, keep: frozenset[int]) -> bool:
    """The reference's synchronous write-back of an unbacked device victim inside a
    load-back's eviction (`write_backup(write_back=True)`, then `writing_check(write_back=True)`,
    which blocks until the copy is done): an object of its length, host leaves evicted to
    fit (a snapshot of the host victims as they stand now, but `keep`), every rank's copy
    of the pages in its lane, and the commit. False when no run fits: the evictions made
    stay and the node stays unbacked."""
    n = tx.node(nid)
    got = evict_host_to_fit(tx, n.pages, view, host_victims_now(tx, view, keep))
    if got is None:
        return False
    tx.objects.set(nid, tx.new_object(got, True, nid))
    for i, p in enumerate(n.dev):
        tx.store_host(lane_of(p, tx.cfg.R), p, got[i])
    tx.update(nid, host=nid)
    return True


def host_page_free(tx: Tx, page: int) -> bool:
    """Whether host page `page` is free (in a free run of the first payload region)."""
    run = tx.l2_free[0].floor_lt((page + 1, 0))
    return run is not None and run[0] + run[1] > page


def release_inflight_backups(tx: Tx, need: int) -> None:
    """The defect `backup_host_uaf` (docs/defects.md): once the host leaves run out,
    host eviction also takes the slots of the backups in flight, oldest first, until a
    run of `need` pages is free. Nothing pins them: their pages are freed (poisoned)
    while the object and the registration stay, so the copy still lands in them."""
    for nid in tx.writes:
        pend = tx.pending.get(nid)
        if pend is None:
            continue
        obj = tx.objects[pend.obj]
        if any(host_page_free(tx, p) for p in obj.page_list()):
            continue  # already released
        tx.free_pages_of(obj)
        if tx.host_room(need):
            return
