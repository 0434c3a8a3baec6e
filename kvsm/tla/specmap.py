"""How the spec's variables (spec/KVCache.tla) and the Python model's `ClusterState`
correspond.

Both sides map into one canonical form, `Canon` (kvsm.tla.canon): the state's identity
without any derived structure, free sets as sets of pages, and page content as the
model's content identity (`kvsm.content`): the spec keeps the prefix of page symbols
itself, the model its chained hash. The spec has one host region; the model keeps one per payload, all
allocated and written in lockstep, so a spec host page stands for that page in every
region. A pending backup's object key is its node id, locked.

A load-back in flight is the same record on both sides (its node and its `(device page,
host page)` copies); `load_done` and `commit_round` are per-rank integers on both.

L3: a page hash is a content identity, so the spec's hashes are prefixes too. The
model keeps a reload's reserved L2 object in `objects` under the key
`reload_object_key(op.key)`; the spec keeps its `base` and `length` in the reload
itself. In the canonical form a reload carries its object's range and `objects`
holds only the other objects. A spill's object key is its node id on both sides.

The other direction, `spec_values`, writes a model state as the spec's variables (as
TLA+ values) for `kvsm validate`.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..state import ClusterState
from .canon import (
    CandidateRow,
    Canon,
    ContentNames,
    L3Row,
    LoadRow,
    MappingError,
    NO_NODE,
    NO_OBJECT,
    NodeRow,
    ObjectRow,
    PendingRow,
    ReloadRow,
    RequestRow,
    SPEC_VARIABLES,
    SpillRow,
    content_id,
)
from .values import Fcn, Record, as_fcn


# ---- the model's side ---------------------------------------------------------------------------


def canon_model(s: ClusterState) -> Canon:
    reload_objs = {op.obj for op in s.reloads}

    def reload_row(op: Any) -> ReloadRow:
        o = s.objects.get(op.obj)
        base, length = (None, None) if o is None else (o.base, o.length)
        return ReloadRow(key=op.key, anchor=op.anchor, tokens=op.tokens, hashes=op.hashes, waiters=op.waiters, ttl=op.ttl, base=base, length=length, ns=op.ns)

    return Canon(
        nodes=frozenset(NodeRow(id=n.id, parent=n.parent, key=n.key, dev=n.dev, host=n.host, durable=n.durable, lock=n.lock, pin=n.pin, hits=n.hits, touched=n.touched, ns=n.ns) for n in s.nodes.values()),
        next_id=s.next_id,
        clock=s.clock,
        next_rid=s.next_rid,
        dev_free=frozenset(p for lane in s.dev_free for p in lane),
        l2_free=frozenset((i, p) for i, runs in enumerate(s.l2_free) for base, n in runs for p in range(base, base + n)),
        objects=frozenset(ObjectRow(key=k, base=o.base, length=o.length, committed=o.committed, owner=o.owner, pages=o.pages) for k, o in s.objects.items() if k not in reload_objs),
        pending=frozenset(PendingRow(node=k, obj=b.obj, locked=b.locked) for k, b in s.pending.items()),
        writes=tuple(s.writes),
        requests=frozenset(RequestRow(id=r.id, tokens=r.tokens, out_pages=r.out_pages, phase=r.phase, node=r.node, pages=r.pages, reload_tried=r.reload_tried, hit=r.hit, hit_pages=r.hit_pages, hit_pin=r.hit_pin, ns=r.ns) for r in s.requests.values()),
        write_done=tuple(s.write_done),
        dev_content=frozenset(s.dev_content.items()),
        host_content=frozenset(s.host_content.items()),
        spill_queue=tuple(s.spill_queue),
        spills=tuple(SpillRow(obj=op.obj, node=op.node, hashes=op.hashes, pinned=op.pinned) for op in s.spills),
        reload_candidates=frozenset(CandidateRow(rid=rid, anchor=c.anchor, tokens=c.tokens, hashes=c.hashes, ns=c.ns) for rid, c in s.reload_candidates.items()),
        reloads=tuple(reload_row(op) for op in s.reloads),
        spill_gathered=tuple(s.spill_gathered),
        spill_done=tuple(tuple(x) for x in s.spill_done),
        reload_done=tuple(tuple(x) for x in s.reload_done),
        disk_ok=tuple(s.disk_ok),
        disk_faults=s.disk_faults,
        l3=frozenset(L3Row(rank=r, hash=h, content=c) for (r, h), c in s.l3.items()),
        spill_staged=tuple(tuple(tuple(op) for op in staged) for staged in s.spill_staged),
        loads=tuple(LoadRow(node=op.node, pages=tuple(op.pages)) for op in s.loads),
        load_done=tuple(s.load_done),
        commit_round=tuple(s.commit_round),
        acked=tuple(s.acked),
        prepared=frozenset(s.prepared.items()),
        diverged=None if s.diverged is None else (s.diverged[0], tuple(sorted(s.diverged[1]))),
        halted=s.halted,
    )


# ---- the spec's side ----------------------------------------------------------------------------


def _seq(v: Any) -> tuple:
    if not isinstance(v, tuple):
        raise MappingError(f"expected a sequence, got {v!r}")
    return v


def _ids(hs: Any) -> tuple:
    return tuple(content_id(h) for h in _seq(hs))


def _cid(c: Any) -> int | None:
    """A content value: a prefix, or the empty prefix for garbage (None in the model)."""
    return content_id(_seq(c)) if c else None


def _per_rank(v: Any, cfg: Config) -> list:
    f = as_fcn(v)
    return [f[r] for r in range(cfg.R)]


def canon_spec_var(name: str, v: Any, cfg: Config) -> Any:
    """The canonical component of spec variable `name` holding TLA+ value `v`."""
    regions = range(len(cfg.payloads))
    if name == "nodes":
        return frozenset(
            NodeRow(
                id=nid,
                parent=r["parent"],
                key=_seq(r["key"]),
                dev=_seq(r["dev"]),
                host=None if r["host"] == NO_OBJECT else r["host"],
                durable=r["durable"],
                lock=r["lock"],
                pin=r["pin"],
                hits=r["hits"],
                touched=r["touched"],
                ns=r["ns"],
            )
            for nid, r in as_fcn(v).items()
        )
    if name in ("next_id", "clock", "next_rid"):
        return v
    if name == "dev_free":
        return frozenset(v)
    if name == "l2_free":
        return frozenset((i, p) for i in regions for p in v)
    if name == "objects":
        return frozenset(ObjectRow(key=k, base=o["base"], length=o["length"], committed=o["committed"], owner=o["owner"],
                                   pages=tuple(o["pages"]) if "pages" in o else ()) for k, o in as_fcn(v).items())
    if name == "pending":
        return frozenset(PendingRow(node=n, obj=n, locked=True) for n in v)
    if name == "writes":
        return _seq(v)
    if name == "requests":
        return frozenset(
            RequestRow(
                id=rid, tokens=_seq(q["tokens"]), out_pages=q["out_pages"], phase=q["phase"], node=q["node"], pages=_seq(q["pages"]), reload_tried=q["tried"],
                hit=q["hit"], hit_pages=q["hitlen"], hit_pin=q["hitpin"], ns=q["ns"],
            )
            for rid, q in as_fcn(v).items()
        )
    if name == "write_done":
        f = as_fcn(v)
        return tuple(f[r] for r in range(cfg.R))
    if name == "dev_content":
        return frozenset((p, content_id(pre)) for p, pre in as_fcn(v).items() if pre)
    if name == "host_content":
        return frozenset((i * cfg.L2 + h, content_id(pre)) for i in regions for h, pre in as_fcn(v).items() if pre)
    if name == "spill_queue":
        return _seq(v)
    if name == "spills":
        return tuple(SpillRow(obj=o["node"], node=o["node"], hashes=_ids(o["hashes"]), pinned=o["pinned"]) for o in _seq(v))
    if name == "reload_candidates":
        return frozenset(CandidateRow(rid=rid, anchor=c["anchor"], tokens=_seq(c["tokens"]), hashes=_ids(c["hashes"]), ns=c["ns"]) for rid, c in as_fcn(v).items())
    if name == "reloads":
        return tuple(
            ReloadRow(
                key=content_id(_seq(o["key"])),
                anchor=o["anchor"],
                tokens=_seq(o["tokens"]),
                hashes=_ids(o["hashes"]),
                waiters=_seq(o["waiters"]),
                ttl=o["ttl"],
                base=o["base"],
                length=o["length"],
                ns=o["ns"],
            )
            for o in _seq(v)
        )
    if name == "spill_gathered":
        return tuple(_per_rank(v, cfg))
    if name in ("spill_done", "reload_done", "disk_ok"):
        return tuple(tuple(_seq(x)) if name != "disk_ok" else x for x in _per_rank(v, cfg))
    if name == "disk_faults":
        return v
    if name == "l3":
        return frozenset(L3Row(rank=r, hash=content_id(_seq(h)), content=_cid(c)) for r, f in enumerate(_per_rank(v, cfg)) for h, c in as_fcn(f).items())
    if name == "spill_staged":
        return tuple(
            tuple(tuple((content_id(_seq(p[0])), _cid(p[1])) for p in _seq(op)) for op in _seq(staged)) for staged in _per_rank(v, cfg)
        )
    if name == "loads":
        return tuple(LoadRow(node=o["node"], pages=tuple(tuple(_seq(c)) for c in _seq(o["pages"]))) for o in _seq(v))
    if name in ("load_done", "commit_round", "acked"):
        return tuple(_per_rank(v, cfg))
    if name == "prepared":
        return frozenset((rid, None if nid == NO_NODE else nid) for rid, nid in as_fcn(v).items())
    if name == "diverged":
        if v == ():
            return None
        return (v["action"], tuple(sorted(v["ranks"])))
    if name == "halted":
        return None if v == "" else v
    raise MappingError(f"the spec has no variable '{name}'")


def canon_spec(values: dict[str, Any], cfg: Config) -> Canon:
    missing = set(SPEC_VARIABLES) - set(values)
    if missing:
        raise MappingError(f"state lacks spec variables {sorted(missing)}")
    return Canon(*(canon_spec_var(name, values[name], cfg) for name in SPEC_VARIABLES))


# ---- model state -> spec variables ------------------------------------------------------------------


def spec_values(s: ClusterState, names: ContentNames) -> dict[str, Any]:
    """The spec's variables for a model state, as TLA+ values (`kvsm.tla.values.to_tla`)."""
    cfg = s.config
    nodes = Fcn()
    for nid, n in s.nodes.items():
        nodes[nid] = Record(
            parent=n.parent,
            key=n.key,
            dev=n.dev,
            host=NO_OBJECT if n.host is None else n.host,
            durable=n.durable,
            lock=n.lock,
            pin=n.pin,
            hits=n.hits,
            touched=n.touched,
            ns=n.ns,
        )
    regions = [frozenset(p for base, k in runs for p in range(base, base + k)) for runs in s.l2_free]
    if any(r != regions[0] for r in regions):
        raise MappingError("the host regions' free sets differ; the spec has one region")
    pending = frozenset(s.pending.keys())
    for nid, b in s.pending.items():
        if b.obj != nid or not b.locked:
            raise MappingError(f"pending backup of node {nid} has object {b.obj} (locked={b.locked}); the spec's is the node's id, locked")
    host = Fcn()
    for h in range(cfg.L2):
        cs = {s.host_content.get(i * cfg.L2 + h) for i in range(len(cfg.payloads))}
        if len(cs) != 1:
            raise MappingError(f"host page {h} holds different content in different regions; the spec has one region")
        c = cs.pop()
        host[h] = () if c is None else names.prefix(c)
    reload_objs = {op.obj for op in s.reloads}
    for op in s.spills:
        if op.obj != op.node:
            raise MappingError(f"spill of node {op.node} has object {op.obj}; the spec's is the node's id")
    pre = names.prefix

    def content(c: int | None) -> tuple:
        return () if c is None else pre(c)

    def reload_rec(op: Any) -> Record:
        o = s.objects.get(op.obj)
        if o is None:
            raise MappingError(f"reload {op.key:#x} has no object {op.obj}")
        return Record(key=pre(op.key), anchor=op.anchor, tokens=op.tokens, hashes=tuple(pre(h) for h in op.hashes),
                      waiters=op.waiters, ttl=op.ttl, base=o.base, length=o.length, ns=op.ns)

    l3: dict[int, Fcn] = {r: Fcn() for r in range(cfg.R)}
    for (r, h), c in s.l3.items():
        l3[r][pre(h)] = content(c)
    return {
        "nodes": nodes,
        "next_id": s.next_id,
        "clock": s.clock,
        "next_rid": s.next_rid,
        "dev_free": frozenset(p for lane in s.dev_free for p in lane),
        "l2_free": regions[0],
        "objects": Fcn(
            {k: Record(base=o.base, length=o.length, committed=o.committed, owner=o.owner, **({"pages": o.pages} if o.pages else {}))
             for k, o in s.objects.items() if k not in reload_objs}
        ),
        "pending": pending,
        "writes": tuple(s.writes),
        "requests": Fcn(
            {
                rid: Record(tokens=r.tokens, out_pages=r.out_pages, phase=r.phase, node=r.node, pages=r.pages, tried=r.reload_tried,
                           hit=r.hit, hitlen=r.hit_pages, hitpin=r.hit_pin, ns=r.ns)
                for rid, r in s.requests.items()
            }
        ),
        "write_done": Fcn({r: d for r, d in enumerate(s.write_done)}),
        "dev_content": Fcn({p: (names.prefix(s.dev_content[p]) if p in s.dev_content else ()) for p in range(cfg.device_pages)}),
        "host_content": host,
        "spill_queue": tuple(s.spill_queue),
        "spills": tuple(Record(node=op.node, hashes=tuple(pre(h) for h in op.hashes), pinned=op.pinned) for op in s.spills),
        "reload_candidates": Fcn(
            {rid: Record(anchor=c.anchor, tokens=c.tokens, hashes=tuple(pre(h) for h in c.hashes), ns=c.ns) for rid, c in s.reload_candidates.items()}
        ),
        "reloads": tuple(reload_rec(op) for op in s.reloads),
        "spill_gathered": Fcn({r: x for r, x in enumerate(s.spill_gathered)}),
        "spill_done": Fcn({r: tuple(x) for r, x in enumerate(s.spill_done)}),
        "reload_done": Fcn({r: tuple(x) for r, x in enumerate(s.reload_done)}),
        "disk_ok": Fcn({r: x for r, x in enumerate(s.disk_ok)}),
        "disk_faults": s.disk_faults,
        "l3": Fcn(l3),
        "spill_staged": Fcn(
            {r: tuple(tuple((pre(h), content(c)) for h, c in op) for op in staged) for r, staged in enumerate(s.spill_staged)}
        ),
        "loads": tuple(Record(node=op.node, pages=tuple(tuple(x) for x in op.pages)) for op in s.loads),
        "load_done": Fcn({r: x for r, x in enumerate(s.load_done)}),
        "commit_round": Fcn({r: x for r, x in enumerate(s.commit_round)}),
        "acked": Fcn({r: x for r, x in enumerate(s.acked)}),
        "prepared": Fcn({rid: NO_NODE if nid is None else nid for rid, nid in s.prepared.items()}),
        "diverged": () if s.diverged is None else Record(action=s.diverged[0], ranks=frozenset(s.diverged[1])),
        "halted": "" if s.halted is None else s.halted,
    }
