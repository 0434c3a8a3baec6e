"""The invariants (docs/model.md), checked from scratch.

`violations(state)` checks invariants 1-10, 12 and 13 of a state and returns a list of readable
strings, empty when every one holds. It recomputes everything it checks from the tree
itself and never trusts a running structure (those are what invariant 10 checks), so
it is O(size of state).

`step_violations(rank, state)` checks invariant 11, Ownership, on one transition: the
effects that produced `state` (`kvsm.effects`) make each rank touch only its own
device pages, its own pages of an L2 object and its own disk; a per-rank transition of
rank `rank` does only that rank's work. It is O(effects).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from .config import Config

from . import content
from . import effects as fx
from .digest_sums import recompute_sums
from .state import (
    MATCHED,
    PHASES,
    QUEUED,
    ROOT_ID,
    ClusterState,
    Round,
    lane_of,
)
from .victims import backup_candidate, dev_victim_key, host_victim_key

NAMES = {
    1: "Tree",
    2: "Residency",
    3: "Locks",
    4: "Pending",
    5: "DevicePages",
    6: "HostPages",
    7: "Content",
    8: "Durable",
    9: "Reload",
    10: "Counts",
    11: "Ownership",
    12: "Collectives",
    13: "Agreement",
}


def violations(s: ClusterState) -> list[str]:
    out: list[str] = []

    def bad(i: int, msg: str) -> None:
        out.append(f"{i} {NAMES[i]}: {msg}")

    cfg = s.config
    bare = contract(cfg)
    nodes = s.nodes
    R, L2 = cfg.R, cfg.L2

    # 1. Tree -------------------------------------------------------------------------------------
    root = nodes.get(ROOT_ID)
    if root is None or root.key or root.dev or root.host is not None:
        bad(1, "node 0 is not an empty root")
        return out
    for nid, n in nodes.items():
        if nid != n.id:
            bad(1, f"node stored under {nid} has id {n.id}")
        if nid == ROOT_ID:
            continue
        if not n.key:
            bad(1, f"node {nid} has an empty key")
        p = nodes.get(n.parent)
        if p is None:
            bad(1, f"node {nid} has missing parent {n.parent}")
        elif p.children.get(n.key[0] if n.key else None) != nid:
            bad(1, f"node {nid} is not its parent {n.parent}'s child for its first page")
        seen, cur = set(), nid
        while cur != ROOT_ID and cur in nodes and cur not in seen:
            seen.add(cur)
            cur = nodes[cur].parent
        if cur != ROOT_ID:
            bad(1, f"node {nid} does not reach the root")
    for nid, n in nodes.items():
        for sym, cid in n.children.items():
            c = nodes.get(cid)
            if c is None or c.parent != nid or not c.key or c.key[0] != sym:
                bad(1, f"node {nid} lists child {cid} under page {sym} wrongly")
    if out:
        return out

    def chain_of(nid: int) -> tuple[int, ...]:
        syms: list[int] = []
        for a in reversed(s.path_to_root(nid)):
            syms.extend(nodes[a].key)
        return tuple(syms)

    # 2. Residency ----------------------------------------------------------------------------------
    for nid, n in nodes.items():
        if nid == ROOT_ID:
            continue
        if n.dev and len(n.dev) != len(n.key):
            bad(2, f"node {nid} has {len(n.dev)} device pages for {len(n.key)} pages of key")
        if not n.dev:
            if n.host is None:
                bad(2, f"node {nid} is neither on L1 nor backed on L2")
            elif n.host not in s.objects or not s.objects[n.host].committed:
                bad(2, f"node {nid} points at object {n.host}, which is not committed")
        if n.dev and n.parent != ROOT_ID and not nodes[n.parent].dev:
            bad(2, f"node {nid} is on L1 but its parent {n.parent} is not")

    # 3. Locks ------------------------------------------------------------------------------------------
    holders: Counter[int] = Counter()
    for req in s.requests.values():
        if req.phase not in PHASES:
            bad(3, f"request {req.id} has unknown phase {req.phase!r}")
        if req.phase == QUEUED:
            if req.node != ROOT_ID:
                bad(3, f"queued request {req.id} holds a lock on node {req.node}")
            continue
        if req.node not in nodes:
            bad(3, f"request {req.id} locks missing node {req.node}")
            continue
        for a in s.path_to_root(req.node):
            holders[a] += 1
    for nid, pend in s.pending.items():
        if pend.locked:
            holders[nid] += 1
    for op in s.loads:
        if op.node not in nodes:
            bad(3, f"a load-back in flight locks missing node {op.node}")
            continue
        for a in s.path_to_root(op.node):
            holders[a] += 1
    for nid, n in nodes.items():
        if n.lock != holders.get(nid, 0):
            bad(3, f"node {nid} has lock {n.lock} but {holders.get(nid, 0)} holders")
        if n.lock and nid != ROOT_ID and not n.dev:
            bad(3, f"node {nid} is locked but not on L1")

    # 4. Pending ------------------------------------------------------------------------------------------
    prepared = prepared_ids(s)
    if len(s.writes) != len(set(s.writes)) or set(s.writes) != set(s.pending.keys()) | prepared:
        bad(4, f"writes {list(s.writes)} and pending {sorted(s.pending.keys())} (and prepared {sorted(prepared)}) disagree")
    out.extend(prepared_violations(s))
    for nid, pend in s.pending.items():
        n = nodes.get(nid)
        if n is None:
            bad(4, f"pending backup of missing node {nid}")
            continue
        if not n.lock:
            bad(4, f"pending node {nid} is not locked")
        if not n.dev:
            bad(4, f"pending node {nid} is not on L1")
        if n.host is not None:
            bad(4, f"pending node {nid} is already backed")
        if dev_victim_key(n, True, bare) is not None:
            bad(4, f"pending node {nid} is evictable")
        obj = s.objects.get(pend.obj)
        if obj is None or obj.committed or obj.length != n.pages:
            bad(4, f"pending node {nid} has object {pend.obj} that is missing, committed or of another length (split)")
    for r, d in enumerate(s.write_done):
        if not 0 <= d <= len(s.writes):
            bad(4, f"rank {r} has finished {d} of {len(s.writes)} writes")

    # 5. Device pages -------------------------------------------------------------------------------------
    owner: dict[int, str] = {}

    def claim(page: int, who: str) -> None:
        if not 0 <= page < cfg.device_pages:
            bad(5, f"{who} holds device page {page}, outside 0..{cfg.device_pages - 1}")
        elif page in owner:
            bad(5, f"device page {page} is held by {owner[page]} and by {who}")
        else:
            owner[page] = who

    for nid, n in nodes.items():
        for p in n.dev:
            claim(p, f"node {nid}")
    for req in s.requests.values():
        for p in req.pages:
            claim(p, f"request {req.id}")
    for lane, free in enumerate(s.dev_free):
        for p in free:
            if lane_of(p, R) != lane:
                bad(5, f"free page {p} is listed in lane {lane}")
            claim(p, "the free list")
    if len(owner) != cfg.device_pages and not any(v.startswith("5 ") for v in out):
        missing = sorted(set(range(cfg.device_pages)) - set(owner))
        bad(5, f"device pages {missing[:8]} are neither used nor free (leak)")
    # an in-flight load-back copies each host page into the device page its node holds at
    # the same index, and that node is still the page's holder
    held_at = {p: (nid, i) for nid, n in nodes.items() for i, p in enumerate(n.dev)}
    for op in s.loads:
        for p, hp in op.pages:
            where = held_at.get(p)
            if where is None:
                bad(5, f"a load-back in flight targets device page {p}, which {owner.get(p, 'nobody')} holds, not a node")
                continue
            n = nodes[where[0]]
            obj = s.objects.get(n.host) if n.host is not None else None
            if obj is None or obj.base + where[1] != hp:
                bad(5, f"a load-back in flight copies host page {hp} into device page {p}, page {where[1]} of node {n.id}, which is not that page's copy")

    # 6. Host pages ------------------------------------------------------------------------------------------
    for region, runs in enumerate(s.l2_free):
        used: dict[int, str] = {}
        for key, obj in s.objects.items():
            for page in range(obj.base, obj.base + obj.length):
                if page in used:
                    bad(6, f"host page {page} (region {region}) is in object {used[page]} and object {key}")
                used[page] = f"{key}"
        prev_end = -1
        for base, length in runs:
            if length <= 0 or base < 0 or base + length > L2:
                bad(6, f"free run ({base}, {length}) is outside the pool")
            if base <= prev_end:
                bad(6, f"free runs overlap or touch at page {base} (region {region})")
            prev_end = base + length
            for page in range(base, base + length):
                if page in used:
                    bad(6, f"host page {page} is free and in object {used[page]}")
                used[page] = "free"
        if len(used) != L2:
            missing = sorted(set(range(L2)) - set(used))
            bad(6, f"host pages {missing[:8]} (region {region}) are neither used nor free (leak)")
    for key, obj in s.objects.items():
        n = nodes.get(obj.owner)
        if obj.committed:
            if n is None or n.host != key:
                bad(6, f"committed object {key} belongs to no node")
            elif obj.length != n.pages:
                bad(6, f"committed object {key} has {obj.length} pages for node {n.id} of {n.pages}")
        elif key in s.pending:
            if s.pending[key].obj != key:
                bad(6, f"uncommitted object {key} and its pending backup disagree")
        elif key in prepared:
            pass
        elif sum(1 for op in s.reloads if op.obj == key) != 1:
            bad(6, f"uncommitted object {key} belongs to no pending backup or reload")
        elif obj.length != len(next(op for op in s.reloads if op.obj == key).hashes):
            bad(6, f"reload object {key} has {obj.length} pages for its reload's pages")
    for nid, n in nodes.items():
        if n.host is not None and n.host in s.objects and s.objects[n.host].owner != nid:
            bad(6, f"node {nid} and object {n.host} disagree on ownership")

    # 7. Content ------------------------------------------------------------------------------------------------
    # pages a load-back still copies on their owner rank hold nothing yet (they were free,
    # so poisoned, and nothing else writes them until the copy lands)
    copying = {p for k, op in enumerate(s.loads) for p, _ in op.pages if k >= s.load_done[lane_of(p, R)]}
    for nid, n in nodes.items():
        if nid == ROOT_ID:
            continue
        expect = content.prefix_content(chain_of(nid))[-len(n.key) :]
        if n.hashes != expect:
            bad(7, f"node {nid} carries page hashes that are not its prefix's")
        for i, p in enumerate(n.dev):
            if p in copying:
                if p in s.dev_content:
                    bad(7, f"device page {p} of node {nid} (page {i}) holds content while rank {lane_of(p, R)}'s load-back copy into it is in flight")
            elif s.dev_content.get(p) != expect[i]:
                bad(7, f"device page {p} of node {nid} (page {i}) does not hold its prefix's KV")
        if n.host is not None and n.host in s.objects:
            obj = s.objects[n.host]
            for region in range(len(cfg.payloads)):
                for i in range(min(obj.length, len(expect))):
                    if s.host_content.get(region * L2 + obj.base + i) != expect[i]:
                        bad(7, f"host page {obj.base + i} of node {nid} (region {region}) does not hold its prefix's KV")
    for p in s.dev_content.keys():
        if p not in owner or owner[p] == "the free list":
            bad(7, f"free device page {p} still holds content (not poisoned)")
    for (r, h), c in s.l3.items():
        if c != h:
            bad(7, f"rank {r}'s disk entry {h:x} holds the KV of another prefix (or garbage)")
    for r, staged in enumerate(s.spill_staged):
        for op_pages in staged:
            for h, c in op_pages:
                if c != h:
                    bad(7, f"rank {r} staged page {h:x} for a spill with the wrong content")

    # 8. Durable ---------------------------------------------------------------------------------------
    for nid, n in nodes.items():
        if n.durable:
            for i, h in enumerate(n.hashes):
                if (lane_of(i, R), h) not in s.l3:
                    bad(8, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")

    # 9. Reload ----------------------------------------------------------------------------------------------
    for nid, n in nodes.items():
        if n.host is not None and n.host in s.objects:
            obj = s.objects[n.host]
            if not (n.pages == obj.length == len(n.hashes)):
                bad(9, f"node {nid} has {n.pages} pages, object {n.host} {obj.length}, {len(n.hashes)} hashes")
    for op in s.reloads:
        if not (len(op.tokens) == len(op.hashes) >= 1):
            bad(9, f"reload {op.key:x} claims {len(op.tokens)} pages with {len(op.hashes)} hashes")
        if op.hashes[1:] != content.chain(op.hashes[0], op.tokens[1:]) or op.key != op.hashes[-1]:
            bad(9, f"reload {op.key:x} carries hashes that are not its pages' prefix chain")
    waiting = [w for op in s.reloads for w in op.waiters]
    if len(waiting) != len(set(waiting)) or any(w not in s.requests or s.requests[w].phase != QUEUED for w in waiting):
        bad(9, f"reload waiters {waiting} are not distinct queued requests")
    for rid in s.reload_candidates.keys():
        if rid not in s.requests or s.requests[rid].phase != QUEUED or rid in waiting:
            bad(9, f"reload candidate {rid} is not a queued, unheld request")
    if len(s.spills) > cfg.spill_inflight or len(s.reloads) > cfg.reload_inflight or len(s.spill_queue) > cfg.spill_queue_cap:
        bad(9, "more L3 operations in flight or queued than the caps allow")

    # 10. Counts -----------------------------------------------------------------------------------------------------
    for nid, n in nodes.items():
        ondev = sum(1 for c in n.children.values() if nodes[c].dev)
        if n.ondev != ondev:
            bad(10, f"node {nid} counts {n.ondev} children on L1, has {ondev}")
    dev_keys = sorted(k for k in (dev_victim_key(n, nid in s.pending, cfg) for nid, n in nodes.items()) if k)
    if list(s.dev_index) != dev_keys:
        bad(10, "the device victim index differs from its recomputation")
    host_keys = sorted(k for k in (host_victim_key(n, cfg) for n in nodes.values()) if k)
    if list(s.host_index) != host_keys:
        bad(10, "the host victim index differs from its recomputation")
    backups = sorted(nid for nid, n in nodes.items() if backup_candidate(n, nid in s.pending, cfg))
    if list(s.backup_index) != backups:
        bad(10, "the backup candidate index differs from its recomputation")
    if s.sums is not None and s.sums != recompute_sums(s):
        bad(10, "the digest sums differ from their recomputation")
    if nodes and max(nodes.keys()) >= s.next_id:
        bad(10, f"next_id {s.next_id} is not above every node id")
    if any(n.touched > s.clock for n in nodes.values()):
        bad(10, f"a node is stamped after the clock {s.clock}")
    if s.requests and max(s.requests.keys()) >= s.next_rid:
        bad(10, f"next_rid {s.next_rid} is not above every request id")
    for req in s.requests.values():
        if req.phase == MATCHED and req.node != ROOT_ID and not nodes[req.node].dev:
            bad(3, f"request {req.id} locks node {req.node}, which is not on L1")
    pins: Counter[int] = Counter(op.node for op in s.spills if op.pinned)
    for nid, n in nodes.items():
        if n.pin != pins.get(nid, 0):
            bad(10, f"node {nid} has pin {n.pin} but {pins.get(nid, 0)} pinning spills")
    for r in range(R):
        if not len(s.spill_done[r]) <= s.spill_gathered[r] <= len(s.spills):
            bad(10, f"rank {r}'s spill progress {len(s.spill_done[r])} written / {s.spill_gathered[r]} gathered is off")
        if len(s.spill_staged[r]) != s.spill_gathered[r] - len(s.spill_done[r]):
            bad(10, f"rank {r} stages {len(s.spill_staged[r])} spills, not gathered minus written")
        if len(s.reload_done[r]) > len(s.reloads):
            bad(10, f"rank {r} has read more reloads than are in flight")
        if not 0 <= s.load_done[r] <= len(s.loads):
            bad(10, f"rank {r} has finished {s.load_done[r]} of {len(s.loads)} loads in flight")
        used = sum(1 for (rank, _h) in s.l3.keys() if rank == r)
        if used != s.l3_used[r]:
            bad(10, f"rank {r}'s disk holds {used} pages but counts {s.l3_used[r]}")
        if used > cfg.L3:
            bad(10, f"rank {r}'s disk holds more than {cfg.L3} pages")
    if s.loads and min(s.load_done) > 0:
        bad(10, f"the oldest load-back is done on every rank {list(s.load_done)} but still in flight")

    # 12. Collectives ------------------------------------------------------------------------------------------------
    # Call k of the commit collective on every rank is one collective: within a round, no
    # rank returns early from a call another rank entered (that rank would wait in the MIN
    # for a call that never comes, or pair it with another collective).
    for why in collectives_violations(s.commit_round, s.writes):
        bad(12, why)

    # 13. Agreement ----------------------------------------------------------------------------------------------
    disagreement = agreement_violation(s)
    if disagreement:
        bad(13, disagreement)
    return out


def collectives_violations(rounds: tuple[int, ...], writes: tuple[int, ...]) -> list[str]:
    """Invariant 12 of a commit round (`commit_round`) with the backups in flight
    (`writes`): what is wrong, in words."""
    out = []
    if any(c not in tuple(Round) for c in rounds):
        out.append(f"commit round {list(rounds)} holds an unknown position")
    entered = [r for r, c in enumerate(rounds) if c == Round.IN]
    skipped = [r for r, c in enumerate(rounds) if c == Round.SKIPPED]
    if entered and skipped:
        out.append(f"ranks {entered} entered the commit collective and ranks {skipped} returned early from the same call")
    if any(rounds) and not writes:
        out.append(f"a commit round is open {list(rounds)} with no backup in flight")
    return out


def agreement_violation(s: ClusterState) -> str | None:
    """Invariant 13 without its label: every rank takes the same decision at every
    replicated step (the model is collective-free); None when it holds."""
    if s.diverged is None:
        return None
    name, ranks = s.diverged
    many = len(ranks) > 1
    return f"{name}: rank{'s' if many else ''} {', '.join(map(str, ranks))} decide{'' if many else 's'} it otherwise than rank 0"


def contract(cfg: Config) -> Config:
    """The config without its injected defect: what the contract says of a predicate that
    a defect changes in the model (the derived indexes follow the model's own, which
    invariant 10 checks)."""
    return replace(cfg, bug="none") if cfg.bug != "none" else cfg



def prepared_ids(s: ClusterState) -> set[int]:
    """The node ids of the prepared backups not attached yet (each holds a write and an
    uncommitted object keyed by that id)."""
    return {nid for nid in s.prepared.values() if nid is not None}


def prepared_violations(s: ClusterState) -> list[str]:
    """Invariant 4 on the prepared backups: each belongs to a matched request, has an id
    taken and not used by a node, an uncommitted object of its own, and a write no rank
    has finished (it waits for the attach). O(prepared backups x writes)."""
    out = []
    for rid, nid in s.prepared.items():
        req = s.requests.get(rid)
        if req is None or req.phase != MATCHED:
            out.append(f"4 Pending: request {rid} holds a prepared backup but is not a matched request")
        if nid is None:
            continue
        obj = s.objects.get(nid)
        if nid in s.nodes or nid in s.pending or nid >= s.next_id:
            out.append(f"4 Pending: prepared backup {nid} of request {rid} is a node already, or an id not taken yet")
        if obj is None or obj.committed or obj.owner != nid:
            out.append(f"4 Pending: prepared backup {nid} of request {rid} has no uncommitted object of its own")
        elif nid in s.writes and any(d > s.writes.index(nid) for d in s.write_done):
            out.append(f"4 Pending: a rank finished the write of prepared backup {nid}, which is not attached")
    return out


def _performer(e: fx.Effect, R: int) -> int | None:
    """The rank that executes an effect: the one it names, else the owner of its device
    page; None for a host free, which every rank shares page by page."""
    if isinstance(e, (fx.Fill, fx.PoisonDev)):
        return lane_of(e.page, R)
    if isinstance(e, fx.Load):
        return lane_of(e.page, R)
    if isinstance(e, fx.PoisonHost):
        return None
    return e.rank


def step_violations(rank: int | None, s: ClusterState) -> list[str]:
    """Invariant 11 over the effects of the transition that produced `s` (`rank` is that
    transition's rank, None for a replicated one)."""
    R = s.config.R
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(f"11 {NAMES[11]}: {msg}")

    for e in s.effects:
        who = _performer(e, R)
        if who is not None and not 0 <= who < R:
            bad(f"{e.kind} names rank {who}, not one of 0..{R - 1}")
            continue
        if rank is not None and who != rank:
            bad(f"a step of rank {rank} emits {e!r}, which is {'shared by every rank' if who is None else f'work of rank {who}'}")
        if isinstance(e, fx.Store) and lane_of(e.page, R) != e.rank:
            bad(f"rank {e.rank} stores device page {e.page}, which lives in lane {lane_of(e.page, R)}")
        elif isinstance(e, fx.SpillGather):
            for host_page, _h in e.pages:
                if lane_of(host_page - e.base, R) != e.rank:
                    bad(f"rank {e.rank} gathers host page {host_page}, index {host_page - e.base} of its object, owned by rank {lane_of(host_page - e.base, R)}")
        elif isinstance(e, fx.ReloadRead):
            for host_page, _h in e.pages:
                if lane_of(host_page - e.base, R) != e.rank:
                    bad(f"rank {e.rank} reads into host page {host_page}, index {host_page - e.base} of its object, owned by rank {lane_of(host_page - e.base, R)}")
    return out


def violations_after(rank: int | None, s: ClusterState) -> list[str]:
    """Every invariant a transition must keep: 1-10 of the state `s` it produced, and 11
    of the transition itself (`rank` is its rank, None for a replicated one)."""
    return violations(s) + step_violations(rank, s)
