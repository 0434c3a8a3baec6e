"""Invariant 10, Counts: what the state keeps derived equals its recomputation (each
node's children on L1, the victim and backup indexes, the digest sums, pins, the disks'
entry counts), the counters are above what they count (node ids, request ids, the
clock's stamps) and never go back, and each rank's progress through the spills, reloads
and load-backs in flight is in range (the oldest load-back leaves once every rank is
done with it)."""

from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from typing import Any

from ..digest_sums import recompute_sums
from ..victims import backup_candidate, dev_victim_key, host_victim_key
from .facts import GET_BACKUP, GET_DKEY, GET_HKEY, GET_NID, GET_PIN

I = 10
DEV_INDEX = "the device victim index differs from its recomputation"
HOST_INDEX = "the host victim index differs from its recomputation"
BACKUP_INDEX = "the backup candidate index differs from its recomputation"


def _ondev(nid: int, n: Any, ondev: int) -> str:
    return f"node {nid} counts {n.ondev} children on L1, has {ondev}"


def next_id_msg(next_id: int) -> str:
    return f"next_id {next_id} is not above every node id"


def clock_msg(clock: int) -> str:
    return f"a node is stamped after the clock {clock}"


def next_rid_msg(next_rid: int) -> str:
    return f"next_rid {next_rid} is not above every request id"


def _pin(nid: int, n: Any, pins: int) -> str:
    return f"node {nid} has pin {n.pin} but {pins} pinning spills and carried host hits"


def expected_pins(s: Any) -> Counter[int]:
    """Each node's pins: the spills that pin it and the carried host hits whose match
    pinned it (carry_host_hit)."""
    pins: Counter[int] = Counter(op.node for op in s.spills if op.pinned)
    if s.config.carry_host_hit:
        pins.update(q.hit for q in s.requests.values() if q.hit_pin)
    return pins


def _oldest_load(load_done: Any) -> str:
    return f"the oldest load-back is done on every rank {list(load_done)} but still in flight"


def _progress(r: Any, s: Any, rank: int) -> None:
    """Rank `rank`'s progress through the spills and reloads in flight."""
    if not len(s.spill_done[rank]) <= s.spill_gathered[rank] <= len(s.spills):
        r.bad(I, f"rank {rank}'s spill progress {len(s.spill_done[rank])} written / {s.spill_gathered[rank]} gathered is off")
    if len(s.spill_staged[rank]) != s.spill_gathered[rank] - len(s.spill_done[rank]):
        r.bad(I, f"rank {rank} stages {len(s.spill_staged[rank])} spills, not gathered minus written")
    if len(s.reload_done[rank]) > len(s.reloads):
        r.bad(I, f"rank {rank} has read more reloads than are in flight")


def _disk_count(r: Any, s: Any, rank: int, used: int) -> None:
    if used != s.l3_used[rank]:
        r.bad(I, f"rank {rank}'s disk holds {used} pages but counts {s.l3_used[rank]}")


def _disk_cap(r: Any, s: Any, rank: int, used: int) -> None:
    if used > s.config.L3:
        r.bad(I, f"rank {rank}'s disk holds more than {s.config.L3} pages")


def _load_done(r: Any, s: Any, rank: int) -> None:
    if not 0 <= s.load_done[rank] <= len(s.loads):
        r.bad(I, f"rank {rank} has finished {s.load_done[rank]} of {len(s.loads)} loads in flight")


