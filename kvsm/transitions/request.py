"""The request family: Arrive, Match, Insert, Finish, Abort.

A request's lock covers the path from its node up to the root; `lock` of a node
counts those requests and its own pending backup. Page `k` of a request (counting
pages from the root) lives in device lane `k mod R`.
"""

from __future__ import annotations

from typing import Iterable

import immutables

from .. import content
from ..state import DECODING, MATCHED, QUEUED, ROOT_ID, ClusterState, Node, Pending, Rejected, Request, lane_of
from ..tx import Tx
from .transition import Transition, arrive_ns, arrive_step
from .registry import Spec, register
from .tree import drop_write, split_node, unsplittable, walk_key
from .eviction import device_victims, evict_device_node
from .reserve import hit_backups, insert_triggers


def request_in(tx: Tx, rid: int, phases: tuple[str, ...]) -> Request:
    """Request `rid`, which must exist and be in one of `phases`."""
    req = tx.requests.get(rid)
    if req is None:
        raise Rejected(f"request {rid} does not exist")
    if req.phase not in phases:
        raise Rejected(f"request {rid} is {req.phase}, not {' or '.join(phases)}")
    return req


# ---- Arrive ------------------------------------------------------------------------------------


def arrive(s: ClusterState, t: Transition) -> ClusterState:
    rid, tokens, out_pages = t.arg("rid"), tuple(t.arg("tokens")), t.arg("out_pages")
    ns = arrive_ns(t)
    cfg = s.config
    if rid != s.next_rid:
        raise Rejected(f"the next request id is {s.next_rid}, not {rid}")
    if cfg.max_requests and s.next_rid >= cfg.max_requests:
        raise Rejected(f"all {cfg.max_requests} requests of the config have arrived")
    if cfg.max_live and len(s.requests) >= cfg.max_live:
        raise Rejected(f"{cfg.max_live} requests are already alive")
    if out_pages < 0:
        raise Rejected("out_pages must be >= 0")
    if ns < 0:
        raise Rejected(f"namespace {ns} must be >= 0")
    tx = Tx(s)
    tx.requests.set(rid, Request(rid, tokens, out_pages, QUEUED, ROOT_ID, (), ns=ns))
    tx.next_rid += 1
    return tx.commit()


def arrive_candidates(s: ClusterState) -> Iterable[Transition]:
    seen = set()
    for p in s.config.prompts:
        if (p.pages, p.out_pages, p.ns) in seen:
            continue
        seen.add((p.pages, p.out_pages, p.ns))
        yield arrive_step(s.next_rid, p.pages, p.out_pages, p.ns)


# ---- Match -------------------------------------------------------------------------------------


def match_key(tokens: tuple[int, ...]) -> tuple[int, ...]:
    """The part of a prompt a match may cover: all its pages but the last. The reference
    matches at most `input_len - 1` tokens floored to a page, so that the forward pass
    has a token to compute, and `floor((input_len - 1) / P) = ceil(input_len / P) - 1`
    is one page short of the prompt's pages whatever its sub-page tail."""
    return tokens[:-1]


def match(s: ClusterState, t: Transition) -> ClusterState:
    """Match the longest cached prefix (L1 or L2) of the request's key but its last page,
    splitting a node at a page boundary if the match ends inside it (not when that
    node's backup is pending: the match then stops above it). Touched, in the
    reference's order: the matched nodes root to leaf, the node the match ends inside
    (before its split, pending or not) and then its new upper part (the reference also
    stamps the root, which is never a victim: docs/model.md). The path is locked down
    to the deepest matched node on L1."""
    rid = t.arg("rid")
    tx = Tx(s)
    req = request_in(tx, rid, (QUEUED,))
    if rid in s.reload_candidates or any(rid in op.waiters for op in s.reloads):
        raise Rejected(f"request {rid} waits for an L3 reload decision")
    w = walk_key(tx.nodes, match_key(req.tokens), ns=req.ns, bug=tx.cfg.bug)
    path = list(w.full)
    for nid in path:
        tx.touch(nid)
    if w.cut is not None:
        tx.touch(w.cut[0])
        if not unsplittable(tx, w.cut[0]):
            upper = split_node(tx, *w.cut)
            tx.touch(upper)
            path.append(upper)
    last_dev = ROOT_ID
    for nid in path:
        if not tx.node(nid).dev:
            break
        last_dev = nid
    tx.lock_path(last_dev, +1)
    req = req.with_(phase=MATCHED, node=last_dev)
    if tx.cfg.carry_host_hit:
        req = carry_hit(tx, req, path[path.index(last_dev) + 1 :] if last_dev != ROOT_ID else path)
    tx.requests.set(rid, req)
    return tx.commit()


