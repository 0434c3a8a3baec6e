"""The canonical form of a cache state, `Canon`, into which both the spec's variables
(spec/KVCache.tla) and the Python model's `ClusterState` map (kvsm.tla.specmap does
the mapping): the state's identity without any derived structure (children, ondev,
hashes, victim indexes, digest sums are left out), free sets as sets of pages, and
page content as the model's content identity (`kvsm.content`). Its rows are named
records; `readable` prints a canonical state as plain JSON with content shown as the
prefix of page symbols it stands for (`ContentNames`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, NamedTuple

from .. import content

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
    "acked",
    "prepared",
    "diverged",
    "halted",
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
    ns: int = 0  # its namespace


class ObjectRow(NamedTuple):
    key: int
    base: int
    length: int
    committed: bool
    owner: int
    pages: tuple[int, ...] = ()  # l2_alloc = "pages"


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
    hit: int = 0  # the carried host hit (carry_host_hit): node, pages, pinned
    hit_pages: int = 0
    hit_pin: bool = False
    ns: int = 0  # its namespace


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
    ns: int = 0


class ReloadRow(NamedTuple):
    key: int  # content id
    anchor: int
    tokens: tuple
    hashes: tuple  # content ids
    waiters: tuple
    ttl: int
    base: int | None  # its reserved object's range (None when the model has no object)
    length: int | None
    ns: int = 0


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
    acked: tuple  # per rank: writes at the head of `writes` whose final ack it appended
    prepared: frozenset  # (rid, node id of its prepared backup, or None when its reserve did not fit)
    diverged: tuple | None  # (transition name, ranks ascending) or None
    halted: str | None  # the step at which the reference stops, or None


assert Canon._fields == SPEC_VARIABLES


@lru_cache(maxsize=1 << 16)
def content_id(prefix: tuple[int, ...]) -> int:
    """The model's content identity of the page whose prefix (through it) is `prefix`:
    a prefix that starts with the virtual symbol -k is namespace k's (the spec's NsPre)."""
    if prefix and prefix[0] < 0:
        return content.prefix_content_in(-prefix[0], prefix[1:])[-1]
    return content.prefix_content(prefix)[-1]


# ---- readable form --------------------------------------------------------------------------------


class ContentNames:
    """Content identity -> the prefix of page symbols it stands for, for every prefix
    of the token sequences it has been told about."""

    def __init__(self, token_seqs: Iterable[tuple[int, ...]] = ()) -> None:
        self.names: dict[int, tuple[int, ...]] = {}
        for t in token_seqs:
            self.add(t)

    def add(self, tokens: tuple[int, ...], ns: int = 0) -> None:
        """The prefixes of `tokens` in namespace 0 and, when `ns` is not 0, in namespace
        `ns` (after its virtual symbol -ns, as the spec writes them)."""
        for k, c in enumerate(content.prefix_content(tokens), start=1):
            self.names.setdefault(c, tuple(tokens[:k]))
        if ns:
            for k, c in enumerate(content.prefix_content_in(ns, tokens), start=1):
                self.names.setdefault(c, (-ns,) + tuple(tokens[:k]))

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
                **({"ns": n.ns} if n.ns else {}),
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
            {"id": r.id, "tokens": list(r.tokens), "out_pages": r.out_pages, "phase": r.phase, "node": r.node, "pages": list(r.pages), **({"ns": r.ns} if r.ns else {}),
             **({"reload_tried": True} if r.reload_tried else {}),
             **({"hit": r.hit, "hit_pages": r.hit_pages, "hit_pin": r.hit_pin} if r.hit else {})}
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
    if any(c.acked):
        out["acked"] = list(c.acked)
    if c.prepared:
        out["prepared"] = {str(r): n for r, n in sorted(c.prepared)}
    if c.diverged is not None:
        out["diverged"] = {"action": c.diverged[0], "ranks": list(c.diverged[1])}
    if c.halted is not None:
        out["halted"] = c.halted
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
