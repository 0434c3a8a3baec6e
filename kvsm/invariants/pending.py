"""Invariant 4, Pending: the writes in flight are the pending backups and the prepared
ones, each once; a pending node is locked, on L1, not backed, not evictable, and has an
uncommitted object of its length; a prepared backup belongs to a matched request and
has an id of its own and an uncommitted object; no rank has finished more writes than
there are (nor the write of a prepared backup not attached yet)."""

from __future__ import annotations

from typing import Any

from ..state import MATCHED, ClusterState
from ..victims import dev_victim_key
from .common import label

I = 4


def prepared_violations(s: ClusterState) -> list[str]:
    """The rule on the prepared backups, whole. O(prepared backups x writes)."""
    out = []
    for rid, nid in s.prepared.items():
        req = s.requests.get(rid)
        if req is None or req.phase != MATCHED:
            out.append(label(I, f"request {rid} holds a prepared backup but is not a matched request"))
        if nid is None:
            continue
        obj = s.objects.get(nid)
        if nid in s.nodes or nid in s.pending or nid >= s.next_id:
            out.append(label(I, f"prepared backup {nid} of request {rid} is a node already, or an id not taken yet"))
        if obj is None or obj.committed or obj.owner != nid:
            out.append(label(I, f"prepared backup {nid} of request {rid} has no uncommitted object of its own"))
        elif nid in s.writes and any(d > s.writes.index(nid) for d in s.write_done):
            out.append(label(I, f"a rank finished the write of prepared backup {nid}, which is not attached"))
    return out


def _writes_bad(s: ClusterState, prepared: set[int]) -> bool:
    return len(s.writes) != len(set(s.writes)) or set(s.writes) != set(s.pending.keys()) | prepared


def _writes_msg(s: ClusterState, prepared: set[int]) -> str:
    return f"writes {list(s.writes)} and pending {sorted(s.pending.keys())} (and prepared {sorted(prepared)}) disagree"


def _pending_node(r: Any, s: ClusterState, nid: int, pend: Any, bare: Any) -> None:
    n = s.nodes.get(nid)
    if n is None:
        r.bad(I, f"pending backup of missing node {nid}")
        return
    if not n.lock:
        r.bad(I, f"pending node {nid} is not locked")
    if not n.dev:
        r.bad(I, f"pending node {nid} is not on L1")
    if n.host is not None:
        r.bad(I, f"pending node {nid} is already backed")
    if dev_victim_key(n, True, bare) is not None:
        r.bad(I, f"pending node {nid} is evictable")
    obj = s.objects.get(pend.obj)
    if obj is None or obj.committed or obj.length != n.pages:
        r.bad(I, f"pending node {nid} has object {pend.obj} that is missing, committed or of another length (split)")


def _write_done(r: Any, s: ClusterState) -> None:
    for rank, d in enumerate(s.write_done):
        if not 0 <= d <= len(s.writes):
            r.bad(I, f"rank {rank} has finished {d} of {len(s.writes)} writes")
    reference = s.config.ack_append != "fixed"
    for rank, a in enumerate(s.acked):
        # a copy's end is asked of an appended ack only; under "fixed" nothing is appended apart
        if not (s.write_done[rank] <= a <= len(s.writes) if reference else a == 0):
            r.bad(I, f"rank {rank} has appended {a} acks with {s.write_done[rank]} of {len(s.writes)} writes finished")


def whole(w: Any) -> None:
    s = w.s
    if _writes_bad(s, w.prepared):
        w.bad(I, _writes_msg(s, w.prepared))
    w.out.extend(prepared_violations(s))
    for nid, pend in s.pending.items():
        _pending_node(w, s, nid, pend, w.bare)
    _write_done(w, s)


def holds(s: ClusterState, prepared: set[int], bare: Any) -> bool:
    """The whole-state rule, decided fast (`kvsm.invariants.fast`)."""
    if _writes_bad(s, prepared):
        return False
    if s.prepared and prepared_violations(s):
        return False
    nodes, objects = s.nodes, s.objects
    for nid, pend in s.pending.items():
        n = nodes.get(nid)
        if n is None or not n.lock or not n.dev or n.host is not None or dev_victim_key(n, True, bare) is not None:
            return False
        obj = objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            return False
    n_writes = len(s.writes)
    for d in s.write_done:
        if not 0 <= d <= n_writes:
            return False
    if s.config.ack_append != "fixed":
        return all(d <= a <= n_writes for d, a in zip(s.write_done, s.acked))
    return not any(s.acked)


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step(d: Any) -> None:
    A, B = d.A, d.B
    if d.pending_w or A.writes is not B.writes or A.prepared is not B.prepared:
        if _writes_bad(A, d.prepared):
            d.bad(I, _writes_msg(A, d.prepared))
    if A.prepared and (A.prepared is not B.prepared or A.writes is not B.writes or A.write_done != B.write_done
                       or d.requests_w or d.objects_w or d.nodes_w or A.next_id != B.next_id):
        d.out.extend(prepared_violations(A))
    for nid in d.nodes:
        pend = d.Ap.get(nid)
        if pend is not None:
            _pending_node(d, A, nid, pend, d.bare)
    if A.write_done != B.write_done or A.writes is not B.writes or A.acked != B.acked:
        _write_done(d, A)