def whole(w: Any) -> None:
    """The derived structures and the counters (the per-rank progress is `whole_progress`,
    reported after invariant 3's matched requests, where the reports have always put it)."""
    s, cfg, nodes = w.s, w.cfg, w.nodes
    for nid, n in nodes.items():
        ondev = sum(1 for c in n.children.values() if nodes[c].dev)
        if n.ondev != ondev:
            w.bad(I, _ondev(nid, n, ondev))
    dev_keys = sorted(k for k in (dev_victim_key(n, nid in s.pending, cfg) for nid, n in nodes.items()) if k)
    if list(s.dev_index) != dev_keys:
        w.bad(I, DEV_INDEX)
    host_keys = sorted(k for k in (host_victim_key(n, cfg) for n in nodes.values()) if k)
    if list(s.host_index) != host_keys:
        w.bad(I, HOST_INDEX)
    backups = sorted(nid for nid, n in nodes.items() if backup_candidate(n, nid in s.pending, cfg))
    if list(s.backup_index) != backups:
        w.bad(I, BACKUP_INDEX)
    if s.sums is not None and s.sums != recompute_sums(s):
        w.bad(I, "the digest sums differ from their recomputation")
    if nodes and max(nodes.keys()) >= s.next_id:
        w.bad(I, next_id_msg(s.next_id))
    if any(n.touched > s.clock for n in nodes.values()):
        w.bad(I, clock_msg(s.clock))
    if s.requests and max(s.requests.keys()) >= s.next_rid:
        w.bad(I, next_rid_msg(s.next_rid))


def whole_progress(w: Any) -> None:
    s = w.s
    pins = expected_pins(s)
    for nid, n in w.nodes.items():
        if n.pin != pins.get(nid, 0):
            w.bad(I, _pin(nid, n, pins.get(nid, 0)))
    for r in range(w.R):
        _progress(w, s, r)
        _load_done(w, s, r)
        used = sum(1 for (rank, _h) in s.l3.keys() if rank == r)
        _disk_count(w, s, r, used)
        _disk_cap(w, s, r, used)
    if s.loads and min(s.load_done) > 0:
        w.bad(I, _oldest_load(s.load_done))


def holds(s: Any, facts: Any, per_rank: Any, sums: Any) -> bool:
    """The derived structures and the progress, decided fast (`kvsm.invariants.fast`:
    the children on L1 and the counters are checked in its pass over the nodes):
    `facts` are the nodes' facts there (the root's not among them, never a victim nor a
    backup candidate), `per_rank` the disks' entries per rank, `sums` the digest sums
    recomputed (called only when the state keeps them)."""

    dev_keys = sorted(filter(None, map(GET_DKEY, facts)))
    if len(s.dev_index) != len(dev_keys) or s.dev_index.to_list() != dev_keys:
        return False
    host_keys = sorted(filter(None, map(GET_HKEY, facts)))
    if len(s.host_index) != len(host_keys) or s.host_index.to_list() != host_keys:
        return False
    backups = sorted(compress(map(GET_NID, facts), map(GET_BACKUP, facts)))
    if len(s.backup_index) != len(backups) or s.backup_index.to_list() != backups:
        return False
    pins = expected_pins(s)
    nodes = s.nodes
    if list(map(GET_PIN, nodes.values())) != list(map(pins.get, nodes.keys(), repeat(0))):
        return False
    L3, loads = s.config.L3, len(s.loads)
    for r in range(s.config.R):
        if not len(s.spill_done[r]) <= s.spill_gathered[r] <= len(s.spills):
            return False
        if len(s.spill_staged[r]) != s.spill_gathered[r] - len(s.spill_done[r]):
            return False
        if len(s.reload_done[r]) > len(s.reloads):
            return False
        if per_rank.get(r, 0) != s.l3_used[r] or per_rank.get(r, 0) > L3:
            return False
        if not 0 <= s.load_done[r] <= loads:
            return False
    if loads and min(s.load_done) > 0:
        return False
    return s.sums is None or s.sums == sums(s)


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_node(d: Any, nid: int, a: Any) -> None:
    A = d.A
    if nid >= A.next_id:
        d.bad(I, next_id_msg(A.next_id))
    if a.touched > A.clock:
        d.bad(I, clock_msg(A.clock))


def _ondev_step(d: Any) -> None:
    An, Bn = d.An, d.Bn
    check = set()
    for nid in d.nodes:
        a, b = An.get(nid), Bn.get(nid)
        if a is not None and (b is None or a.ondev != b.ondev or a.children is not b.children):
            check.add(nid)
        if a is not None and b is not None and bool(a.dev) != bool(b.dev) and a.parent in An:
            check.add(a.parent)
        if a is None and b is not None and b.parent in An:
            check.add(b.parent)
        if a is not None and b is None and a.parent in An:
            check.add(a.parent)
    for nid in check:
        n = An[nid]
        ondev = sum(1 for c in n.children.values() if An[c].dev)
        if n.ondev != ondev:
            d.bad(I, _ondev(nid, n, ondev))


