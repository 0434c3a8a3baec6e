"""The reserve family: `Reserve(node, fits)`.

Starts a backup of a node's pages into the shared L2 pool: reserves an object (the
lowest-based free run of the node's length in every payload region), evicting host
leaves to make room, adds the node to `pending` and to the end of `writes`, and locks
the node itself. Eligible nodes: under write_through, unbacked nodes on L1 whose hit
count reached the threshold; under write_back, unbacked unlocked device leaves
(written back before they are evicted).

Evict-to-fit follows the reference (`_reserve_write_cp_shared_l2_evict_to_fit`): a
snapshot of the host leaves in victim order, released one at a time with a retry
after each; a parent that becomes a host leaf meanwhile is not added to this round.
`fits` is the outcome, which the state decides (like the `ok` of a disk step): true,
the object is reserved; false, the snapshot ran out first, and the backup is skipped
but the evictions it made stay (the reference's eviction storm: a backup that cannot
fit empties the host pool of its leaves). A failed attempt that could evict nothing
changes nothing and is not a step.
"""

from __future__ import annotations

from typing import Iterable

from ..state import ClusterState, Obj, Pending, Rejected
from ..tx import Tx
from .base import Spec, Transition, evict_host_to_fit, register


def _eligible(s: ClusterState, nid: int) -> None:
    if nid not in s.backup_index:
        if nid not in s.nodes:
            raise Rejected(f"node {nid} does not exist")
        raise Rejected(f"node {nid} is not eligible for a backup under {s.config.policy}")


def reserve_fits(s: ClusterState, nid: int) -> bool:
    """Whether a reserve of eligible node `nid` finds a run, evicting from the snapshot."""
    length = s.nodes[nid].pages
    if Tx(s).first_fit(length) is not None:
        return True
    return evict_host_to_fit(Tx(s), length) is not None


def reserve(s: ClusterState, t: Transition) -> ClusterState:
    nid, fits = t.arg("node"), t.arg("fits")
    _eligible(s, nid)
    tx = Tx(s)
    n = tx.node(nid)
    length = n.pages
    base = evict_host_to_fit(tx, length)
    if (base is not None) != fits:
        if fits:
            raise Rejected(f"no free run of {length} host pages even after evicting every host leaf of the snapshot (fits is false)")
        raise Rejected(f"a run of {length} host pages fits (after evicting from the snapshot), so fits is true")
    if base is None:
        if not s.host_index:
            raise Rejected(f"node {nid}'s reserve cannot fit and there is no host leaf to evict: nothing would change")
        return tx.commit()
    tx.alloc_host(base, length)
    tx.objects.set(nid, Obj(base, length, False, nid))
    tx.pending.set(nid, Pending(nid, True))
    tx.writes = tx.writes + (nid,)
    tx.update(nid, lock=n.lock + 1)
    return tx.commit()


def reserve_candidates(s: ClusterState) -> Iterable[Transition]:
    for nid in s.backup_index:
        yield Transition.make("Reserve", node=nid, fits=reserve_fits(s, nid))


register(Spec("Reserve", "reserve", reserve, reserve_candidates, {"node": "int", "fits": "bool"}))
