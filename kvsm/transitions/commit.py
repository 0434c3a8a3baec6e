"""The commit family: `WriteDone(r)`, `AckAppend(r)`, `AckAppendAll`, `CommitCall(r)`,
`Commit`, `Rollback(node)`.

Backups are written by every rank: rank `r` copies the pages of the node that sit in
its device lane into the shared slab, one write at a time in `writes` order, and
counts them in its local `write_done[r]`. The commit is a collective (the reference's
writing_check MIN all-reduce), entered by each rank from its own state: `CommitCall(r)`
is rank `r` reaching its call, and `Commit` is the collective completing once every
rank has entered it: the MIN of `write_done` over ranks is the prefix of `writes` that
every rank finished (possibly none); those backups become visible (committed object,
`host` set, lock released) on every rank at once. Each round pairs call k of every
rank; while a round is open no replicated step is taken (a rank in the collective
waits there). Under `commit_call = "reference"` a rank whose own ack queue is empty
returns early instead of entering (`Round.SKIPPED`): if another rank entered, the
calls no longer pair up (invariant 12); the injected defect `skip_collective` does the
same under `fixed`. Under `commit_call = "atomic"` the collective is
the one step `Commit` (every rank's call and the MIN at once, when the MIN is not 0): the
same replicated behaviour, without the states in which some ranks have called and others
not. `Rollback` abandons a pending backup, wherever
it is in `writes`.

When a rank's final ack of a write enters its ack queue is the knob `ack_append`. Under
`"fixed"` it enters with the copy's end, in the one step `WriteDone(r)`. Under
`"reference"` it is appended first, at a point of the rank's own (`AckAppend(r)`, the
reference's layer-end / post-forward point), and the copy ends later (`WriteDone(r)`,
the first `finish_event.query()` that answers true): `acked[r]` counts the writes at
the head of `writes` whose ack rank `r` appended, `write_done[r] <= acked[r]`. The
count a rank enters the MIN with is still `write_done[r]`, the finished acks at the head
of its queue (the reference's count stops at the first unfinished one), so a commit
takes only finished copies; what changes is the early return of `commit_call =
"reference"`, which reads the queue's length, `acked[r]`. Under `"lockstep"` the ack is
appended before the copy finishes as under `"reference"`, but at the same point of every
rank's program (`AckAppendAll`: every rank at once, never while a round of the commit
collective is open), the reading under which the reference's comment ("a deterministic
layer-end / post-forward point across CP ranks") holds: every rank's queue then has the
same length at each call, and the early return is uniform.
"""

from __future__ import annotations

from typing import Iterable

from ..state import ClusterState, Rejected, Round
from ..tx import Tx
from .transition import Transition
from .registry import Spec, rank_of, register
from .tree import drop_write, enqueue_spill


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
    if s.commit_round[r] == Round.IN:
        # its count went into the collective when it entered; a copy that completes
        # meanwhile counts in the next round (as if it had completed after this one)
        raise Rejected(f"rank {r} waits in the commit collective with its count of finished writes")
    reference = cfg.ack_append != "fixed"
    if reference and done >= s.acked[r]:
        # the finish query is asked of an appended ack only
        raise Rejected(f"rank {r} has not appended the ack of its next write (node {nid}) yet")
    tx = Tx(s)
    n = tx.node(nid)
    obj = tx.objects[tx.pending[nid].obj]
    R = cfg.R
    mine = [i for i, p in enumerate(n.dev) if p % R == r]  # (its own lane: `lane_of`)
    tx.store_hosts(r, [n.dev[i] for i in mine], [obj.page(i) for i in mine])
    tx.write_done[r] += 1
    if cfg.bug == "duplicate_ack" and tx.write_done[r] < len(s.writes):
        # the rank's ack of this write completes twice: the second completion is counted
        # against the next write in the queue, whose pages the rank has not copied
        tx.write_done[r] += 1
        if reference:
            # the duplicate is an ack in the queue whose finish query already answers
            # true: it stands for the next write's ack
            tx.acked[r] = max(tx.acked[r], tx.write_done[r])
    return tx.commit()


def write_done_candidates(s: ClusterState) -> Iterable[Transition]:
    bound = s.acked if s.config.ack_append != "fixed" else (len(s.writes),) * s.config.R
    for r in range(s.config.R):
        if s.write_done[r] < bound[r] and s.writes[s.write_done[r]] in s.pending and s.commit_round[r] != Round.IN:
            yield Transition.make("WriteDone", rank=r)


def ack_append(s: ClusterState, t: Transition) -> ClusterState:
    r = rank_of(s, t)
    if s.config.ack_append != "reference":
        raise Rejected(
            "a rank's ack enters its queue with its copy's end (WriteDone) under ack_append = fixed"
            if s.config.ack_append == "fixed" else "every rank appends at once (AckAppendAll) under ack_append = lockstep"
        )
    if s.acked[r] >= len(s.writes):
        raise Rejected(f"rank {r} has appended the acks of all {len(s.writes)} submitted writes")
    # also while the rank waits in the commit collective: the forward pass appends it,
    # not the scheduler that waits, and the count the rank entered with is unchanged
    tx = Tx(s)
    # appended in submit order; a prepared backup's too (its ack is appended at the end
    # of the forward pass, before its insert attaches it)
    tx.acked[r] += 1
    return tx.commit()


def ack_append_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.ack_append == "reference":
        for r in range(s.config.R):
            if s.acked[r] < len(s.writes):
                yield Transition.make("AckAppend", rank=r)