def _indexes_step(d: Any) -> None:
    """The victim and backup indexes hold exactly the written nodes' keys (and as many
    more or fewer as the written nodes gained or lost)."""
    A, B, An, Bn, Ap, Bp, cfg = d.A, d.B, d.An, d.Bn, d.Ap, d.Bp, d.cfg
    d_dev = d_host = d_backup = 0
    for nid in d.nodes:
        a, b = An.get(nid), Bn.get(nid)
        ka = dev_victim_key(a, nid in Ap, cfg) if a is not None else None
        kb = dev_victim_key(b, nid in Bp, cfg) if b is not None else None
        if ka is not None and ka not in A.dev_index:
            d.bad(I, DEV_INDEX)
        if kb is not None and kb != ka and kb in A.dev_index:
            d.bad(I, DEV_INDEX)
        d_dev += (ka is not None) - (kb is not None)
        ha = host_victim_key(a, cfg) if a is not None else None
        hb = host_victim_key(b, cfg) if b is not None else None
        if ha is not None and ha not in A.host_index:
            d.bad(I, HOST_INDEX)
        if hb is not None and hb != ha and hb in A.host_index:
            d.bad(I, HOST_INDEX)
        d_host += (ha is not None) - (hb is not None)
        ba = a is not None and backup_candidate(a, nid in Ap, cfg)
        bb = b is not None and backup_candidate(b, nid in Bp, cfg)
        if ba != (nid in A.backup_index):
            d.bad(I, BACKUP_INDEX)
        d_backup += ba - bb
    if len(A.dev_index) - len(B.dev_index) != d_dev:
        d.bad(I, DEV_INDEX)
    if len(A.host_index) - len(B.host_index) != d_host:
        d.bad(I, HOST_INDEX)
    if len(A.backup_index) - len(B.backup_index) != d_backup:
        d.bad(I, BACKUP_INDEX)


def step(d: Any) -> None:
    A, B, An, Bn, R = d.A, d.B, d.An, d.Bn, d.R
    nodes = d.nodes
    _ondev_step(d)
    _indexes_step(d)
    if (A.spills is not B.spills or any(An[n].pin != Bn[n].pin for n in nodes if n in An and n in Bn)
            or any(An[n].pin for n in nodes if n in An and n not in Bn) or (d.requests_w and A.config.carry_host_hit)):
        pins = expected_pins(A)
        # (the nodes a written request's hit named before or names after the step)
        hits = {q.hit for r in d.requests_w for q in (A.requests.get(r), B.requests.get(r)) if q is not None and q.hit}
        for nid in nodes | {op.node for op in A.spills} | {op.node for op in B.spills} | hits:
            n = An.get(nid)
            if n is not None and n.pin != pins.get(nid, 0):
                d.bad(I, _pin(nid, n, pins.get(nid, 0)))
    if (A.spills is not B.spills or A.spill_gathered != B.spill_gathered or A.spill_done != B.spill_done
            or A.spill_staged != B.spill_staged or A.reload_done != B.reload_done or A.reloads is not B.reloads):
        for r in range(R):
            _progress(d, A, r)
    if d.l3_w or A.l3_used != B.l3_used:
        delta = [0] * R
        for key in d.l3_w:
            r = key[0]
            if 0 <= r < R:
                delta[r] += (key in A.l3) - (key in B.l3)
        for r in range(R):
            if A.l3_used[r] - B.l3_used[r] != delta[r]:
                _disk_count(d, A, r, B.l3_used[r] + delta[r])
            _disk_cap(d, A, r, A.l3_used[r])
    if A.next_id < B.next_id or A.clock < B.clock or A.next_rid < B.next_rid:
        d.bad(I, "a counter (next_id, clock or next_rid) went back")


def step_oldest_load(d: Any) -> None:
    if min(d.A.load_done) > 0:
        d.bad(I, _oldest_load(d.A.load_done))


def step_load_done(d: Any) -> None:
    for r in range(d.R):
        _load_done(d, d.A, r)