def carry_hit(tx: Tx, req: Request, below: list[int]) -> Request:
    """Under carry_host_hit: the match records its host hit, the matched nodes below its
    lock (all off L1, each backed): the deepest one (the reference's `last_host_node`)
    and their pages (`host_hit_length`), and pins that node until the hit is used or
    dropped (`drop_hit`). A pinned host leaf is no host victim, and the nodes above it
    have a child, so the whole hit stays on L2."""
    if not below:
        return req
    pin = tx.cfg.bug != "host_hit_unpinned"  # the defect: the hit is recorded, not pinned
    if pin:
        tx.update(below[-1], pin=tx.node(below[-1]).pin + 1)
    return req.with_(hit=below[-1], hit_pages=sum(tx.node(n).pages for n in below), hit_pin=pin)


def drop_hit(tx: Tx, req: Request) -> Request:
    """The request's carried host hit is used (LoadBack) or no longer wanted (Insert,
    Abort): its pin, if its match took one, is released."""
    if not req.hit:
        return req
    if req.hit_pin:
        tx.update(req.hit, pin=tx.node(req.hit).pin - 1)
    return req.with_(hit=ROOT_ID, hit_pages=0, hit_pin=False)


def _rids(s: ClusterState, phase: str) -> list[int]:
    return sorted(r.id for r in s.requests.values() if r.phase == phase)


def match_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in _rids(s, QUEUED):
        yield Transition.make("Match", rid=rid)


# ---- Insert -------------------------------------------------------------------------------------


def _lane_need(positions: list[int], R: int) -> list[int]:
    if R == 1:
        return [len(positions)]
    need = [0] * R
    for k in positions:
        need[lane_of(k, R)] += 1
    return need


def _fits(tx: Tx, need: list[int]) -> bool:
    """Whether every lane has `need[lane]` free pages."""
    free = tx.dev_free
    if len(need) == 1:
        return len(free[0]) >= need[0]
    return all(len(f) >= k for f, k in zip(free, need))


def make_room(tx: Tx, need: list[int], exclude: frozenset[int], view: int | None = None) -> None:
    """Evict device victims in victim order (rank `view`'s) until every lane has
    `need[lane]` free pages."""
    R = tx.cfg.R
    if _fits(tx, need):
        return
    for nid in device_victims(tx, exclude, view):
        evict_device_node(tx, nid)
        if _fits(tx, need):
            return
    short = {lane: need[lane] - tx.free_in_lane(lane) for lane in range(R) if tx.free_in_lane(lane) < need[lane]}
    raise Rejected(f"device lanes short of pages after evicting every victim: {short}")


def insert(s: ClusterState, t: Transition, view: int | None = None) -> ClusterState:
    """After the forward pass: cache the request's pages. Walk its key from the root;
    whole nodes on L1 are hits, whole nodes only on L2 are re-owned with fresh device
    pages, a node the key diverges inside is split (if its backup is pending, caching
    stops above it), and the rest becomes one new node. Device pages come from the
    owner lanes, evicting victims in victim order as needed; the request also takes
    its own `out_pages`. Its lock moves to the deepest node of its key. Not while a
    load-back still copies pages the request matched (its forward waits for them)."""
    rid = t.arg("rid")
    tx = Tx(s)
    cfg = tx.cfg
    R = cfg.R
    wt = cfg.policy == "write_through"
    req = request_in(tx, rid, (MATCHED,))
    if s.loads:
        loading = s.loading_pages()
        for nid in s.path_to_root(req.node):
            if any(p in loading for p in s.nodes[nid].dev):
                # its forward reads the matched pages, so it waits for their copies
                raise Rejected(f"request {rid} matched node {nid}, whose load-back is still in flight")
    tokens = req.tokens
    w = walk_key(tx.nodes, tokens, ns=req.ns, bug=tx.cfg.bug)
    path = list(w.full)
    covered = w.covered
    stop = False
    if w.cut is not None:
        if unsplittable(tx, w.cut[0]):
            stop = True
        else:
            path.append(split_node(tx, *w.cut))
            covered += w.cut[1]
    new_tokens = () if stop else tokens[covered:]

    # pages to allocate, by absolute position
    reown: list[tuple[int, int]] = []  # (node id, position of its first page)
    pos = 0
    for nid in path:
        n = tx.node(nid)
        if not n.dev:
            reown.append((nid, pos))
        pos += n.pages
    positions = [p0 + j for nid, p0 in reown for j in range(tx.node(nid).pages)]
    positions += range(pos, pos + len(new_tokens))
    out_positions = range(len(tokens), len(tokens) + req.out_pages)
    positions += out_positions
    make_room(tx, _lane_need(positions, R), frozenset(path), view)

    on_l1_before = {nid for nid in path if tx.node(nid).dev}
    for nid, p0 in reown:
        n = tx.node(nid)
        dev = tx.alloc_positions(p0, n.pages)
        tx.set_dev(nid, dev)
        # the request computed these pages: its namespace's KV (another namespace's node
        # is on its path only under a defect of NS_WALK_BUGS)
        tx.fill_devs(dev, n.hashes if n.ns == req.ns else tuple(content.rebase(h, n.ns, req.ns) for h in n.hashes))
    for nid in path:
        if wt and nid in on_l1_before:  # touched and hit: one copy of the node
            tx.clock += 1
            n = tx.node(nid)
            tx.put(n.with_(touched=tx.clock, hits=n.hits + 1))
        else:
            tx.touch(nid)
    last = path[-1] if path else ROOT_ID
    prep = tx.peek("prepared").get(rid)
    attach = prep is not None and len(new_tokens) == tx.objects[prep].length
    if new_tokens:
        parent = tx.node(last)
        # an attached prepared backup brings the node id taken for it in advance
        nid = prep if attach else tx.new_id()
        dev = tx.alloc_positions(pos, len(new_tokens))
        # (the parent is of the request's namespace but under a defect of NS_WALK_BUGS)
        hashes = content.chain_in(req.ns, content.rebase(parent.last_content, parent.ns, req.ns), new_tokens)
        tx.clock += 1
        tx.add_child(
            Node(
                id=nid,
                parent=last,
                key=tuple(new_tokens),
                dev=dev,
                host=None,
                durable=False,
                lock=0,
                pin=0,
                # the reference counts no hit on a node it attaches a prepared backup to
                hits=1 if wt and not attach else 0,
                touched=tx.clock,
                children=immutables.Map(),
                ondev=0,
                hashes=hashes,
                ns=req.ns,
            )
        )
        tx.fill_devs(dev, hashes)
        last = nid
    own = tx.alloc_positions(len(tokens), req.out_pages)
    tx.move_lock(req.node, last)  # (the lock moves down to the deepest node of its key)
    tx.requests.set(rid, drop_hit(tx, req).with_(phase=DECODING, node=last, pages=own))
    if insert_triggers(cfg):
        # the backups the reference's insert takes at each hit (`_inc_hit_count`): the
        # nodes it hit top down, then the new node unless a prepared backup is attached
        hit_backups(tx, [nid for nid in path if nid in on_l1_before] + ([last] if new_tokens and not attach else []), view)
    settle_prepared(tx, rid, last if new_tokens else None)
    return tx.commit()


