"""The spill family: `SpillSubmit`, `SpillGathered(r)`, `SpillDone(r, ok)`, `SpillAck`.

L3 is each rank's disk, addressed by page hash. Committed L2 objects are spilled
proactively: `Commit` (and a split of a backed node, for its new upper object) appends
the object to `spill_queue`, dropped past `spill_queue_cap`. `SpillSubmit` takes the
next still-valid entry and pins the object; each rank gathers the pages it owns
(object-local index `i mod R`) out of the shared slab into a staging copy
(`SpillGathered`), then writes them to its disk (`SpillDone`, ok or not). `SpillAck` is
the agreement: a MIN over ranks releases the pins of the ops every rank gathered, and a
MIN plus an AND of the ok bits marks durable the ops every rank wrote ok.

Under `own_disk_durable = "reference"` `SpillSubmit` also takes the reference
maintainer's shortcut: an entry whose pages the deciding rank's own disk already holds
(every page it owns of the node) is marked durable and dropped, without a spill. That
is a replicated decision taken from a rank-local fact, with no MIN: each rank decides
from its own disk, the state follows rank 0, and a rank that decides otherwise (it
pins and submits what rank 0 marked durable, or the reverse) is recorded in
`diverged` (invariant 13). Under `own_disk_durable = "shared"` the shortcut reads a
shared index instead (a page counts as held when any rank's disk holds its hash): every
rank reads the same answer, so the decision is replicated (`shared_index_holds`).
"""

from __future__ import annotations

from typing import Iterable

from .. import content
from ..config import Config
from ..state import ClusterState, Rejected, SpillOp, lane_of
from ..tx import Tx
from .transition import Transition
from .registry import Spec, rank_of, register


def l3_keys(cfg: Config, ns: int, hashes: tuple[int, ...]) -> tuple[int, ...]:
    """The L3 keys of pages of namespace `ns` whose content identities are `hashes`: the
    identities themselves, or under `l3_key = "tokens"` (the reference) their token chain,
    the same in every namespace (`kvsm.content.tokens_key`)."""
    return content.l3_keys(cfg.l3_by_tokens, ns, hashes)


def l3_contents(cfg: Config, ns: int, keys: tuple[int, ...]) -> tuple[int, ...]:
    """The content identities of namespace `ns`'s pages whose L3 keys are `keys`."""
    return content.l3_contents(cfg.l3_by_tokens, ns, keys)


def _spillable(tx: Tx, nid: int) -> bool:
    n = tx.nodes.get(nid)
    if n is None or n.host != nid or n.durable or n.pin:
        return False
    obj = tx.objects.get(nid)
    return obj is not None and obj.committed


def need_l3(s: ClusterState) -> None:
    """The L3 families are rejected as a whole on a config without L3."""
    if not s.config.L3:
        raise Rejected("the config has no L3 tier (L3 = 0)")


def spill_base(s: ClusterState | Tx, op: SpillOp) -> int:
    """The host page where the spilled run starts: fixed at submit, as the reference
    builds each rank's (slab page, hash) list then. The node may be split meanwhile (its
    lower part keeps the object key and the run's end, and stays pinned until every rank
    has gathered), so the run starts `len(op.hashes)` pages before the object's end."""
    obj = s.objects[op.obj]
    return obj.base + obj.length - len(op.hashes)


def own_disk_holds(s: ClusterState, r: int, hashes: tuple[int, ...]) -> bool:
    """Whether rank r's disk holds every page it owns (object-local index `i mod R`) of a
    node with these page hashes: the reference's `exists_prefix` over the whole node, as
    rank r reads it (a node of fewer than R pages may have none on rank r)."""
    R = s.config.R
    return all((r, h) in s.l3 for i, h in enumerate(hashes) if lane_of(i, R) == r)


def shared_index_holds(s: ClusterState, hashes: tuple[int, ...]) -> bool:
    """Whether every page of a node with these page hashes is on some rank's disk, as a
    shared index of the disks' contents answers `exists_prefix` (the same on every
    rank), whichever rank owns the page now."""
    l3, ranks = s.l3, range(s.config.R)
    return all(any((q, h) in l3 for q in ranks) for h in hashes)


def _shortcut(s: ClusterState, view: int | None, hashes: tuple[int, ...]) -> bool:
    """Whether the maintainer's shortcut marks a node with these hashes durable, as rank
    `view` decides (None: the replicated decision, which takes the shortcut only from
    the shared index)."""
    knob = s.config.own_disk_durable
    if knob == "shared":
        return shared_index_holds(s, hashes)
    return knob == "reference" and view is not None and own_disk_holds(s, view, hashes)


