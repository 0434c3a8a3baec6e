"""The checker tested as code: every invariant's three forms (the rule over a whole state,
`violations`; the rule over what one step wrote, `local_violations`; the fast
whole-state form, `holds`) give the same verdict on states good and broken.

The states are those of seeded walks of small configs and those walks' steps, each
possibly followed by one corruption from `CORRUPTIONS`: a table of (invariant, clause,
direction, corruption), one row per way a clause of an invariant can fail. A corrupted
state keeps its digest sums and victim indexes recomputed (but where a row breaks them),
so that what breaks is what the row says. The step checked is the walk's step and the
corruption together, its written keys those that differ between the state before and
after it (`_written`), so that the step form looks where the corruption is.

Each row must be refused by all three forms, with the row's invariant among those the
whole-state and the step forms name (and with the same invariant numbers); a row that
no base state admits fails the table test, so the table cannot silently shrink. The
Hypothesis property draws the base step, the row and the row's choices (which node,
which page), and asserts the three forms agree, whatever breaks. The default profile is
derandomized and small; `KVSM_HYPOTHESIS=thorough` runs many more examples."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from kvsm import content as prefixes
from kvsm import effects as fx
from kvsm.config import load_config
from kvsm.digest_sums import recompute_sums
from kvsm.invariants import INVARIANTS, STATE_INVARIANTS, Cache, Shadow, holds, local_violations, step_violations, violations
from kvsm.sortedset import PSortedSet
from kvsm.state import DECODING, GONE, MATCHED, QUEUED, ROOT_ID, ClusterState, Round, initial_state, lane_of
from kvsm.tx import _WRITTEN_MAPS
from kvsm.victims import backup_candidate, dev_victim_key, host_victim_key
from kvsm.walk import walk
from kvsm.writes import EMPTY

# The default run is derandomized (the same examples every run) and small enough for the
# default suite; KVSM_HYPOTHESIS=thorough draws many more, at random.
FORMS = {
    "default": settings(max_examples=1500, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)),
    "thorough": settings(max_examples=8000, deadline=None, derandomize=False, database=None, suppress_health_check=list(HealthCheck)),
}[os.environ.get("KVSM_HYPOTHESIS", "default")]

DIGEST_SUMS = "10 Counts: the digest sums differ from their recomputation"  # (whole-state only: they sum the whole state)
BIG = 10**6  # an id no state of these walks reaches


# ---- base states: seeded walks of the small configs ----------------------------------------------


def _configs() -> dict[str, Any]:
    lift = dict(max_requests=10**6)
    return {
        "small": replace(load_config("small"), **lift),
        "loads": replace(load_config("loads"), **lift),
        "l3-small": replace(load_config("l3-small"), **lift),
        "l3": replace(load_config("l3"), **lift),
        # prepared backups, carried host hits, acks appended apart from the copies
        "default+": replace(load_config("default"), prepared_backups=True, carry_host_hit=True, ack_append="reference", **lift),
    }


@lru_cache(maxsize=None)
def steps() -> tuple[tuple[ClusterState, ClusterState], ...]:
    """(state before, state after) of every 5th step of two walks of each config, and
    every step into a state with a husk of the orphan model (walks rarely orphan)."""
    out = []
    for cfg in _configs().values():
        for seed in range(2):
            s = initial_state(cfg)
            for k, (_, a) in enumerate(walk(cfg, 300, seed, s)):
                if k % 5 == 0:
                    out.append((s, a))
                s = a
    return tuple(out) + _husk_steps()


def _husk_steps() -> tuple[tuple[ClusterState, ClusterState], ...]:
    """The steps of `spec/MC_orphan_eviction.cfg`'s graph (unbacked_evict = "reference")
    into a state with a husk, in the order of their digests."""
    from kvsm.explore import explore
    from kvsm.tla.location import model_paths, spec_dir
    from kvsm.tla.models import config_of_model

    g = explore(config_of_model(*model_paths(str(spec_dir() / "MC_orphan_eviction.cfg"))))
    out = []
    for d in sorted(g.states):
        a, up = g.states[d], g.parents.get(d)
        if up is not None and any(n.parent == GONE for n in a.nodes.values()):
            out.append((g.states[up[0]], a))
    assert out
    return tuple(out)


# ---- building a broken state ---------------------------------------------------------------------


def _written(B: ClusterState, A: ClusterState) -> tuple:
    """The keys of each written map (`kvsm.tx._WRITTEN_MAPS`) whose entry differs between
    `B` and `A`: what a step from `B` to `A` wrote (the other parts `kvsm.invariants.step`
    compares itself)."""
    out = []
    miss = object()
    for name in _WRITTEN_MAPS:
        b, a = getattr(B, name), getattr(A, name)
        if a is b:
            out.append(EMPTY)
            continue
        keys = {k for k in set(b.keys()) | set(a.keys()) if b.get(k, miss) is not a.get(k, miss)}
        out.append(frozenset(keys) if keys else EMPTY)
    return tuple(out)


def _reindexed(s: ClusterState) -> ClusterState:
    """`s` with its victim and backup indexes recomputed from its nodes."""
    cfg = s.config
    dev = sorted(k for k in (dev_victim_key(n, nid in s.pending, cfg) for nid, n in s.nodes.items()) if k)
    host = sorted(k for k in (host_victim_key(n, cfg) for n in s.nodes.values()) if k)
    backup = sorted(nid for nid, n in s.nodes.items() if backup_candidate(n, nid in s.pending, cfg))
    return replace(s, dev_index=PSortedSet(dev), host_index=PSortedSet(host), backup_index=PSortedSet(backup))


def _settled(s: ClusterState, derived: bool = True, sums: bool = True) -> ClusterState:
    """`s` with its derived parts recomputed: the indexes (with `derived`) and the digest
    sums (with `sums`)."""
    if derived:
        s = _reindexed(s)
    return replace(s, sums=recompute_sums(s)) if sums and s.sums is not None else s


def _put(s: ClusterState, nid: int, **ch: Any) -> ClusterState:
    return replace(s, nodes=s.nodes.set(nid, s.nodes[nid].with_(**ch)))


def _ids(s: ClusterState, pred: Callable = lambda n: True) -> list[int]:
    """The nodes `pred` accepts, but the root and the husks (their parent is `GONE`: the
    corruptions that read a node's parent read a node of the tree)."""
    return sorted(nid for nid, n in s.nodes.items() if nid != ROOT_ID and n.parent != GONE and pred(n))


def _free_pages(s: ClusterState) -> list[int]:
    return sorted(p for lane in s.dev_free for p in lane)


def _listed_in(s: ClusterState, p: int) -> int:
    """The free list that lists page `p` (its lane's, unless a corruption moved it)."""
    return next(k for k, lane in enumerate(s.dev_free) if p in lane)


def _set_lane(s: ClusterState, lane: int, free: PSortedSet) -> ClusterState:
    lanes = list(s.dev_free)
    lanes[lane] = free
    return replace(s, dev_free=tuple(lanes))


def _set_at(t: tuple, i: int, v: Any) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _with_ondev(s: ClusterState, nid: int) -> ClusterState:
    """`s` with node `nid`'s count of children on L1 made right."""
    n = s.nodes[nid]
    return _put(s, nid, ondev=sum(1 for c in n.children.values() if s.nodes[c].dev))


# ---- the corruptions: (s, pick) -> broken state, or None where `s` has nothing to break ---------
# `pick(seq)` chooses one element of a non-empty sequence (Hypothesis draws it; the table
# test takes the first).


def c_root_key(s, pick):
    return _put(s, ROOT_ID, key=(9,))


def c_root_host(s, pick):
    keys = sorted(s.objects.keys())
    return _put(s, ROOT_ID, host=pick(keys)) if keys else None


def c_stored_id(s, pick):
    ids = _ids(s)
    return _put(s, (nid := pick(ids)), id=nid + BIG) if ids else None


def c_empty_key(s, pick):
    ids = _ids(s, lambda n: not n.children)
    return _put(s, pick(ids), key=(), hashes=()) if ids else None


def c_missing_parent(s, pick):
    ids = _ids(s, lambda n: not n.lock)
    return _put(s, pick(ids), parent=BIG) if ids else None


def c_not_child(s, pick):
    """The parent's child entry for a node dropped (the node's own entry unchanged)."""
    ids = _ids(s, lambda n: not n.lock and not n.dev)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    p = s.nodes[n.parent]
    return _with_ondev(_put(s, n.parent, children=p.children.delete(n.key[0])), n.parent)


def c_child_missing(s, pick):
    """A child entry that names no node."""
    return _put(s, ROOT_ID, children=s.nodes[ROOT_ID].children.set(777, BIG))


def c_child_other(s, pick):
    """A child entry that names another node (under its own page, of another parent)."""
    ids = _ids(s, lambda n: n.parent != ROOT_ID and not n.dev)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    root = s.nodes[ROOT_ID]
    if n.key[0] in root.children:
        return None
    return _put(s, ROOT_ID, children=root.children.set(n.key[0], n.id))


def c_gone_leaf(s, pick):
    """An L2-only leaf taken from its parent's children with its parent `GONE`: no husk
    (a husk has children; and only under unbacked_evict = "reference")."""
    ids = _ids(s, lambda n: not n.dev and not len(n.children) and n.parent != GONE and not n.lock)
    if not ids:
        return None
    nid = pick(ids)
    n = s.nodes[nid]
    p = s.nodes[n.parent]
    return _put(_put(s, n.parent, children=p.children.delete(n.key[0])), nid, parent=GONE)


def c_cycle(s, pick):
    """A node and its child made each other's parent (each its parent's child under its
    first page, so only the walk to the root finds it)."""
    ids = _ids(s, lambda n: len(n.children) > 0 and not n.lock)
    if not ids:
        return None
    nid = pick(ids)
    n = s.nodes[nid]
    cid = sorted(n.children.values())[0]
    c = s.nodes[cid]
    if c.lock:
        return None
    p = s.nodes[n.parent]
    nodes = s.nodes.set(n.parent, p.with_(children=p.children.delete(n.key[0])))
    nodes = nodes.set(nid, n.with_(parent=cid, children=n.children.delete(c.key[0])))
    nodes = nodes.set(cid, nodes[cid].with_(children=c.children.set(n.key[0], nid)))
    s = replace(s, nodes=nodes)
    for x in (n.parent, nid, cid):
        s = _with_ondev(s, x)
    return s


def c_dev_short(s, pick):
    """A node on L1 with one device page fewer than its key (the page handed back)."""
    ids = _ids(s, lambda n: len(n.dev) >= 2 and not n.lock)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    p = n.dev[-1]
    s = _put(s, n.id, dev=n.dev[:-1])
    s = replace(s, dev_content=s.dev_content.delete(p) if p in s.dev_content else s.dev_content)
    return _set_lane(s, p % s.config.R, s.dev_free[p % s.config.R].add(p))


def c_dev_long(s, pick):
    """A node on L1 with one device page more than its key (taken off the free list,
    filled with what its last page holds)."""
    ids = _ids(s, lambda n: n.dev)
    free = _free_pages(s)
    if not ids or not free:
        return None
    n, p = s.nodes[pick(ids)], pick(free)
    s = _put(s, n.id, dev=n.dev + (p,))
    s = replace(s, dev_content=s.dev_content.set(p, n.hashes[-1]))
    return _set_lane(s, p % s.config.R, s.dev_free[p % s.config.R].remove(p))


def c_unbacked(s, pick):
    """A node off L1 pointing at no object (its object left to nobody)."""
    ids = _ids(s, lambda n: not n.dev and n.host is not None)
    return _put(s, pick(ids), host=None) if ids else None


def c_uncommitted(s, pick):
    """A node off L1 whose object is not committed."""
    ids = _ids(s, lambda n: not n.dev and n.host in s.objects)
    if not ids:
        return None
    key = s.nodes[pick(ids)].host
    return replace(s, objects=s.objects.set(key, s.objects[key].with_(committed=False)))


def c_host_missing(s, pick):
    ids = _ids(s, lambda n: not n.dev and n.host is not None)
    return _put(s, pick(ids), host=BIG) if ids else None


def _off_l1(s, n):
    """Node `n` off L1, its pages given back to the free lists, its lock kept."""
    s = _put(s, n.id, dev=())
    R = s.config.R
    for p in n.dev:
        s = _set_lane(s, p % R, s.dev_free[p % R].add(p))
        s = replace(s, dev_content=s.dev_content.delete(p) if p in s.dev_content else s.dev_content)
    return _with_ondev(s, n.parent)


def c_orphan(s, pick):
    """A node on L1 under a parent evicted from L1 (the parent's pages freed)."""
    ids = _ids(s, lambda n: n.dev and n.host in s.objects and not n.lock and n.ondev)
    if not ids:
        return None
    return _off_l1(s, s.nodes[pick(ids)])


def c_lock_high(s, pick):
    ids = _ids(s, lambda n: n.dev)
    return _put(s, (nid := pick(ids)), lock=s.nodes[nid].lock + 1) if ids else None


def c_lock_low(s, pick):
    ids = _ids(s, lambda n: n.lock)
    return _put(s, (nid := pick(ids)), lock=s.nodes[nid].lock - 1) if ids else None


def c_root_lock(s, pick):
    return _put(s, ROOT_ID, lock=1)


def _requests(s, pred=lambda q: True):
    return sorted(rid for rid, q in s.requests.items() if pred(q))


def _put_req(s, rid, **ch):
    return replace(s, requests=s.requests.set(rid, s.requests[rid].with_(**ch)))


def c_phase(s, pick):
    rids = _requests(s, lambda q: q.phase == QUEUED)
    return _put_req(s, pick(rids), phase="waiting") if rids else None


def c_queued_lock(s, pick):
    rids = _requests(s, lambda q: q.phase == QUEUED)
    ids = _ids(s)
    return _put_req(s, pick(rids), node=pick(ids)) if rids and ids else None


def c_request_missing_node(s, pick):
    rids = _requests(s, lambda q: q.phase != QUEUED and q.node == ROOT_ID)
    return _put_req(s, pick(rids), node=BIG) if rids else None


def c_load_missing_node(s, pick):
    if not s.loads or s.loads[0].node == ROOT_ID:
        return None
    op = s.loads[0]
    return replace(s, loads=(op.with_(node=BIG),) + s.loads[1:])


def _queued_to(s, pick, phase):
    """A queued request moved past the queue onto a node off L1 under the root, which its
    lock is counted on (so that only the clause on L1 breaks)."""
    ids = _ids(s, lambda n: not n.dev and n.parent == ROOT_ID and not n.lock)
    rids = _requests(s, lambda q: q.phase == QUEUED)
    if not ids or not rids:
        return None
    nid = pick(ids)
    return _put_req(_put(s, nid, lock=1), pick(rids), node=nid, phase=phase)


def c_locked_off_l1(s, pick):
    return _queued_to(s, pick, DECODING)


def c_matched_off_l1(s, pick):
    return _queued_to(s, pick, MATCHED)


def c_write_unreserved(s, pick):
    """A write in flight with no pending backup (nor prepared one) behind it."""
    ids = _ids(s, lambda n: n.id not in s.pending)
    return replace(s, writes=s.writes + (pick(ids),)) if ids else None


def c_write_twice(s, pick):
    return replace(s, writes=s.writes + (s.writes[-1],)) if s.writes else None


def c_pending_unwritten(s, pick):
    """A pending backup whose write is not in flight (the last one, which no rank has
    finished)."""
    if not s.writes or s.writes[-1] not in s.pending or max(s.write_done) >= len(s.writes) or max(s.acked) >= len(s.writes):
        return None
    return replace(s, writes=s.writes[:-1])


def _pending_ids(s):
    return sorted(nid for nid in s.pending.keys() if nid in s.nodes)


def c_pending_unlocked(s, pick):
    ids = [nid for nid in _pending_ids(s) if s.nodes[nid].lock == 1 and s.pending[nid].locked]
    if not ids:
        return None
    nid = pick(ids)
    return replace(_put(s, nid, lock=0), pending=s.pending.set(nid, s.pending[nid].with_(locked=False)))


def c_pending_off_l1(s, pick):
    """A pending node evicted from L1 (its pages given back, its lock kept)."""
    ids = _pending_ids(s)
    if not ids:
        return None
    return _off_l1(s, s.nodes[pick(ids)])


def c_pending_backed(s, pick):
    ids = _pending_ids(s)
    return _put(s, (nid := pick(ids)), host=s.pending[nid].obj) if ids else None


def c_pending_missing_node(s, pick):
    ids = _pending_ids(s)
    if not ids:
        return None
    nid = pick(ids)
    return replace(s, pending=s.pending.set(BIG, s.pending[nid]).delete(nid), writes=tuple(BIG if w == nid else w for w in s.writes))


def c_pending_object_missing(s, pick):
    ids = _pending_ids(s)
    return replace(s, pending=s.pending.set((nid := pick(ids)), s.pending[nid].with_(obj=BIG))) if ids else None


def c_pending_object_committed(s, pick):
    ids = [nid for nid in _pending_ids(s) if s.pending[nid].obj in s.objects]
    if not ids:
        return None
    key = s.pending[pick(ids)].obj
    return replace(s, objects=s.objects.set(key, s.objects[key].with_(committed=True)))


def _object_length(s, key, delta):
    """Object `key` `delta` pages longer (the page it takes, or gives back, in every region's free runs)."""
    o = s.objects[key]
    regions = []
    if delta > 0:
        end = o.base + o.length
        for runs in s.l2_free:
            run = next((r for r in runs if r[0] == end), None)
            if run is None:
                return None
            runs = runs.remove(run)
            if run[1] > 1:
                runs = runs.add((end + 1, run[1] - 1))
            regions.append(runs)
    else:
        if o.length < 2:
            return None
        end = o.base + o.length - 1
        for runs in s.l2_free:
            after = next((r for r in runs if r[0] == end + 1), None)
            if after is not None:
                runs = runs.remove(after).add((end, after[1] + 1))
            else:
                runs = runs.add((end, 1))
            regions.append(runs)
    return replace(s, objects=s.objects.set(key, o.with_(length=o.length + delta)), l2_free=tuple(regions))


def c_pending_object_long(s, pick):
    ids = [nid for nid in _pending_ids(s) if s.pending[nid].obj in s.objects]
    return _object_length(s, s.pending[pick(ids)].obj, 1) if ids else None


def c_pending_object_short(s, pick):
    ids = [nid for nid in _pending_ids(s) if s.pending[nid].obj in s.objects]
    return _object_length(s, s.pending[pick(ids)].obj, -1) if ids else None


def c_write_done_high(s, pick):
    r = pick(range(s.config.R))
    return replace(s, write_done=_set_at(s.write_done, r, len(s.writes) + 1), acked=_set_at(s.acked, r, len(s.writes) + 1) if any(s.acked) or s.config.ack_append != "fixed" else s.acked)


def c_write_done_low(s, pick):
    return replace(s, write_done=_set_at(s.write_done, pick(range(s.config.R)), -1))


def c_acked_high(s, pick):
    if s.config.ack_append == "fixed":
        return replace(s, acked=_set_at(s.acked, pick(range(s.config.R)), 1))
    return replace(s, acked=_set_at(s.acked, pick(range(s.config.R)), len(s.writes) + 1))


def c_acked_low(s, pick):
    ranks = [r for r in range(s.config.R) if s.write_done[r] > 0]
    if s.config.ack_append == "fixed" or not ranks:
        return None
    r = pick(ranks)
    return replace(s, acked=_set_at(s.acked, r, s.write_done[r] - 1))


def c_prepared_unmatched(s, pick):
    rids = sorted(s.prepared.keys())
    if not rids:
        return None
    rid = pick(rids)
    q = s.requests.get(rid)
    return _put_req(s, rid, phase=DECODING) if q is not None else None


def c_prepared_taken_id(s, pick):
    rids = [rid for rid, nid in s.prepared.items() if nid is not None]
    ids = _ids(s)
    return replace(s, prepared=s.prepared.set(pick(rids), pick(ids))) if rids and ids else None


def c_prepared_no_object(s, pick):
    rids = [rid for rid, nid in s.prepared.items() if nid is not None and nid in s.objects]
    if not rids:
        return None
    nid = s.prepared[pick(rids)]
    return replace(s, objects=s.objects.set(nid, s.objects[nid].with_(owner=nid + 1)))


def c_prepared_written(s, pick):
    rids = [rid for rid, nid in s.prepared.items() if nid is not None and nid in s.writes]
    if not rids:
        return None
    i = s.writes.index(s.prepared[pick(rids)])
    r = pick(range(s.config.R))
    s = replace(s, write_done=_set_at(s.write_done, r, i + 1))
    return replace(s, acked=_set_at(s.acked, r, max(s.acked[r], i + 1))) if s.config.ack_append != "fixed" else s


def _dev_owned(s):
    return sorted((p, nid) for nid, n in s.nodes.items() for p in n.dev)


def c_dev_node_and_free(s, pick):
    owned = _dev_owned(s)
    if not owned:
        return None
    p, _ = pick(owned)
    R = s.config.R
    return _set_lane(s, p % R, s.dev_free[p % R].add(p))


def c_dev_node_and_request(s, pick):
    owned, rids = _dev_owned(s), _requests(s)
    if not owned or not rids:
        return None
    rid = pick(rids)
    return _put_req(s, rid, pages=s.requests[rid].pages + (pick(owned)[0],))


def c_dev_two_nodes(s, pick):
    """Two nodes holding one page (the first node's own page given back to the free list)."""
    owned = _dev_owned(s)
    pairs = [(a, b) for a in owned for b in owned if a[1] != b[1] and a[0] % s.config.R == b[0] % s.config.R]
    if not pairs:
        return None
    (pa, na), (pb, nb) = pick(pairs)
    n = s.nodes[na]
    s = _put(s, na, dev=tuple(pb if p == pa else p for p in n.dev))
    s = replace(s, dev_content=s.dev_content.delete(pa) if pa in s.dev_content else s.dev_content)
    R = s.config.R
    return _set_lane(s, pa % R, s.dev_free[pa % R].add(pa))


def c_dev_leak(s, pick):
    free = _free_pages(s)
    if not free:
        return None
    p = pick(free)
    lane = _listed_in(s, p)
    return _set_lane(s, lane, s.dev_free[lane].remove(p))


def c_dev_out_of_range_high(s, pick):
    rids = _requests(s)
    return _put_req(s, (rid := pick(rids)), pages=s.requests[rid].pages + (s.config.device_pages,)) if rids else None


def c_dev_out_of_range_low(s, pick):
    rids = _requests(s)
    return _put_req(s, (rid := pick(rids)), pages=s.requests[rid].pages + (-1,)) if rids else None


def c_node_page_out_of_range(s, pick):
    """A node's page moved outside the pool (the page it held given back)."""
    owned = _dev_owned(s)
    if not owned:
        return None
    p, nid = pick(owned)
    R = s.config.R
    q = s.config.device_pages + p % R + R
    n = s.nodes[nid]
    s = _put(s, nid, dev=tuple(q if x == p else x for x in n.dev))
    c = s.dev_content.get(p)
    s = replace(s, dev_content=(s.dev_content.delete(p).set(q, c) if c is not None else s.dev_content))
    return _set_lane(s, p % R, s.dev_free[p % R].add(p))


def c_free_wrong_lane(s, pick):
    free = _free_pages(s)
    R = s.config.R
    if not free or R < 2:
        return None
    p = pick(free)
    other = (p + 1) % R
    lane = _listed_in(s, p)
    s = _set_lane(s, lane, s.dev_free[lane].remove(p))
    return _set_lane(s, other, s.dev_free[other].add(p))


def c_load_target(s, pick):
    """A load-back's copy aimed at a free page."""
    free = _free_pages(s)
    if not s.loads or not free:
        return None
    op = s.loads[0]
    (p, hp), rest = op.pages[0], op.pages[1:]
    return replace(s, loads=(op.with_(pages=((pick(free), hp),) + rest),) + s.loads[1:])


def c_load_copy(s, pick):
    if not s.loads:
        return None
    op = s.loads[0]
    (p, hp), rest = op.pages[0], op.pages[1:]
    return replace(s, loads=(op.with_(pages=((p, hp + 1),) + rest),) + s.loads[1:])


def _runs(s):
    return sorted(s.l2_free[0])


def _set_runs(s, f):
    return replace(s, l2_free=tuple(f(runs) for runs in s.l2_free))


def c_host_free_and_used(s, pick):
    """An object's first page listed free too (a run of its own)."""
    keys = sorted(k for k, o in s.objects.items() if o.length)
    if not keys:
        return None
    o = s.objects[pick(keys)]
    if any(r[0] + r[1] == o.base or r[0] == o.base + 1 for r in _runs(s)):
        return None  # (the run would touch a free neighbour: another clause)
    return _set_runs(s, lambda runs: runs.add((o.base, 1)))


def c_host_twice(s, pick):
    """Two objects over one host page (the first object's own pages given back)."""
    keys = sorted(k for k, o in s.objects.items() if o.length == 1)
    pairs = [(a, b) for a in keys for b in keys if a != b]
    if not pairs:
        return None
    a, b = pick(pairs)
    oa, ob = s.objects[a], s.objects[b]
    if any(r[0] + r[1] == oa.base or r[0] == oa.base + 1 for r in _runs(s)):
        return None
    s = replace(s, objects=s.objects.set(a, oa.with_(base=ob.base)))
    return _set_runs(s, lambda runs: runs.add((oa.base, 1)))


def c_host_leak(s, pick):
    runs = _runs(s)
    return _set_runs(s, lambda r: r.remove(pick(runs))) if runs else None


def c_host_run_outside(s, pick):
    L2 = s.config.L2
    if any(r[0] + r[1] == L2 for r in _runs(s)):
        return None
    return _set_runs(s, lambda r: r.add((L2, 1)))


def c_host_run_negative(s, pick):
    if any(r[0] == 0 for r in _runs(s)):
        return None
    return _set_runs(s, lambda r: r.add((-1, 1)))


def c_host_run_empty(s, pick):
    """A free run of no pages, apart from the others."""
    runs = _runs(s)
    at = [p for p in range(1, s.config.L2 - 1) if not any(b - 1 <= p <= b + n for b, n in runs)]
    return _set_runs(s, lambda r: r.add((pick(at), 0))) if at else None


def c_host_runs_touch(s, pick):
    runs = [r for r in _runs(s) if r[1] >= 2]
    if not runs:
        return None
    b, n = pick(runs)
    return _set_runs(s, lambda r: r.remove((b, n)).add((b, 1)).add((b + 1, n - 1)))


def c_committed_no_node(s, pick):
    """A node on L1 that lets go of its committed object (which keeps naming it)."""
    ids = _ids(s, lambda n: n.dev and n.host is not None)
    return _put(s, pick(ids), host=None) if ids else None


def c_committed_length_long(s, pick):
    keys = sorted(k for k, o in s.objects.items() if o.committed)
    return _object_length(s, pick(keys), 1) if keys else None


def c_committed_length_short(s, pick):
    keys = sorted(k for k, o in s.objects.items() if o.committed)
    return _object_length(s, pick(keys), -1) if keys else None


def c_pending_object_other(s, pick):
    """A pending backup naming an object not its own (an object key is its node's id)."""
    ids = [nid for nid in _pending_ids(s) if s.pending[nid].obj in s.objects]
    others = sorted(k for k, o in s.objects.items())
    if not ids or len(others) < 2:
        return None
    nid = pick(ids)
    other = pick([k for k in others if k != s.pending[nid].obj])
    return replace(s, pending=s.pending.set(nid, s.pending[nid].with_(obj=other)))


def c_object_of_nobody(s, pick):
    """An uncommitted object of no pages that no pending backup, prepared one or reload holds."""
    o = next(iter(s.objects.values()), None)
    if o is None:
        return None
    return replace(s, objects=s.objects.set(BIG, o.with_(base=0, length=0, committed=False, owner=BIG)))


def c_reload_object_length(s, pick):
    if not s.reloads or s.reloads[0].obj not in s.objects:
        return None
    return _object_length(s, s.reloads[0].obj, 1)


def c_object_owner(s, pick):
    ids = _ids(s, lambda n: n.host in s.objects)
    others = _ids(s)
    if not ids or len(others) < 2:
        return None
    nid = pick(ids)
    key = s.nodes[nid].host
    return replace(s, objects=s.objects.set(key, s.objects[key].with_(owner=pick([o for o in others if o != nid]))))


def c_stale_hit(s, pick):
    if not s.config.carry_host_hit:
        return None
    rids = _requests(s, lambda q: not q.hit)
    ids = _ids(s, lambda n: n.host is None)
    return _put_req(s, pick(rids), hit=pick(ids), hit_pages=1) if rids and ids else None


def c_hashes(s, pick):
    ids = _ids(s)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    return _put(s, n.id, hashes=n.hashes[:-1] + (n.hashes[-1] ^ 1,))


def c_dev_content_wrong(s, pick):
    owned = [(p, nid) for p, nid in _dev_owned(s) if p in s.dev_content]
    return replace(s, dev_content=s.dev_content.set((p := pick(owned)[0]), s.dev_content[p] ^ 1)) if owned else None


def c_dev_content_missing(s, pick):
    owned = [(p, nid) for p, nid in _dev_owned(s) if p in s.dev_content]
    return replace(s, dev_content=s.dev_content.delete(pick(owned)[0])) if owned else None


def c_copying_holds(s, pick):
    from kvsm.invariants.common import copying

    pages = sorted(copying(s))
    return replace(s, dev_content=s.dev_content.set(pick(pages), 1)) if pages else None


def c_host_content_wrong(s, pick):
    ids = _ids(s, lambda n: n.host in s.objects and s.objects[n.host].committed and s.objects[n.host].length)
    if not ids:
        return None
    o = s.objects[s.nodes[pick(ids)].host]
    page = o.base + pick(range(o.length))
    return replace(s, host_content=s.host_content.set(page, s.host_content.get(page, 0) ^ 1))


def c_host_content_missing(s, pick):
    ids = _ids(s, lambda n: n.host in s.objects and s.objects[n.host].committed and s.objects[n.host].length)
    if not ids:
        return None
    o = s.objects[s.nodes[pick(ids)].host]
    page = o.base + pick(range(o.length))
    return replace(s, host_content=s.host_content.delete(page)) if page in s.host_content else None


def c_free_holds(s, pick):
    free = _free_pages(s)
    return replace(s, dev_content=s.dev_content.set(pick(free), 1)) if free else None


def c_disk_wrong(s, pick):
    keys = sorted(s.l3.keys())
    return replace(s, l3=s.l3.set((k := pick(keys)), k[1] ^ 1)) if keys else None


def c_staged_wrong(s, pick):
    ranks = [r for r in range(s.config.R) if any(s.spill_staged[r])]
    if not ranks:
        return None
    r = pick(ranks)
    ops = s.spill_staged[r]
    i = next(i for i, op in enumerate(ops) if op)
    (h, c), rest = ops[i][0], ops[i][1:]
    op = ((h, (c or 0) ^ 1 if c is not None else h ^ 1),) + rest
    return replace(s, spill_staged=_set_at(s.spill_staged, r, _set_at(ops, i, op)))


def c_durable_flag(s, pick):
    ids = _ids(s, lambda n: not n.durable and any((lane_of(i, s.config.R), h) not in s.l3 for i, h in enumerate(n.hashes)))
    return _put(s, pick(ids), durable=True) if ids else None


def c_durable_entry_gone(s, pick):
    ids = _ids(s, lambda n: n.durable)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    i = pick(range(len(n.hashes)))
    r = lane_of(i, s.config.R)
    return replace(s, l3=s.l3.delete((r, n.hashes[i])), l3_used=_set_at(s.l3_used, r, s.l3_used[r] - 1))


def c_node_hashes_short(s, pick):
    """A backed node with a hash fewer than its pages and object."""
    ids = _ids(s, lambda n: n.host in s.objects and len(n.hashes) >= 2 and not n.dev)
    return _put(s, (nid := pick(ids)), hashes=s.nodes[nid].hashes[:-1]) if ids else None


def _put_reload(s, **ch):
    if not s.reloads:
        return None
    return replace(s, reloads=(s.reloads[0].with_(**ch),) + s.reloads[1:])


def c_reload_short(s, pick):
    return _put_reload(s, tokens=s.reloads[0].tokens + (9,)) if s.reloads else None


def c_reload_empty(s, pick):
    return _put_reload(s, tokens=(), hashes=()) if s.reloads else None


def c_reload_chain(s, pick):
    if not s.reloads or len(s.reloads[0].hashes) < 2:
        return None
    h = s.reloads[0].hashes
    return _put_reload(s, hashes=h[:-1] + (h[-1] ^ 1,), key=h[-1] ^ 1)


def c_reload_key(s, pick):
    return _put_reload(s, key=s.reloads[0].key ^ 1) if s.reloads else None


def c_waiter_twice(s, pick):
    if not s.reloads or not s.reloads[0].waiters:
        return None
    return _put_reload(s, waiters=s.reloads[0].waiters + (s.reloads[0].waiters[0],))


def c_waiter_not_queued(s, pick):
    return _put_reload(s, waiters=s.reloads[0].waiters + (BIG,)) if s.reloads else None


def c_candidate_not_queued(s, pick):
    cands = sorted(s.reload_candidates.keys())
    if not cands:
        return None
    c = s.reload_candidates[pick(cands)]
    return replace(s, reload_candidates=s.reload_candidates.set(BIG, c))


def c_candidate_held(s, pick):
    """A request a reload holds (one of its waiters) marked a candidate again."""
    from kvsm.state import Candidate

    held = sorted((w, k) for k, op in enumerate(s.reloads) for w in op.waiters)
    if not held:
        return None
    w, k = pick(held)
    op = s.reloads[k]
    return replace(s, reload_candidates=s.reload_candidates.set(w, Candidate(anchor=op.anchor, tokens=op.tokens, hashes=op.hashes)))


def c_caps(s, pick):
    cfg = s.config
    if not cfg.L3 or not s.spill_queue:
        return None
    return replace(s, spill_queue=s.spill_queue + (s.spill_queue[0],) * (cfg.spill_queue_cap + 1 - len(s.spill_queue)))


def c_ondev_high(s, pick):
    ids = _ids(s)
    return _put(s, (nid := pick(ids)), ondev=s.nodes[nid].ondev + 1) if ids else None


def c_ondev_low(s, pick):
    ids = [nid for nid, n in s.nodes.items() if n.ondev]
    return _put(s, (nid := pick(sorted(ids))), ondev=s.nodes[nid].ondev - 1) if ids else None


def c_dev_index_extra(s, pick):
    return replace(s, dev_index=s.dev_index.add((-1, -1, -1)))


def c_dev_index_missing(s, pick):
    keys = list(s.dev_index)
    return replace(s, dev_index=s.dev_index.remove(pick(keys))) if keys else None


def c_host_index_missing(s, pick):
    keys = list(s.host_index)
    return replace(s, host_index=s.host_index.remove(pick(keys))) if keys else None


def c_host_index_extra(s, pick):
    return replace(s, host_index=s.host_index.add((-1, -1, -1)))


def c_backup_index_missing(s, pick):
    keys = list(s.backup_index)
    return replace(s, backup_index=s.backup_index.remove(pick(keys))) if keys else None


def c_backup_index_extra(s, pick):
    ids = [nid for nid in _ids(s) if nid not in s.backup_index]
    return replace(s, backup_index=s.backup_index.add(pick(ids))) if ids else None


def c_sums(s, pick):
    return replace(s, sums=(s.sums[0] + 1,) + s.sums[1:]) if s.sums is not None else None


def c_next_id_low(s, pick):
    ids = _ids(s)
    return replace(s, next_id=max(ids)) if ids else None


def c_clock(s, pick):
    ids = _ids(s)
    return _put(s, pick(ids), touched=s.clock + 1) if ids else None


def c_next_rid_low(s, pick):
    return replace(s, next_rid=max(s.requests.keys())) if s.requests else None


def c_pin_high(s, pick):
    ids = _ids(s)
    return _put(s, (nid := pick(ids)), pin=s.nodes[nid].pin + 1) if ids else None


def c_pin_low(s, pick):
    ids = _ids(s, lambda n: n.pin)
    return _put(s, (nid := pick(ids)), pin=s.nodes[nid].pin - 1) if ids else None


def c_spill_gathered_high(s, pick):
    """A rank that gathered a spill not in flight (with its staged copy)."""
    if not s.config.L3:
        return None
    r = pick(range(s.config.R))
    return replace(s, spill_gathered=_set_at(s.spill_gathered, r, len(s.spills) + 1),
                   spill_staged=_set_at(s.spill_staged, r, s.spill_staged[r] + ((),) * (len(s.spills) + 1 - s.spill_gathered[r])))


def c_spill_written_ungathered(s, pick):
    ranks = [r for r in range(s.config.R) if s.spill_gathered[r] > len(s.spill_done[r])]
    if not ranks:
        return None
    r = pick(ranks)
    return replace(s, spill_done=_set_at(s.spill_done, r, s.spill_done[r] + (True,) * (s.spill_gathered[r] + 1 - len(s.spill_done[r]))))


def c_staged_count(s, pick):
    if not s.config.L3:
        return None
    r = pick(range(s.config.R))
    return replace(s, spill_staged=_set_at(s.spill_staged, r, s.spill_staged[r] + ((),)))


def c_reload_done_high(s, pick):
    if not s.config.L3:
        return None
    r = pick(range(s.config.R))
    return replace(s, reload_done=_set_at(s.reload_done, r, (True,) * (len(s.reloads) + 1)))


def c_disk_count_high(s, pick):
    if not s.config.L3:
        return None
    r = pick(range(s.config.R))
    return replace(s, l3_used=_set_at(s.l3_used, r, s.l3_used[r] + 1))


def c_disk_count_low(s, pick):
    ranks = [r for r in range(s.config.R) if s.l3_used[r]]
    return replace(s, l3_used=_set_at(s.l3_used, (r := pick(ranks)), s.l3_used[r] - 1)) if ranks else None


def c_disk_over_cap(s, pick):
    """A rank's disk holding more entries than it has room for (counted right)."""
    if not s.config.L3:
        return None
    r = pick(range(s.config.R))
    extra = s.config.L3 + 1 - s.l3_used[r]
    l3 = s.l3
    for k in range(extra):
        l3 = l3.set((r, BIG + k), BIG + k)
    return replace(s, l3=l3, l3_used=_set_at(s.l3_used, r, s.l3_used[r] + extra))


def c_load_done_high(s, pick):
    r = pick(range(s.config.R))
    return replace(s, load_done=_set_at(s.load_done, r, len(s.loads) + 1))


def c_load_done_low(s, pick):
    return replace(s, load_done=_set_at(s.load_done, pick(range(s.config.R)), -1))


def c_oldest_load_done(s, pick):
    if not s.loads:
        return None
    return replace(s, load_done=tuple(max(1, d) for d in s.load_done))


def c_round_unknown(s, pick):
    return replace(s, commit_round=_set_at(s.commit_round, pick(range(s.config.R)), 7)) if s.writes else None


def c_round_mixed(s, pick):
    if not s.writes or s.config.R < 2:
        return None
    return replace(s, commit_round=(Round.IN, Round.SKIPPED) + tuple(s.commit_round[2:]))


def c_round_open_idle(s, pick):
    if s.writes:
        return None
    return replace(s, commit_round=_set_at(s.commit_round, pick(range(s.config.R)), Round.IN))


def c_diverged(s, pick):
    return replace(s, diverged=("Insert", (pick(range(1, s.config.R)),))) if s.config.R > 1 else None


def c_halted(s, pick):
    return replace(s, halted="LoadBack")


def c_child_other_namespace(s, pick):
    """A node below a non-root parent moved to namespace 1, consistently (its parent's entry
    for it, its hashes and what its pages hold are namespace 1's): only its namespace is
    wrong, its parent's being 0."""
    ids = _ids(s, lambda n: n.parent != ROOT_ID)
    if not ids:
        return None
    n = s.nodes[pick(ids)]
    p = s.nodes[n.parent]
    hashes = prefixes.chain_in(1, prefixes.rebase(p.last_content, p.ns, 1), n.key)
    nodes = s.nodes.set(p.id, p.with_(children=p.children.delete(n.child_key).set(prefixes.child_key(1, n.key[0]), n.id)))
    nodes = nodes.set(n.id, n.with_(ns=1, hashes=hashes))
    dev = s.dev_content
    for i, page in enumerate(n.dev):
        if page in dev:
            dev = dev.set(page, hashes[i])
    host = s.host_content
    obj = s.objects.get(n.host) if n.host is not None else None
    if obj is not None:
        for i in range(min(obj.length, len(hashes))):
            for region in range(len(s.config.payloads)):
                k = region * s.config.L2 + obj.page(i)
                if k in host:
                    host = host.set(k, hashes[i])
    return replace(s, nodes=nodes, dev_content=dev, host_content=host)


def c_request_other_namespace(s, pick):
    rids = _requests(s, lambda q: q.phase != QUEUED and q.node != ROOT_ID)
    return _put_req(s, pick(rids), ns=1) if rids else None


def c_reload_read_other(s, pick):
    """A page a reload has read holding another prefix's KV (another namespace's, as a disk
    key over the tokens alone would bring)."""
    for op in s.reloads:
        obj = s.objects.get(op.obj)
        read = [i for i in range(obj.length) if obj is not None and s.host_content.get(obj.page(i)) is not None] if obj else []
        if read:
            i = pick(read)
            other = prefixes.chain_in(1, prefixes.ROOT, op.tokens[: i + 1])[-1]
            host = s.host_content
            for region in range(len(s.config.payloads)):
                host = host.set(region * s.config.L2 + obj.page(i), other)
            return replace(s, host_content=host)
    return None


@dataclass(frozen=True)
class Row:
    invariant: str  # as INVARIANTS names it
    clause: str
    direction: str
    corrupt: Callable[[ClusterState, Callable], ClusterState | None]
    derived: bool = True  # recompute the indexes after the corruption (False: the row breaks them)
    step: bool = True  # the step form sees it (False: the digest sums, a sum over the whole state)


CORRUPTIONS = (
    Row("1 Tree", "node 0 is an empty root", "root has a key", c_root_key),
    Row("1 Tree", "node 0 is an empty root", "root backed on L2", c_root_host),
    Row("1 Tree", "a node is stored under its id", "id differs", c_stored_id),
    Row("1 Tree", "a node has a key", "empty key", c_empty_key),
    Row("1 Tree", "a node is its parent's child", "parent missing", c_missing_parent),
    Row("1 Tree", "a node is its parent's child", "parent has no entry for it", c_not_child),
    Row("1 Tree", "a child entry names its child", "names no node", c_child_missing),
    Row("1 Tree", "a child entry names its child", "names another parent's node", c_child_other),
    Row("1 Tree", "every node reaches the root", "cycle", c_cycle),
    Row("1 Tree", "a husk is on no tier, with children", "a leaf under GONE", c_gone_leaf),
    Row("2 Residency", "a device page per page or none", "too few", c_dev_short),
    Row("2 Residency", "a device page per page or none", "too many", c_dev_long),
    Row("2 Residency", "off L1 is backed", "no object", c_unbacked),
    Row("2 Residency", "off L1 is backed", "object missing", c_host_missing),
    Row("2 Residency", "off L1 is backed", "object uncommitted", c_uncommitted),
    Row("2 Residency", "on L1 has its parent on L1", "parent evicted", c_orphan),
    Row("3 Locks", "a lock counts its holders", "too high", c_lock_high),
    Row("3 Locks", "a lock counts its holders", "too low", c_lock_low),
    Row("3 Locks", "a lock counts its holders", "root locked", c_root_lock),
    Row("3 Locks", "a request's phase is known", "unknown", c_phase),
    Row("3 Locks", "a queued request holds nothing", "holds a node", c_queued_lock),
    Row("3 Locks", "a request locks a node", "node missing", c_request_missing_node),
    Row("3 Locks", "a load-back locks a node", "node missing", c_load_missing_node),
    Row("3 Locks", "a locked node is on L1", "off L1", c_locked_off_l1),
    Row("3 Locks", "a matched request's node is on L1", "off L1", c_matched_off_l1),
    Row("4 Pending", "the writes are the pending and prepared backups", "a write without its reservation", c_write_unreserved),
    Row("4 Pending", "the writes are the pending and prepared backups", "a pending backup without its write", c_pending_unwritten),
    Row("4 Pending", "the writes are the pending and prepared backups", "a write twice", c_write_twice),
    Row("4 Pending", "a pending node exists", "missing", c_pending_missing_node),
    Row("4 Pending", "a pending node is locked", "unlocked", c_pending_unlocked),
    Row("4 Pending", "a pending node is on L1", "evicted", c_pending_off_l1),
    Row("4 Pending", "a pending node is not backed", "backed", c_pending_backed),
    # ("a pending node is not evictable" cannot fail alone: under the contract a pending
    # node is held on L1, `kvsm.victims.held_on_l1`; a row breaking it is "unlocked")
    Row("4 Pending", "a pending object is uncommitted of its length", "missing", c_pending_object_missing),
    Row("4 Pending", "a pending object is uncommitted of its length", "committed", c_pending_object_committed),
    Row("4 Pending", "a pending object is uncommitted of its length", "longer", c_pending_object_long),
    Row("4 Pending", "a pending object is uncommitted of its length", "shorter", c_pending_object_short),
    Row("4 Pending", "no rank finished more writes than there are", "above", c_write_done_high),
    Row("4 Pending", "no rank finished more writes than there are", "negative", c_write_done_low),
    Row("4 Pending", "acks appended are between the finished writes and the writes", "above", c_acked_high),
    Row("4 Pending", "acks appended are between the finished writes and the writes", "below", c_acked_low),
    Row("4 Pending", "a prepared backup is a matched request's", "not matched", c_prepared_unmatched),
    Row("4 Pending", "a prepared backup has an id of its own", "a node's id", c_prepared_taken_id),
    Row("4 Pending", "a prepared backup has an uncommitted object of its own", "another's", c_prepared_no_object),
    Row("4 Pending", "no rank finished a prepared backup's write", "finished", c_prepared_written),
    Row("5 DevicePages", "a page is held once", "node and free list", c_dev_node_and_free),
    Row("5 DevicePages", "a page is held once", "node and request", c_dev_node_and_request),
    Row("5 DevicePages", "a page is held once", "two nodes", c_dev_two_nodes),
    Row("5 DevicePages", "a page is held once", "by nobody (leak)", c_dev_leak),
    Row("5 DevicePages", "a page is in range", "above (request)", c_dev_out_of_range_high),
    Row("5 DevicePages", "a page is in range", "negative (request)", c_dev_out_of_range_low),
    Row("5 DevicePages", "a page is in range", "above (node)", c_node_page_out_of_range),
    Row("5 DevicePages", "a free page is in its lane's list", "another lane", c_free_wrong_lane),
    Row("5 DevicePages", "a load-back copies into its node's page", "a free page", c_load_target),
    Row("5 DevicePages", "a load-back copies into its node's page", "from the wrong host page", c_load_copy),
    Row("6 HostPages", "objects and free runs tile the pool", "page free and used", c_host_free_and_used),
    Row("6 HostPages", "objects and free runs tile the pool", "page in two objects", c_host_twice),
    Row("6 HostPages", "objects and free runs tile the pool", "page in neither (leak)", c_host_leak),
    Row("6 HostPages", "free runs are in range", "past the end", c_host_run_outside),
    Row("6 HostPages", "free runs are in range", "before the start", c_host_run_negative),
    Row("6 HostPages", "free runs are in range", "empty", c_host_run_empty),
    Row("6 HostPages", "free runs do not touch", "touch", c_host_runs_touch),
    Row("6 HostPages", "a committed object belongs to its node", "no node", c_committed_no_node),
    Row("6 HostPages", "a committed object belongs to its node", "owner names another node", c_object_owner),
    Row("6 HostPages", "a committed object has its node's length", "longer", c_committed_length_long),
    Row("6 HostPages", "a committed object has its node's length", "shorter", c_committed_length_short),
    Row("6 HostPages", "an uncommitted object belongs to a pending backup", "the backup names another", c_pending_object_other),
    Row("6 HostPages", "an uncommitted object belongs to a backup or reload", "nobody's", c_object_of_nobody),
    Row("6 HostPages", "a reload object has its reload's length", "longer", c_reload_object_length),
    Row("6 HostPages", "a carried host hit names a node with its L2 copy", "without", c_stale_hit),
    Row("7 Content", "a node's hashes are its prefix's", "wrong", c_hashes),
    Row("7 Content", "a device page holds its prefix's KV", "another's", c_dev_content_wrong),
    Row("7 Content", "a device page holds its prefix's KV", "nothing", c_dev_content_missing),
    Row("7 Content", "a page a load-back copies into holds nothing", "holds content", c_copying_holds),
    Row("7 Content", "a host page holds its prefix's KV", "another's", c_host_content_wrong),
    Row("7 Content", "a host page holds its prefix's KV", "nothing", c_host_content_missing),
    Row("7 Content", "a free device page holds nothing", "holds content", c_free_holds),
    Row("7 Content", "a disk entry holds what its hash names", "another's", c_disk_wrong),
    Row("7 Content", "a staged page holds what its hash names", "another's", c_staged_wrong),
    Row("8 Durable", "a durable node's pages are on their disks", "flag on a node not on disk", c_durable_flag),
    Row("8 Durable", "a durable node's pages are on their disks", "an entry gone", c_durable_entry_gone),
    Row("9 Reload", "a backed node, its object and hashes have one length", "hashes fewer", c_node_hashes_short),
    Row("9 Reload", "a backed node, its object and hashes have one length", "object longer", c_committed_length_long),
    Row("9 Reload", "a backed node, its object and hashes have one length", "object shorter", c_committed_length_short),
    Row("9 Reload", "a reload carries a hash per page", "more pages", c_reload_short),
    Row("9 Reload", "a reload carries a hash per page", "none", c_reload_empty),
    Row("9 Reload", "a reload's hashes chain from its first", "broken chain", c_reload_chain),
    Row("9 Reload", "a reload is keyed by its last hash", "another key", c_reload_key),
    Row("9 Reload", "waiters are distinct queued requests", "twice", c_waiter_twice),
    Row("9 Reload", "waiters are distinct queued requests", "not a request", c_waiter_not_queued),
    Row("9 Reload", "a candidate is a queued unheld request", "not a request", c_candidate_not_queued),
    Row("9 Reload", "a candidate is a queued unheld request", "held by a reload", c_candidate_held),
    Row("9 Reload", "no more L3 operations than the caps", "spill queue over", c_caps),
    Row("10 Counts", "children on L1 counted", "too many", c_ondev_high),
    Row("10 Counts", "children on L1 counted", "too few", c_ondev_low),
    Row("10 Counts", "the device victim index", "extra key", c_dev_index_extra, derived=False),
    Row("10 Counts", "the device victim index", "key missing", c_dev_index_missing, derived=False),
    Row("10 Counts", "the host victim index", "extra key", c_host_index_extra, derived=False),
    Row("10 Counts", "the host victim index", "key missing", c_host_index_missing, derived=False),
    Row("10 Counts", "the backup index", "extra node", c_backup_index_extra, derived=False),
    Row("10 Counts", "the backup index", "node missing", c_backup_index_missing, derived=False),
    Row("10 Counts", "the digest sums", "differ", c_sums, derived=False, step=False),
    Row("10 Counts", "next_id above every node id", "not above", c_next_id_low),
    Row("10 Counts", "the clock above every stamp", "stamp after it", c_clock),
    Row("10 Counts", "next_rid above every request id", "not above", c_next_rid_low),
    Row("10 Counts", "pins counted", "too many", c_pin_high),
    Row("10 Counts", "pins counted", "too few", c_pin_low),
    Row("10 Counts", "spill progress in range", "gathered beyond the spills", c_spill_gathered_high),
    Row("10 Counts", "spill progress in range", "written beyond gathered", c_spill_written_ungathered),
    Row("10 Counts", "staged spills are gathered less written", "one more", c_staged_count),
    Row("10 Counts", "reloads read are in flight", "more", c_reload_done_high),
    Row("10 Counts", "a disk's count of entries", "too high", c_disk_count_high),
    Row("10 Counts", "a disk's count of entries", "too low", c_disk_count_low),
    Row("10 Counts", "a disk holds at most L3 entries", "over", c_disk_over_cap),
    Row("10 Counts", "loads done in range", "above", c_load_done_high),
    Row("10 Counts", "loads done in range", "negative", c_load_done_low),
    Row("10 Counts", "the oldest load-back leaves once done", "done on every rank", c_oldest_load_done),
    # ("a counter never goes back" is a rule over a step only: a whole state has no past)
    Row("12 Collectives", "a rank's round is a known position", "unknown", c_round_unknown),
    Row("12 Collectives", "no rank returns early from a call another entered", "both", c_round_mixed),
    Row("12 Collectives", "a round is open only with a backup in flight", "open with none", c_round_open_idle),
    Row("13 Agreement", "no rank decided otherwise than rank 0", "diverged", c_diverged),
    Row("14 Running", "the reference never stops", "halted", c_halted),
    Row("15 Isolation", "a node is of its parent's namespace", "another", c_child_other_namespace),
    Row("15 Isolation", "a held request's node is of its namespace", "another", c_request_other_namespace),
    Row("15 Isolation", "a page a reload read holds its key's KV in its namespace", "another's", c_reload_read_other),
)


# ---- the three forms ---------------------------------------------------------------------------


def _numbers(found: list[str]) -> set[int]:
    return {int(v.split(" ", 1)[0]) for v in found if v != DIGEST_SUMS}


def _forms(B: ClusterState, A: ClusterState) -> tuple[list[str], list[str], bool, bool]:
    """What each form says of the step from `B` (where every invariant holds) to `A`: the
    whole-state form's messages, the step form's, and the fast form's verdict with
    nothing remembered and after a check of `B` (as the checker calls it along a run)."""
    whole = violations(A)
    step = local_violations(B, A, _written(B, A), Shadow(B), prefixes.chain)
    warm = Cache()
    assert holds(B, warm)
    return whole, step, holds(A), holds(A, warm)


def _broken(A: ClusterState, row: Row, pick: Callable) -> ClusterState | None:
    bad = row.corrupt(A, pick)
    return None if bad is None else _settled(bad, row.derived, row.step)


def _first(seq):
    return list(seq)[0]


# ---- the tests -----------------------------------------------------------------------------------


def test_every_invariant_in_the_registry_has_rows_in_the_table():
    """Every invariant of a state (`STATE_INVARIANTS`) has rows; 11 Ownership, a rule over
    a step's effects only, has its own test below. A new invariant fails this test until
    the table has its rows."""
    named = {r.invariant for r in CORRUPTIONS}
    assert named == set(STATE_INVARIANTS)
    assert set(INVARIANTS) - named == {"11 Ownership"}
    rows = [(r.invariant, r.clause, r.direction) for r in CORRUPTIONS]
    assert len(rows) == len(set(rows))  # (each row once)


@pytest.mark.parametrize("row", CORRUPTIONS, ids=lambda r: f"{r.invariant}|{r.clause}|{r.direction}")
def test_each_row_breaks_its_invariant_and_every_form_refuses_it(row):
    """The first base step whose result the row can corrupt: all three forms refuse the
    broken state, the whole-state and step forms name the row's invariant, and they name
    the same invariants."""
    i = int(row.invariant.split()[0])
    for B, A in steps():
        for before, after in ((B, A), (A, A)):  # the corruption after the step, or alone
            bad = _broken(after, row, _first)
            if bad is None:
                continue
            whole, step, fast, warm = _forms(before, bad)
            assert not fast and not warm, (row, whole)
            assert i in _numbers(whole) or (not row.step and DIGEST_SUMS in whole), (row, whole)
            if row.step:
                assert i in _numbers(step), (row, whole, step)
                assert _numbers(whole) == _numbers(step), (row, whole, step)
            return
    pytest.fail(f"no base state admits {row}")


def test_the_good_steps_pass_every_form():
    for B, A in steps():
        whole, step, fast, warm = _forms(B, A)
        assert whole == [] and step == [] and fast and warm


@settings(FORMS)
@given(st.data())
def test_the_three_forms_agree_on_generated_broken_states(data):
    base = steps()
    B, A = base[data.draw(st.integers(0, len(base) - 1), label="step")]
    row = data.draw(st.sampled_from(CORRUPTIONS), label="row")
    if data.draw(st.booleans(), label="corruption alone"):
        B = A  # (a step that wrote nothing but the corruption)

    def pick(seq):
        seq = list(seq)
        return seq[data.draw(st.integers(0, len(seq) - 1))]

    bad = _broken(A, row, pick)
    assume(bad is not None)
    event(row.invariant)
    whole, step, fast, warm = _forms(B, bad)
    assert fast == warm == (whole == []), (row, whole)
    if row.step:
        assert _numbers(whole) == _numbers(step), (row, whole, step)


@settings(FORMS, max_examples=FORMS.max_examples // 4)
@given(st.data())
def test_the_three_forms_agree_on_two_corruptions_at_once(data):
    base = steps()
    B, A = base[data.draw(st.integers(0, len(base) - 1), label="step")]
    rows = [r for r in CORRUPTIONS if r.derived and r.step]
    first, second = data.draw(st.sampled_from(rows)), data.draw(st.sampled_from(rows))

    def pick(seq):
        seq = list(seq)
        return seq[data.draw(st.integers(0, len(seq) - 1))]

    mid = first.corrupt(A, pick)
    assume(mid is not None)
    try:  # (the second corruption may find no footing on what the first broke)
        bad = second.corrupt(mid, pick)
    except (KeyError, IndexError, ValueError, StopIteration):
        bad = None
    assume(bad is not None)
    bad = _settled(bad)
    whole, step, fast, warm = _forms(B, bad)
    assert fast == warm == (whole == []), (first, second, whole)
    assert _numbers(whole) == _numbers(step), (first, second, whole, step)


def test_ownership_refuses_an_effect_of_another_rank_in_each_direction():
    """11 Ownership has its step form only (`step_violations`, over a step's effects): a
    store of another lane's page, a per-rank step doing another rank's work, a rank out
    of range, a gather of another rank's pages; no whole-state form names it."""
    B, A = next((b, a) for b, a in steps() if a.config.R == 2)
    cases = {
        "store of another lane": (None, (fx.Store(rank=1, page=0, host_page=0),)),
        "another rank's work": (0, (fx.Fill(page=1, content=5),)),
        "rank out of range": (None, (fx.Store(rank=2, page=0, host_page=0),)),
        "gather of another's page": (1, (fx.SpillGather(rank=1, base=0, pages=((0, 5),)),)),
        "read into another's page": (0, (fx.ReloadRead(rank=0, base=0, pages=((1, 5),), ok=True),)),
    }
    for what, (rank, effects) in cases.items():
        s = replace(A, effects=effects)
        assert any(v.startswith("11 Ownership: ") for v in step_violations(rank, s)), what
        assert not any(v.startswith("11 ") for v in violations(s)), what
    assert step_violations(None, replace(A, effects=(fx.Store(rank=0, page=0, host_page=0),))) == []


def _refused(row: Row) -> bool:
    """Whether the first base state the row breaks is refused by all three forms naming
    the row's invariant (what the table test asserts)."""
    i = int(row.invariant.split()[0])
    for B, A in steps():
        bad = _broken(A, row, _first)
        if bad is not None:
            whole, step, fast, warm = _forms(A, bad)
            return not fast and not warm and i in _numbers(whole) and i in _numbers(step)
    raise AssertionError(f"no base state admits {row}")


@pytest.mark.parametrize("form", ["rule", "step", "fast"])
def test_a_weakened_check_of_one_invariant_is_caught_by_its_rows(form, monkeypatch):
    """The blind spot of correct runs: a check made to accept what it should refuse (here
    invariant 12's: the rule the whole and step forms share, the step form's call of it,
    the fast form) passes every correct run, but not the table, whose rows of that
    invariant are then no longer refused by all three forms."""
    from kvsm.invariants import collectives, fast, step

    rows = [r for r in CORRUPTIONS if r.invariant == "12 Collectives"]
    assert all(_refused(r) for r in rows)
    if form == "rule":
        monkeypatch.setattr(collectives, "collectives_violations", lambda rounds, writes: [])
    elif form == "step":
        monkeypatch.setattr(step.collectives, "whole", lambda d: None)
    else:
        monkeypatch.setattr(fast.collectives, "holds", lambda s: True)
    assert not any(_refused(r) for r in rows)
