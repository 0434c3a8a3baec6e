"""How the spec's variables (spec/KVCache.tla) and the Python model's `ClusterState`
correspond.

Both sides map into one canonical form, `Canon`: the state's identity without any
derived structure (children, ondev, hashes, victim indexes, digest sums are left
out), free sets as sets of pages, and page content as the model's content identity
(`kvsm.content`): the spec keeps the prefix of page symbols itself, the model its
chained hash. The spec has one host region; the model keeps one per payload, all
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

from functools import lru_cache
from typing import Any, Iterable, NamedTuple

from .. import content
from ..config import Config
from ..state import ClusterState
from .values import Fcn, Record, as_fcn

SPEC_VARIABLES = (
    "nodes",
    "next_id",
    "clock",
    "next_rid",
    "dev_free",
    "l2_free",
    "objects",
    "pending",
    "writes",
    "requests",
    "write_done",
    "dev_content",
    "host_content",
    "spill_queue",
    "spills",
    "reload_candidates",
    "reloads",
    "spill_gathered",
    "spill_done",
    "reload_done",
    "disk_ok",
    "disk_faults",
    "l3",
    "spill_staged",
    "loads",
    "load_done",
    "commit_round",
    "prepared",
    "diverged",
)

NO_OBJECT = -1  # the spec's `host` of a node with no committed L2 copy
NO_NODE = -1  # the spec's prepared backup of a request whose reserve did not fit


class MappingError(ValueError):
    """A value that has no counterpart on the other side; the message says which."""


# The rows of the canonical form's collections. Rows compare and hash as the tuples of
# their fields, so both sides build them alike and the graphs compare them as values.


class NodeRow(NamedTuple):
    id: int
    parent: int
    key: tuple
    dev: tuple
    host: int | None  # the committed L2 object, None without one
    durable: bool
    lock: int
    pin: int
    hits: int
    touched: int


class ObjectRow(NamedTuple):
    key: int
    base: int
    length: int
    committed: bool
    owner: int


class PendingRow(NamedTuple):
    node: int
    obj: int
    locked: bool


class RequestRow(NamedTuple):
    id: int
    tokens: tuple
    out_pages: int
    phase: str
    node: int
    pages: tuple
    reload_tried: bool


class SpillRow(NamedTuple):
    obj: int
    node: int
    hashes: tuple  # content ids
    pinned: tuple


class CandidateRow(NamedTuple):
    rid: int
    anchor: int
    tokens: tuple
    hashes: tuple  # content ids


class ReloadRow(NamedTuple):
    key: int  # content id
    anchor: int
    tokens: tuple
    hashes: tuple  # content ids
    waiters: tuple
    ttl: int
    base: int | None  # its reserved object's range (None when the model has no object)
    length: int | None


class L3Row(NamedTuple):
    rank: int
    hash: int  # content id
    content: int | None


class LoadRow(NamedTuple):
    node: int
    pages: tuple  # ((device page, host page), ...)


class Canon(NamedTuple):
    nodes: frozenset[NodeRow]
    next_id: int
    clock: int
    next_rid: int
    dev_free: frozenset  # pages
    l2_free: frozenset  # (region, page)
    objects: frozenset[ObjectRow]
    pending: frozenset[PendingRow]
    writes: tuple
    requests: frozenset[RequestRow]
    write_done: tuple
    dev_content: frozenset  # (page, content id)
    host_content: frozenset  # (region * L2 + page, content id)
    spill_queue: tuple  # node ids
    spills: tuple[SpillRow, ...]
    reload_candidates: frozenset[CandidateRow]
    reloads: tuple[ReloadRow, ...]
    spill_gathered: tuple
    spill_done: tuple  # per rank: ok bits
    reload_done: tuple  # per rank: ok bits
    disk_ok: tuple
    disk_faults: int
    l3: frozenset[L3Row]
    spill_staged: tuple  # per rank: per spill: ((hash, content id or None), ...)
    loads: tuple[LoadRow, ...]
    load_done: tuple
    commit_round: tuple  # per rank: 0 idle, 1 entered, 2 returned early (`kvsm.state.Round`)
    prepared: frozenset  # (rid, node id of its prepared backup, or None when its reserve did not fit)
    diverged: tuple | None  # (transition name, ranks ascending) or None


assert Canon._fields == SPEC_VARIABLES


@lru_cache(maxsize=1 << 16)
def content_id(prefix: tuple[int, ...]) -> int:
    """The model's content identity of the page whose prefix (through it) is `prefix`."""
    return content.prefix_content(prefix)[-1]


# ---- the model's side ---------------------------------------------------------------------------


