"""The commit family: `WriteDone(r)`, `Commit`, `Rollback(node)`.

Backups are written by every rank: rank `r` copies the pages of the node that sit in
its device lane into the shared slab, one write at a time in `writes` order, and
counts them in its local `write_done[r]`. `Commit` is this family's agreement: the MIN
of `write_done` over ranks is the prefix of `writes` that every rank finished; those
backups become visible (committed object, `host` set, lock released) on every rank at
once. `Rollback` abandons a pending backup, wherever it is in `writes`.
"""

from __future__ import annotations

from typing import Iterable

from ..state import ClusterState, Rejected, lane_of
from ..tx import Tx
from .base import Spec, Transition, drop_write, enqueue_spill, rank_of, register


def write_done(s: ClusterState, t: Transition) -> ClusterState:
    r = rank_of(s, t)
    cfg = s.config
    done = s.write_done[r]
    if done >= len(s.writes):
        raise Rejected(f"rank {r} has finished all {len(s.writes)} submitted writes")
    nid = s.writes[done]
    if nid not in s.pending:
        # the reference's writing_check defers the ack of a prepared backup until its
        # insert attaches it (or rolls it back): it holds the commit frontier
        raise Rejected(f"rank {r}'s next write is node {nid}'s prepared backup, not attached yet")
    tx = Tx(s)
    n = tx.node(nid)
    obj = tx.objects[tx.pending[nid].obj]
    for i, p in enumerate(n.dev):
        if lane_of(p, cfg.R) == r:
            tx.store_host(r, p, obj.base + i)
    tx.write_done[r] += 1
    return tx.commit()


def write_done_candidates(s: ClusterState) -> Iterable[Transition]:
    for r in range(s.config.R):
        if s.write_done[r] < len(s.writes) and s.writes[s.write_done[r]] in s.pending:
            yield Transition.make("WriteDone", rank=r)


def commit(s: ClusterState, t: Transition) -> ClusterState:
    m = min(s.write_done)
    if m == 0:
        raise Rejected("no write is finished on every rank")
    tx = Tx(s)
    for nid in s.writes[:m]:
        pend = tx.pending[nid]
        tx.pending.delete(nid)
        obj = tx.objects[pend.obj]
        tx.objects.set(pend.obj, obj.with_(committed=True))
        n = tx.node(nid)
        tx.update(nid, host=pend.obj, lock=n.lock - (1 if pend.locked else 0))
        enqueue_spill(tx, nid)
    tx.writes = s.writes[m:]
    tx.write_done = [d - m for d in s.write_done]
    return tx.commit()


def commit_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.writes and min(s.write_done) > 0:
        yield Transition.make("Commit")


def rollback(s: ClusterState, t: Transition) -> ClusterState:
    nid = t.arg("node")
    if nid not in s.pending:
        raise Rejected(f"node {nid} has no pending backup")
    tx = Tx(s)
    pend = tx.pending[nid]
    drop_write(tx, nid)
    tx.pending.delete(nid)
    if pend.locked:
        n = tx.node(nid)
        tx.update(nid, lock=n.lock - 1)
    return tx.commit()


def rollback_candidates(s: ClusterState) -> Iterable[Transition]:
    for nid in s.writes:
        if nid in s.pending:
            yield Transition.make("Rollback", node=nid)


register(Spec("WriteDone", "commit", write_done, write_done_candidates, {}, per_rank=True))
register(Spec("Commit", "commit", commit, commit_candidates, {}, agreement=True))
register(Spec("Rollback", "commit", rollback, rollback_candidates, {"node": "int"}))