def spill_submit(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """Drop the queue's head entries that are no longer spillable and submit the first
    spillable one; under `own_disk_durable = "reference"`, rank `view` marks durable
    (and drops) the spillable entries whose pages its own disk holds."""
    need_l3(s)
    if not s.spill_queue:
        raise Rejected("the spill queue is empty")
    if len(s.spills) >= s.config.spill_inflight:
        raise Rejected(f"{len(s.spills)} spills are in flight (cap {s.config.spill_inflight})")
    tx = Tx(s)
    # entries that are no longer spillable (evicted, already durable, already being
    # spilled) are dropped; the first spillable one is submitted
    while tx.spill_queue:
        nid, tx.spill_queue = tx.spill_queue[0], tx.spill_queue[1:]
        if _spillable(tx, nid):
            n = tx.node(nid)
            keys = l3_keys(s.config, n.ns, n.hashes)
            if s.config.own_disk_durable != "fixed" and _shortcut(s, view, keys):
                tx.put(n.with_(durable=True))
                continue
            tx.put(n.with_(pin=n.pin + 1))
            tx.spills = tx.spills + (SpillOp(nid, nid, keys, True),)
            break
    return tx.commit()


def spill_submit_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3 and s.spill_queue and len(s.spills) < s.config.spill_inflight:
        yield Transition.make("SpillSubmit")


def spill_gathered(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    r = rank_of(s, t)
    k = s.spill_gathered[r]
    if k >= len(s.spills):
        raise Rejected(f"rank {r} has gathered all {len(s.spills)} spills in flight")
    op = s.spills[k]
    tx = Tx(s)
    tx.gather_spill(r, spill_base(s, op), op.hashes)
    tx.spill_gathered[r] += 1
    return tx.commit()


def spill_gathered_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        for r in range(s.config.R):
            if s.spill_gathered[r] < len(s.spills):
                yield Transition.make("SpillGathered", rank=r)


def spill_write_ok(s: ClusterState, r: int) -> bool:
    """Whether rank r's next spill write succeeds: its disk works and has room."""
    staged = s.spill_staged[r][0]
    new = sum(1 for h, _ in staged if (r, h) not in s.l3)
    return s.disk_ok[r] and s.l3_used[r] + new <= s.config.L3


def spill_done(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    r = rank_of(s, t)
    ok = t.arg("ok")
    if len(s.spill_done[r]) >= s.spill_gathered[r]:
        raise Rejected(f"rank {r} has no gathered spill left to write")
    expect = spill_write_ok(s, r)
    if ok != expect:
        why = "its disk has failed" if not s.disk_ok[r] else ("its disk is full" if not expect else "its disk works and has room")
        raise Rejected(f"rank {r}'s spill write is {'ok' if expect else 'not ok'}: {why}")
    tx = Tx(s)
    staged = s.spill_staged[r][0]
    tx.write_spill(r, ok)
    if s.config.bug == "failed_store_visible" and not ok:
        # the defect: the failed write leaves its pages in the disk's index, holding
        # nothing valid, so a reload's lookup counts them and reads garbage
        for h, _ in staged:
            tx.put_l3(r, h, None)
    tx.spill_done[r] = tx.spill_done[r] + (ok,)
    return tx.commit()


def spill_done_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3:
        for r in range(s.config.R):
            if len(s.spill_done[r]) < s.spill_gathered[r]:
                yield Transition.make("SpillDone", rank=r, ok=spill_write_ok(s, r))


def spill_ack(s: ClusterState, t: Transition) -> ClusterState:
    need_l3(s)
    g = min(s.spill_gathered)
    d = min(len(x) for x in s.spill_done)
    if d == 0 and not any(op.pinned for op in s.spills[:g]):
        raise Rejected("no spill has been gathered or written by every rank")
    tx = Tx(s)
    R = s.config.R
    spills = list(s.spills)
    for j in range(g):
        op = spills[j]
        if op.pinned:
            n = tx.nodes.get(op.node)
            if n is not None:  # (always there: no eviction or prune takes a pinned node)
                tx.put(n.with_(pin=n.pin - 1))
            spills[j] = op.with_(pinned=False)
    for j in range(d):
        op = spills[j]
        n = tx.nodes.get(op.node)
        if n is None or n.host != op.obj or not all(s.spill_done[r][j] for r in range(R)):
            continue
        if s.config.durable_split == "reference":
            # the reference marks the node it pinned, whatever happened to it since
            tx.put(n.with_(durable=True))
            continue
        # after a split the node keeps only a suffix of what was spilled: its pages are
        # owned by the ranks that wrote them only if the offset is a multiple of R
        offset = len(op.hashes) - len(n.hashes)
        if lane_of(offset, R) == 0 and op.hashes[offset:] == l3_keys(s.config, n.ns, n.hashes):
            tx.put(n.with_(durable=True))
    tx.spills = tuple(spills[d:])
    tx.spill_gathered = [x - d for x in s.spill_gathered]
    tx.spill_done = [x[d:] for x in s.spill_done]
    return tx.commit()


def spill_ack_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.L3 and s.spills:
        yield Transition.make("SpillAck")


register(Spec(name="SpillSubmit", family="spill", apply=spill_submit, candidates=spill_submit_candidates, args={}, decides=True))
register(Spec(name="SpillGathered", family="spill", apply=spill_gathered, candidates=spill_gathered_candidates, args={}, per_rank=True))
register(Spec(name="SpillDone", family="spill", apply=spill_done, candidates=spill_done_candidates, args={"ok": "bool"}, per_rank=True))
register(Spec(name="SpillAck", family="spill", apply=spill_ack, candidates=spill_ack_candidates, args={}, agreement=True))
