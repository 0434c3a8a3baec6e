"""The reserve family: `Reserve(node)`.

Starts a backup of a node's pages into the shared L2 pool: reserves an object (the
lowest-based free run of the node's length in every payload region), evicting host
leaves to make room, adds the node to `pending` and to the end of `writes`, and locks
the node itself. Eligible nodes: under write_through, unbacked nodes on L1 whose hit
count reached the threshold; under write_back, unbacked unlocked device leaves
(written back before they are evicted).

Evict-to-fit follows the reference: a snapshot of the host leaves in victim order,
released one at a time with a retry after each; a parent that becomes a host leaf
meanwhile is not added to this round. If the snapshot runs out, `Reserve` is not
enabled.
"""

from __future__ import annotations

from typing import Iterable

from ..state import ClusterState, Obj, Pending, Rejected
from ..tx import Tx
from .base import Spec, Transition, evict_host_to_fit, register


def reserve(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    nid = t.arg("node")
    if nid not in s.backup_index:
        if nid not in s.nodes:
            raise Rejected(f"node {nid} does not exist")
        raise Rejected(f"node {nid} is not eligible for a backup under {s.config.policy}")
    tx = Tx(s)
    n = tx.node(nid)
    length = n.pages
    base = evict_host_to_fit(tx, length, view)
    if base is None:
        raise Rejected(f"no free run of {length} host pages even after evicting every host leaf")
    tx.alloc_host(base, length)
    tx.objects.set(nid, Obj(base, length, False, nid))
    tx.pending.set(nid, Pending(nid, True))
    tx.writes = tx.writes + (nid,)
    tx.update(nid, lock=n.lock + 1)
    return tx.commit()


def reserve_candidates(s: ClusterState) -> Iterable[Transition]:
    for nid in s.backup_index:
        yield Transition.make("Reserve", node=nid)


register(Spec("Reserve", "reserve", reserve, reserve_candidates, {"node": "int"}, decides=True))
