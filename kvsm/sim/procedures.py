"""The replicated procedures: each decides the transitions of one scheduler step from one
rank's view only, so that every rank, run on its own replica, decides the same
(`Cluster.run` runs each on the log's state and on every replica)."""

from __future__ import annotations

from ..config import RANK_VIEW_BUGS
from ..state import ReloadOp, Rejected, SpillOp
from ..transitions import Transition
from ..transitions.registry import cluster_view
from ..transitions.evict import carried_run, evict_device_candidates, host_run
from ..transitions.prune import stale_cut
from ..transitions.reload import reload_target
from ..transitions.reserve import insert_triggers, parent_allows, prepare_fits, prepare_length, reserve_fits
from ..victims import evict_write_back
from .cluster import View
from .metrics import depth as _depth
from .tenants import arrive_ns

T = Transition.make


def arrive(v: View, rid: int, tokens: tuple[int, ...], out_pages: int, l3: bool, ns: int = 0) -> None:
    """Arrive (in namespace `ns`: `kvsm.sim.tenants.arrive_ns`); with L3, mark the request
    for an L3 lookup if its key misses the tree below a whole node (the reference's lookup
    on entry to the waiting queue; the model allows one per request)."""
    s = v.apply(T("Arrive", rid=rid, tokens=tokens, out_pages=out_pages, **arrive_ns(ns)))
    if l3 and reload_target(s, rid) is not None:
        v.apply(T("ReloadMark", rid=rid))


def admit(v: View, rid: int, tokens: tuple[int, ...], out_pages: int, l2: bool, ns: int = 0) -> tuple[int, int, bool]:
    """Arrive and match at once (no L3 lookup to wait for)."""
    arrive(v, rid, tokens, out_pages, False, ns)
    return match(v, rid, l2)


def match(v: View, rid: int, l2: bool) -> tuple[int, int, bool]:
    """Match; load the host hit back when it is worth it (at least the config's
    `load_back_threshold` tokens). Returns (L1 hit pages, pages loaded back, whether a
    worthwhile load-back was refused for lack of device room)."""
    prune(v, rid)
    s = v.apply(T("Match", rid=rid))
    hit_l1 = _depth(s, s.requests[rid].node)
    if l2 and not s.config.carry_host_hit:
        pages, refused = load_back(v, rid)
        return hit_l1, pages, refused
    return hit_l1, 0, False


def load_back(v: View, rid: int) -> tuple[int, bool]:
    """Load request `rid`'s host hit back when it is worth it (at least the config's
    `load_back_threshold` tokens): right after its match, or under carry_host_hit the
    hit its match recorded, after the allocations the request makes in between (its
    prepared backup: the order of a lookup, its allocation, then the load). Returns
    the pages loaded back and whether a worthwhile load-back was refused."""
    s = v.state
    req = s.requests[rid]
    if not s.config.carry_host_hit:
        pages = host_run(s, rid)[1]
    elif req.hit in s.nodes or not req.hit:
        pages = carried_run(s, rid)[1]
    else:
        pages = req.hit_pages  # a hit an unpinned match let go: the load-back refuses it
    cfg = s.config
    if pages and pages * cfg.P >= cfg.load_back_threshold:
        try:
            v.apply(T("LoadBack", rid=rid))
        except Rejected:
            return 0, True
        return pages, False
    return 0, False


def insert(v: View, rid: int, backup: bool) -> tuple[bool, tuple[int, ...]]:
    """The forward pass is done: Insert (evicting as needed). With `backup`
    (write_through), Reserve every node of the request's path that became eligible,
    root to leaf, as the reference's insert does on each hit; a Reserve that cannot
    find host room still evicts the host leaves of its snapshot (`fits = false`, the
    reference's evict-to-fit) and is tried again on the node's next hit. Returns
    whether the request was cached and the nodes whose backup started. Under
    `backup_trigger = "insert"` the Insert takes those backups itself."""
    prune(v, rid)
    before = v.state.writes
    try:
        s = v.apply(T("Insert", rid=rid))
    except Rejected:
        if not evict_write_back(v.state.config) or not _evict_to_insert(v, rid):
            return False, ()
        s = v.state
    if not backup:
        return True, ()
    if insert_triggers(s.config):
        # the Insert took them itself (backup_trigger = "insert"): the writes it added
        old = set(before)
        return True, tuple(n for n in s.writes if n not in old)
    reserved = []
    for nid in reversed(s.path_to_root(s.requests[rid].node)):
        if nid in v.state.backup_index and parent_allows(v.state, nid):
            if try_reserve(v, nid):
                reserved.append(nid)
    return True, tuple(reserved)


def _evict_to_insert(v: View, rid: int) -> bool:
    """Under evict_write_back, the reference's `evict()` before it allocates the pages of
    an insert that does not fit: `EvictDevice` of the first victim (an unbacked one
    written back in the step), then the insert again, until it fits; whether it was
    inserted. It stops where no victim is left or the reference's assert fires
    (`halted`: the check reports invariant 14)."""
    while v.state.halted is None:
        first = next(iter(evict_device_candidates(v.state)), None)
        if first is None:
            return False
        v.apply(first)
        try:
            v.apply(T("Insert", rid=rid))
            return True
        except Rejected:
            continue
    return False