def ack_append_all(s: ClusterState, t: Transition) -> ClusterState:
    if s.config.ack_append != "lockstep":
        raise Rejected(f"ranks append their acks together only under ack_append = lockstep (here {s.config.ack_append})")
    if min(s.acked) >= len(s.writes):
        raise Rejected(f"every rank has appended the acks of all {len(s.writes)} submitted writes")
    # a replicated step: like every one, never while a round of the commit collective is
    # open (`registry._after_round`), as the append is a point of every rank's program
    # before or after its call, never between two ranks' calls of one round
    tx = Tx(s)
    n = len(s.writes)
    tx.acked = [a + 1 if a < n else a for a in s.acked]
    return tx.commit()


def ack_append_all_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.ack_append == "lockstep" and min(s.acked) < len(s.writes) and all(c == Round.IDLE for c in s.commit_round):
        yield Transition.make("AckAppendAll")


def ack_queue_empty(s: ClusterState, r: int) -> bool:
    """Whether rank `r`'s own queue of write acks is empty, as its writing_check reads it
    under `commit_call = "reference"`. Under `ack_append = "fixed"` a rank's final ack of
    a backup enters its queue with its copy of it (`WriteDone(r)`, one step per rank and
    write), so the queue holds `write_done[r]` acks; under `"reference"` it holds the
    `acked[r]` acks the rank appended, finished or not. Either way ranks whose progress
    differs read different lengths (under `"lockstep"` every rank has the same `acked`)."""
    if s.config.ack_append != "fixed":
        return s.acked[r] == 0
    return s.write_done[r] == 0


def commit_due(s: ClusterState) -> bool:
    """Whether a rank goes on to the commit collective's call at all: a backup is in
    flight. Under `ack_append = "reference"` that is the reference's replicated
    `ongoing_write_through`, the pending backups (a prepared backup joins it only when
    its insert attaches it), since an appended ack of a prepared backup could otherwise
    send one rank into a collective that no rank of the reference makes; under
    `"fixed"` any write in `writes` (a superset: the extra rounds commit nothing, as no
    rank finishes an unattached write)."""
    return bool(s.pending) if s.config.ack_append != "fixed" else bool(s.writes)


def commit_call(s: ClusterState, t: Transition) -> ClusterState:
    r = rank_of(s, t)
    if s.config.commit_call == "atomic":
        raise Rejected("the commit collective is one step (Commit) under commit_call = atomic")
    if s.commit_round[r] != Round.IDLE:
        raise Rejected(f"rank {r} has already reached the commit call of this round")
    if not commit_due(s):
        raise Rejected("no backup is in flight: every rank returns before the commit collective")
    tx = Tx(s)
    enters = s.config.commit_call == "fixed" or not ack_queue_empty(s, r)
    if s.config.bug == "skip_collective" and s.write_done[r] == 0:
        # a rank with nothing finished skips the MIN: it returns early while the others
        # enter, so the ranks' collective calls no longer pair up
        enters = False
    tx.commit_round[r] = Round.IN if enters else Round.SKIPPED
    if all(c == Round.SKIPPED for c in tx.commit_round):
        # every rank returned early: no collective was issued, the round is over
        tx.commit_round = [Round.IDLE] * s.config.R
    return tx.commit()


def commit_call_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.commit_call != "atomic" and commit_due(s):
        for r in range(s.config.R):
            if s.commit_round[r] == Round.IDLE:
                yield Transition.make("CommitCall", rank=r)


def commit(s: ClusterState, t: Transition) -> ClusterState:
    m = min(s.write_done)
    if s.config.commit_call == "atomic":
        if m == 0:
            raise Rejected("no write is finished on every rank")
    elif not all(c == Round.IN for c in s.commit_round):
        raise Rejected(f"the commit collective completes when every rank has entered it (ranks: {list(s.commit_round)})")
    tx = Tx(s)
    tx.commit_round = [Round.IDLE] * s.config.R
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
    if s.config.ack_append != "fixed":
        # the committed acks leave every rank's queue (each had appended them: m <= acked)
        tx.acked = [a - m for a in s.acked]
    return tx.commit()


def commit_candidates(s: ClusterState) -> Iterable[Transition]:
    if s.config.commit_call == "atomic":
        if s.writes and min(s.write_done) > 0:
            yield Transition.make("Commit")
    elif all(c == Round.IN for c in s.commit_round):
        yield Transition.make("Commit")


def rollback(s: ClusterState, t: Transition) -> ClusterState:
    nid = t.arg("node")
    if nid not in s.pending:
        raise Rejected(f"node {nid} has no pending backup")
    tx = Tx(s)
    pend = tx.pending[nid]
    if s.config.bug == "double_free":
        # the rollback frees the object's pages but does not release its registration:
        # the backup stays pending with its write and its object, which the next rollback
        # (or anything else that frees it) frees a second time
        tx.free_pages_of(tx.objects[pend.obj])
        return tx.commit()
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


register(Spec(name="WriteDone", family="commit", apply=write_done, candidates=write_done_candidates, args={}, per_rank=True))
register(Spec(name="AckAppend", family="commit", apply=ack_append, candidates=ack_append_candidates, args={}, per_rank=True))
register(Spec(name="AckAppendAll", family="commit", apply=ack_append_all, candidates=ack_append_all_candidates, args={}))
register(Spec(name="CommitCall", family="commit", apply=commit_call, candidates=commit_call_candidates, args={}, per_rank=True))
register(Spec(name="Commit", family="commit", apply=commit, candidates=commit_candidates, args={}, agreement=True, in_round=True))
register(Spec(name="Rollback", family="commit", apply=rollback, candidates=rollback_candidates, args={"node": "int"}))
