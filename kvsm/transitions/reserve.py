"""The reserve family: `Reserve(node, fits)`, `Prepare(rid, fits)`.

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

Under `backup_trigger = "insert"` (write_through) `Reserve` is no step: the reference
backs a node up only from its insert's hit count, and `Insert` takes those backups
itself (`hit_backups`), each as `Reserve` would, its outcome decided by the state.

`Prepare` is the reference's production write-through path
(`prepare_write_backups_for_reqs`), under `config.prepared_backups`: before a matched
request's forward pass, the pages its insert will add get an L2 object (evict-to-fit as
above: a deciding step like `Reserve`, each rank evicting from its own victim order and
sizing its own room) and a node id taken in advance, and their write joins `writes`. `Insert`
attaches it to the new node when that node has the prepared length, else rolls it
back; `Abort` rolls it back. Until it is attached no rank finishes that write (the
reference's `writing_check` defers its ack), so it holds the commit frontier.
"""

from __future__ import annotations

from typing import Iterable

from ..config import Config
from ..state import MATCHED, ROOT_ID, ClusterState, Pending, Rejected
from ..tx import Tx
from .transition import Transition
from .registry import Spec, cluster_view, register
from .tree import walk_key
from .eviction import evict_host_to_fit, host_victims_now
from ..victims import backup_candidate


def parent_allows(s: ClusterState, nid: int) -> bool:
    """Under `write_through_parent = "backed"` (SGLang's `write_backup`), a write-through
    backup of node `nid` only when its parent is the root or is backed: committed, or
    its write submitted (SGLang sets `host_value` at the submit)."""
    cfg = s.config
    if cfg.write_through_parent == "any" or cfg.policy != "write_through":
        return True
    p = s.nodes[nid].parent
    return p == ROOT_ID or s.nodes[p].host is not None or p in s.pending


def insert_triggers(cfg: Config) -> bool:
    """Whether write-through backups start only inside `Insert` (`backup_trigger =
    "insert"`), not as a `Reserve` of their own."""
    return cfg.backup_trigger == "insert" and cfg.policy == "write_through"


def backup_nodes(s: ClusterState) -> Iterable[int]:
    """The nodes a `Reserve` may take: eligible (`backup_index`) and allowed by their
    parent; none where `Insert` takes the backups."""
    if insert_triggers(s.config):
        return iter(())
    return (nid for nid in s.backup_index if parent_allows(s, nid))


def reserve_in(tx: Tx, nid: int, view: int | None) -> bool:
    """Inside a step, reserve node `nid`'s backup as `Reserve` does (rank `view`'s
    decision), evicting from a snapshot of the host victims as the step has left them;
    whether it fit. One that does not fit keeps its evictions."""
    n = tx.node(nid)

    def snapshot() -> Iterable[int]:  # taken when the first eviction is needed
        yield from host_victims_now(tx, view, frozenset())

    got = evict_host_to_fit(tx, n.pages, view, snapshot())  # type: ignore[arg-type]
    if got is None:
        return False
    tx.objects.set(nid, tx.new_object(got, False, nid))
    tx.pending.set(nid, Pending(nid, True))
    tx.writes = tx.writes + (nid,)
    tx.update(nid, lock=n.lock + 1)
    return True


def hit_backups(tx: Tx, order: list[int], view: int | None) -> None:
    """Under `backup_trigger = "insert"`: the backups an insert takes, in `order` (the
    nodes it hit, top down, then the new node it made, unless a prepared backup is
    attached to it: the reference's `_inc_hit_count` at each), of each node eligible
    when its turn comes (on L1, unbacked, not pending, hit `write_threshold` times,
    allowed by its parent) and each reserved as `Reserve` would."""
    cfg = tx.cfg
    for nid in order:
        n = tx.node(nid)
        if not backup_candidate(n, nid in tx.pending, cfg):
            continue
        p = n.parent
        if cfg.write_through_parent == "backed" and not (p == ROOT_ID or tx.node(p).host is not None or p in tx.pending):
            continue
        reserve_in(tx, nid, view)


def _eligible(s: ClusterState, nid: int) -> None:
    if nid not in s.backup_index:
        if nid not in s.nodes:
            raise Rejected(f"node {nid} does not exist")
        raise Rejected(f"node {nid} is not eligible for a backup under {s.config.policy}")
    if not parent_allows(s, nid):
        raise Rejected(f"node {nid}'s parent is not backed (write_through_parent = backed)")


def reserve_fits(s: ClusterState, nid: int, view: int | None = None) -> bool:
    """Whether a reserve of eligible node `nid` finds a run, evicting from the snapshot
    (rank `view`'s decision)."""
    return _fits(s, s.nodes[nid].pages, view)


def _fits(s: ClusterState, length: int, view: int | None) -> bool:
    if Tx(s).host_room(length):
        return True
    return evict_host_to_fit(Tx(s), length, view) is not None


def _room(s: ClusterState, length: int, fits: bool) -> str:
    """What a reserve of `length` pages finds, or does not (`l2_alloc`)."""
    if s.config.l2_alloc == "pages":
        return f"{length} free host pages {'are' if fits else 'are not'} there (l2_alloc = pages)"
    return f"a run of {length} host pages fits" if fits else f"no free run of {length} host pages"