def settle_prepared(tx: Tx, rid: int, new: int | None) -> None:
    """At insert: attach request `rid`'s prepared backup to its new node `new` if that
    node took the prepared id (the lengths agree: `_attach_prepared_cp_backup`, which
    locks the node and makes the backup pending); else roll it back
    (`_rollback_prepared_cp_backup`). Also at abort, with no new node."""
    if rid not in tx.peek("prepared"):
        return
    prep = tx.prepared[rid]
    tx.prepared.delete(rid)
    if prep is None:  # its reserve did not fit
        return
    if new == prep:
        tx.pending.set(prep, Pending(prep, True))
        tx.update(prep, lock=tx.node(prep).lock + 1)
    elif tx.cfg.bug == "double_free":
        # the rollback frees the object's pages but does not release its registration:
        # its write leaves `writes` (its acks are scrubbed) while the object stays,
        # naming pages that are free, which the next reserve can be given again
        drop_write(tx, prep, keep_object=True)
    else:
        drop_write(tx, prep)


def insert_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in _rids(s, MATCHED):
        yield Transition.make("Insert", rid=rid)


# ---- Finish / Abort --------------------------------------------------------------------------------


def _release(tx: Tx, req: Request) -> None:
    settle_prepared(tx, req.id, None)
    drop_hit(tx, req)
    if req.phase != QUEUED:
        tx.lock_path(req.node, -1)
    tx.free_dev(req.pages)
    tx.requests.delete(req.id)
    if req.id in tx.peek("reload_candidates"):
        tx.reload_candidates.delete(req.id)
    if tx.reloads and any(req.id in op.waiters for op in tx.reloads):
        tx.reloads = tuple(op.with_(waiters=tuple(w for w in op.waiters if w != req.id)) for op in tx.reloads)


def finish(s: ClusterState, t: Transition) -> ClusterState:
    tx = Tx(s)
    _release(tx, request_in(tx, t.arg("rid"), (DECODING,)))
    return tx.commit()


def finish_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in _rids(s, DECODING):
        yield Transition.make("Finish", rid=rid)


def abort(s: ClusterState, t: Transition) -> ClusterState:
    tx = Tx(s)
    _release(tx, request_in(tx, t.arg("rid"), (QUEUED, MATCHED, DECODING)))
    return tx.commit()


def abort_candidates(s: ClusterState) -> Iterable[Transition]:
    for rid in sorted(s.requests.keys()):
        yield Transition.make("Abort", rid=rid)


register(Spec(name="Arrive", family="request", apply=arrive, candidates=arrive_candidates, args={"rid": "int", "tokens": "ints", "out_pages": "int", "ns": "int"}, optional=frozenset({"ns"})))
register(Spec(name="Match", family="request", apply=match, candidates=match_candidates, args={"rid": "int"}))
register(Spec(name="Insert", family="request", apply=insert, candidates=insert_candidates, args={"rid": "int"}, decides=True))
register(Spec(name="Finish", family="request", apply=finish, candidates=finish_candidates, args={"rid": "int"}))
register(Spec(name="Abort", family="request", apply=abort, candidates=abort_candidates, args={"rid": "int"}))