def _view(v: View) -> int | None:
    """The view a deciding step's outcome is decided from: a rank's replica its own
    (under a defect that lets ranks decide from their own views), the log's state the
    cluster's."""
    cfg = v.state.config
    return v.rank if v.rank is not None and cfg.bug in RANK_VIEW_BUGS else cluster_view(cfg)


def prune(v: View, rid: int) -> None:
    """Under `stale_prune`, the reference's stale-tail prune where request `rid`'s key
    leaves a node inside a page (`stale_cut`), before its match or insert meets the
    node. Where the reference's guard refuses (the reference defers the match or the
    insert) the simulator goes on, and the match or insert splits at the boundary."""
    if v.state.config.stale_prune == "off":
        return
    cut = stale_cut(v.state, rid)
    if cut is not None:
        try:
            v.apply(T("PruneStaleTail", node=cut[0], at=cut[1]))
        except Rejected:
            pass


def try_reserve(v: View, nid: int) -> bool:
    """Reserve eligible node `nid`; whether it fit. One that does not fit is a step
    (`fits = false`) only when it has host leaves to evict."""
    fits = reserve_fits(v.state, nid, _view(v))
    if fits or v.state.host_index:
        v.apply(T("Reserve", node=nid, fits=fits))
    return fits


def prepare(v: View, rid: int) -> int | None:
    """Before the forward pass (the reference's `prepare_write_backups_for_reqs`): prepare
    the write-through backup of the pages request `rid`'s insert will add, when there are
    any. Returns the node id of the prepared backup, or None (none made, or it did not
    fit: its id is spent and its evictions stay)."""
    s = v.state
    if rid in s.prepared or prepare_length(s, rid) <= 0:
        return None
    s = v.apply(T("Prepare", rid=rid, fits=prepare_fits(s, rid, _view(v))))
    return s.prepared[rid]


def write_back(v: View, rid: int) -> tuple[int, ...]:
    """Under write_back an unbacked leaf must reach L2 before it can leave L1: start
    backups of write-back candidates, in victim order, until they cover what request
    `rid` still lacks (an estimate; a retry after the commit asks again)."""
    s = v.state
    cfg = s.config
    req = s.requests[rid]
    need = len(req.tokens) - _depth(s, req.node) + req.out_pages
    free = sum(len(lane) for lane in s.dev_free)
    evictable = sum(len(s.nodes[k[2]].dev) for k in s.dev_index)
    short = max(1, need - free - evictable)
    slru = cfg.eviction == "slru"
    order = sorted((slru and n.hits >= 2, n.touched, n.id) for n in (s.nodes[i] for i in s.backup_index))
    reserved = []
    got = 0
    for _, _, nid in order:
        if got >= short:
            break
        if not try_reserve(v, nid):
            break  # no host room even after evicting every host leaf
        reserved.append(nid)
        got += len(v.state.nodes[nid].key)
    return tuple(reserved)


def finish(v: View, rid: int) -> None:
    v.apply(T("Finish", rid=rid))


def abort(v: View, rid: int) -> None:
    v.apply(T("Abort", rid=rid))


def commit(v: View) -> None:
    """The commit collective completes (every rank has entered its call): the MIN."""
    v.apply(T("Commit"))


def rollback(v: View, nodes: tuple[int, ...]) -> None:
    for nid in nodes:
        v.apply(T("Rollback", node=nid))


def l3_drain(v: View) -> tuple[tuple[SpillOp, ...], tuple[ReloadOp, ...]]:
    """The L3 part of a tick, after the collective (the reference's L3 queue drain and
    spill maintainer): `SpillAck` of what every rank gathered or wrote, `ReloadAdmit` of
    each reload every rank has read (head first), `ReloadReserve` of every marked
    candidate (in request order), one `ReloadExpire` while a reload holds a request,
    then `SpillSubmit` while the queue is not empty and under the inflight cap.
    Returns the spills and the reloads it started."""
    s = v.state
    if s.spills:
        gathered = min(s.spill_gathered)
        if min(len(x) for x in s.spill_done) or any(op.pinned for op in s.spills[:gathered]):
            s = v.apply(T("SpillAck"))
    while s.reloads and min(len(x) for x in s.reload_done):
        s = v.apply(T("ReloadAdmit"))
    kept = len(s.reloads)
    for rid in sorted(s.reload_candidates.keys()):
        s = v.apply(T("ReloadReserve", rid=rid))
    reloads = s.reloads[kept:]
    if any(op.waiters for op in s.reloads):
        s = v.apply(T("ReloadExpire"))
    spills: list[SpillOp] = []
    while s.spill_queue and len(s.spills) < s.config.spill_inflight:
        k = len(s.spills)
        s = v.apply(T("SpillSubmit"))  # drops stale entries; submits at most one
        spills.extend(s.spills[k:])
    return tuple(spills), reloads