def canon_model(s: ClusterState) -> Canon:
    reload_objs = {op.obj for op in s.reloads}

    def reload_row(op: Any) -> ReloadRow:
        o = s.objects.get(op.obj)
        base, length = (None, None) if o is None else (o.base, o.length)
        return ReloadRow(key=op.key, anchor=op.anchor, tokens=op.tokens, hashes=op.hashes, waiters=op.waiters, ttl=op.ttl, base=base, length=length)

    return Canon(
        nodes=frozenset(NodeRow(id=n.id, parent=n.parent, key=n.key, dev=n.dev, host=n.host, durable=n.durable, lock=n.lock, pin=n.pin, hits=n.hits, touched=n.touched) for n in s.nodes.values()),
        next_id=s.next_id,
        clock=s.clock,
        next_rid=s.next_rid,
        dev_free=frozenset(p for lane in s.dev_free for p in lane),
        l2_free=frozenset((i, p) for i, runs in enumerate(s.l2_free) for base, n in runs for p in range(base, base + n)),
        objects=frozenset(ObjectRow(key=k, base=o.base, length=o.length, committed=o.committed, owner=o.owner) for k, o in s.objects.items() if k not in reload_objs),
        pending=frozenset(PendingRow(node=k, obj=b.obj, locked=b.locked) for k, b in s.pending.items()),
        writes=tuple(s.writes),
        requests=frozenset(RequestRow(id=r.id, tokens=r.tokens, out_pages=r.out_pages, phase=r.phase, node=r.node, pages=r.pages, reload_tried=r.reload_tried) for r in s.requests.values()),
        write_done=tuple(s.write_done),
        dev_content=frozenset(s.dev_content.items()),
        host_content=frozenset(s.host_content.items()),
        spill_queue=tuple(s.spill_queue),
        spills=tuple(SpillRow(obj=op.obj, node=op.node, hashes=op.hashes, pinned=op.pinned) for op in s.spills),
        reload_candidates=frozenset(CandidateRow(rid=rid, anchor=c.anchor, tokens=c.tokens, hashes=c.hashes) for rid, c in s.reload_candidates.items()),
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
        prepared=frozenset(s.prepared.items()),
        diverged=None if s.diverged is None else (s.diverged[0], tuple(sorted(s.diverged[1]))),
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
        return frozenset(ObjectRow(key=k, base=o["base"], length=o["length"], committed=o["committed"], owner=o["owner"]) for k, o in as_fcn(v).items())
    if name == "pending":
        return frozenset(PendingRow(node=n, obj=n, locked=True) for n in v)
    if name == "writes":
        return _seq(v)
    if name == "requests":
        return frozenset(
            RequestRow(
                id=rid, tokens=_seq(q["tokens"]), out_pages=q["out_pages"], phase=q["phase"], node=q["node"], pages=_seq(q["pages"]), reload_tried=q["tried"]
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
        return frozenset(CandidateRow(rid=rid, anchor=c["anchor"], tokens=_seq(c["tokens"]), hashes=_ids(c["hashes"])) for rid, c in as_fcn(v).items())
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
    if name in ("load_done", "commit_round"):
        return tuple(_per_rank(v, cfg))
    if name == "prepared":
        return frozenset((rid, None if nid == NO_NODE else nid) for rid, nid in as_fcn(v).items())
    if name == "diverged":
        if v == ():
            return None
        return (v["action"], tuple(sorted(v["ranks"])))
    raise MappingError(f"the spec has no variable '{name}'")


def canon_spec(values: dict[str, Any], cfg: Config) -> Canon:
    missing = set(SPEC_VARIABLES) - set(values)
    if missing:
        raise MappingError(f"state lacks spec variables {sorted(missing)}")
    return Canon(*(canon_spec_var(name, values[name], cfg) for name in SPEC_VARIABLES))


# ---- readable form --------------------------------------------------------------------------------


class ContentNames:
    """Content identity -> the prefix of page symbols it stands for, for every prefix
    of the token sequences it has been told about."""

    def __init__(self, token_seqs: Iterable[tuple[int, ...]] = ()) -> None:
        self.names: dict[int, tuple[int, ...]] = {}
        for t in token_seqs:
            self.add(t)

    def add(self, tokens: tuple[int, ...]) -> None:
        for k, c in enumerate(content.prefix_content(tokens), start=1):
            self.names.setdefault(c, tuple(tokens[:k]))

    def prefix(self, c: int) -> tuple[int, ...]:
        try:
            return self.names[c]
        except KeyError:
            raise MappingError(f"content {c:#x} is not the identity of any prefix of the requests seen") from None

    def show(self, c: int) -> Any:
        return list(self.names[c]) if c in self.names else f"{c:#x}"


def readable(c: Canon, names: ContentNames) -> dict[str, Any]:
    """A canonical state as plain JSON, content shown as the prefix it holds (the L3
    part only when it is not in its initial state)."""
    out = {
        "nodes": [
            {
                "id": n.id,
                "parent": n.parent,
                "key": list(n.key),
                "dev": list(n.dev),
                "host": n.host,
                "lock": n.lock,
                "hits": n.hits,
                "touched": n.touched,
                **({"durable": n.durable} if n.durable else {}),
                **({"pin": n.pin} if n.pin else {}),
            }
            for n in sorted(c.nodes)
        ],
        "next_id": c.next_id,
        "clock": c.clock,
        "next_rid": c.next_rid,
        "dev_free": sorted(c.dev_free),
        "l2_free": [list(x) for x in sorted(c.l2_free)],
        "objects": [o._asdict() for o in sorted(c.objects)],
        "pending": [b._asdict() for b in sorted(c.pending)],
        "writes": list(c.writes),
        "requests": [
            {"id": r.id, "tokens": list(r.tokens), "out_pages": r.out_pages, "phase": r.phase, "node": r.node, "pages": list(r.pages),
             **({"reload_tried": True} if r.reload_tried else {})}
            for r in sorted(c.requests, key=lambda r: r.id)
        ],
        "write_done": list(c.write_done),
        "dev_content": {str(p): names.show(x) for p, x in sorted(c.dev_content)},
        "host_content": {str(p): names.show(x) for p, x in sorted(c.host_content)},
    }
    if c.loads or any(c.load_done):
        out["loads"] = [{"node": op.node, "pages": [list(x) for x in op.pages]} for op in c.loads]
        out["load_done"] = list(c.load_done)
    if any(c.commit_round):
        out["commit_round"] = list(c.commit_round)
    if c.prepared:
        out["prepared"] = {str(r): n for r, n in sorted(c.prepared)}
    if c.diverged is not None:
        out["diverged"] = {"action": c.diverged[0], "ranks": list(c.diverged[1])}
    if c.spill_queue or c.spills or c.reload_candidates or c.reloads or c.l3 or c.disk_faults or not all(c.disk_ok) \
            or any(c.spill_gathered) or any(c.spill_done) or any(c.reload_done) or any(c.spill_staged):
        hs = lambda xs: [names.show(h) for h in xs]  # noqa: E731
        out.update(
            {
                "spill_queue": list(c.spill_queue),
                "spills": [{"obj": op.obj, "node": op.node, "hashes": hs(op.hashes), "pinned": op.pinned} for op in c.spills],
                "reload_candidates": [
                    {"rid": rc.rid, "anchor": rc.anchor, "tokens": list(rc.tokens), "hashes": hs(rc.hashes)} for rc in sorted(c.reload_candidates)
                ],
                "reloads": [
                    op._asdict() | {"key": names.show(op.key), "tokens": list(op.tokens), "hashes": hs(op.hashes), "waiters": list(op.waiters)}
                    for op in c.reloads
                ],
                "spill_gathered": list(c.spill_gathered),
                "spill_done": [list(x) for x in c.spill_done],
                "reload_done": [list(x) for x in c.reload_done],
                "disk_ok": list(c.disk_ok),
                "disk_faults": c.disk_faults,
                "l3": sorted(([x.rank, names.show(x.hash), None if x.content is None else names.show(x.content)] for x in c.l3), key=str),
                "spill_staged": [[[[names.show(h), None if x is None else names.show(x)] for h, x in op] for op in st] for st in c.spill_staged],
            }
        )
    return out


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
                      waiters=op.waiters, ttl=op.ttl, base=o.base, length=o.length)

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
            {k: Record(base=o.base, length=o.length, committed=o.committed, owner=o.owner) for k, o in s.objects.items() if k not in reload_objs}
        ),
        "pending": pending,
        "writes": tuple(s.writes),
        "requests": Fcn(
            {
                rid: Record(tokens=r.tokens, out_pages=r.out_pages, phase=r.phase, node=r.node, pages=r.pages, tried=r.reload_tried)
                for rid, r in s.requests.items()
            }
        ),
        "write_done": Fcn({r: d for r, d in enumerate(s.write_done)}),
        "dev_content": Fcn({p: (names.prefix(s.dev_content[p]) if p in s.dev_content else ()) for p in range(cfg.device_pages)}),
        "host_content": host,
        "spill_queue": tuple(s.spill_queue),
        "spills": tuple(Record(node=op.node, hashes=tuple(pre(h) for h in op.hashes), pinned=op.pinned) for op in s.spills),
        "reload_candidates": Fcn(
            {rid: Record(anchor=c.anchor, tokens=c.tokens, hashes=tuple(pre(h) for h in c.hashes)) for rid, c in s.reload_candidates.items()}
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
        "prepared": Fcn({rid: NO_NODE if nid is None else nid for rid, nid in s.prepared.items()}),
        "diverged": () if s.diverged is None else Record(action=s.diverged[0], ranks=frozenset(s.diverged[1])),
    }