class FitsByLength:
    """`reserve_fits(s, nid, view)` for any node of one state, each page length decided
    once: the outcome depends on the state and the node's length only, so a state's
    thousands of backup candidates cost as many decisions as they have distinct lengths."""

    __slots__ = ("s", "view", "known")

    def __init__(self, s: ClusterState, view: int | None) -> None:
        self.s, self.view = s, view
        self.known: dict[int, bool] = {}

    def __call__(self, nid: int) -> bool:
        length = self.s.nodes[nid].pages
        fits = self.known.get(length)
        if fits is None:
            fits = self.known[length] = _fits(self.s, length, self.view)
        return fits


def reserve(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    nid, fits = t.arg("node"), t.arg("fits")
    if insert_triggers(s.config):
        raise Rejected("no Reserve of its own under backup_trigger = insert: Insert takes the backups")
    _eligible(s, nid)
    tx = Tx(s)
    n = tx.node(nid)
    length = n.pages
    got = evict_host_to_fit(tx, length, view)
    if (got is not None) != fits:
        if fits:
            raise Rejected(f"{_room(s, length, False)} even after evicting every host leaf of the snapshot (fits is false)")
        raise Rejected(f"{_room(s, length, True)} (after evicting from the snapshot), so fits is true")
    if got is None:
        if not s.host_index:
            raise Rejected(f"node {nid}'s reserve cannot fit and there is no host leaf to evict: nothing would change")
        return tx.commit()
    tx.objects.set(nid, tx.new_object(got, False, nid))
    tx.pending.set(nid, Pending(nid, True))
    tx.writes = tx.writes + (nid,)
    tx.update(nid, lock=n.lock + 1)
    return tx.commit()


def reserve_candidates(s: ClusterState) -> Iterable[Transition]:
    if insert_triggers(s.config):
        return
    fits = FitsByLength(s, cluster_view(s.config))
    for nid in backup_nodes(s):
        yield Transition.make("Reserve", node=nid, fits=fits(nid))


def prepare_length(s: ClusterState, rid: int) -> int:
    """The pages request `rid`'s insert would add as a new node: its key beyond what the
    tree already holds, splits included (the reference's
    `_probe_existing_radix_prefix_len_no_split`, which its lock's prefix never exceeds)."""
    req = s.requests[rid]
    w = walk_key(s.nodes, req.tokens, ns=req.ns, bug=s.config.bug)
    return len(req.tokens) - w.covered - (w.cut[1] if w.cut is not None else 0)


def prepare_fits(s: ClusterState, rid: int, view: int | None = None) -> bool:
    """Whether request `rid`'s prepare finds a run, evicting from the snapshot (rank
    `view`'s decision)."""
    return _fits(s, prepare_length(s, rid), view)


def prepare(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """Prepare request `rid`'s write-through backup, once: take the next node id, then
    reserve (evicting to fit, in rank `view`'s victim order and for the room it sizes,
    as `Reserve`). `fits`: the object and its write are made and wait for the insert;
    not `fits`: the evictions stay and only the id is spent (as in the reference, which
    takes the id before it reserves)."""
    rid, fits = t.arg("rid"), t.arg("fits")
    cfg = s.config
    if not cfg.prepared_backups or cfg.policy != "write_through":
        raise Rejected("prepared backups need prepared_backups = true and the write_through policy")
    req = s.requests.get(rid)
    if req is None or req.phase != MATCHED:
        raise Rejected(f"request {rid} is not a matched request")
    if rid in s.prepared:
        raise Rejected(f"request {rid} has already prepared its backup")
    length = prepare_length(s, rid)
    if length <= 0:
        raise Rejected(f"request {rid}'s key is in the tree already: nothing to back up")
    tx = Tx(s)
    nid = tx.new_id()
    got = evict_host_to_fit(tx, length, view)
    if (got is not None) != fits:
        raise Rejected(f"{_room(s, length, not fits)} (after evicting from the snapshot), so fits is {str(not fits).lower()}")
    if got is None:
        tx.prepared.set(rid, None)
        return tx.commit()
    tx.objects.set(nid, tx.new_object(got, False, nid))
    tx.prepared.set(rid, nid)
    tx.writes = tx.writes + (nid,)
    return tx.commit()


def prepare_candidates(s: ClusterState) -> Iterable[Transition]:
    cfg = s.config
    if not cfg.prepared_backups or cfg.policy != "write_through":
        return
    view = cluster_view(cfg)
    for rid in sorted(r.id for r in s.requests.values() if r.phase == MATCHED and r.id not in s.prepared):
        if prepare_length(s, rid) > 0:
            yield Transition.make("Prepare", rid=rid, fits=prepare_fits(s, rid, view))


register(Spec(name="Reserve", family="reserve", apply=reserve, candidates=reserve_candidates, args={"node": "int", "fits": "bool"}, decides=True))
register(Spec(name="Prepare", family="reserve", apply=prepare, candidates=prepare_candidates, args={"rid": "int", "fits": "bool"}, decides=True))
