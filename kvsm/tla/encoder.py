"""Spec values of model states (kvsm.tla.specmap's correspondence) written as compact
TLA+ text (`kvsm.tla.compact`): every spec variable of a state, for the first state of
a trace module's stretch. The deltas of its steps are `kvsm.tla.delta`'s."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .. import content
from ..config import Config
from ..state import ClusterState
from .compact import Tokens, ints, intset, tla_bool
from .canon import MappingError, NO_NODE, NO_OBJECT

# A record's fields: (spec field, model attribute, the field's text of a model record)
Fields = tuple[tuple[str, str, Callable[[Any], str]], ...]


class Encoder:
    """Spec values of model states (kvsm.tla.specmap's correspondence), written as
    compact TLA+ text: whole variables, for a segment's first state."""

    def __init__(self, cfg: Config, tokens: Tokens) -> None:
        self.cfg = cfg
        self.tok = tokens
        self.regions = len(cfg.payloads)
        self._record_fields()

    # -- records --
    # Each record's fields in the order of its constructor in the trace module (`Nd`,
    # `Ob`, `Rq`): (spec field, model attribute, the field's text of a model record);
    # a record is written whole from these and a delta from those that changed.
    def _record_fields(self) -> None:
        tok, dev = self.tok, self.dev
        self.node_fields: Fields = (
            ("parent", "parent", lambda n: str(n.parent)),
            ("key", "key", lambda n: tok.slice(n.hashes[-1] if n.hashes else content.ROOT, n.key)),
            ("dev", "dev", lambda n: dev(n.dev)),
            ("host", "host", lambda n: str(NO_OBJECT if n.host is None else n.host)),
            ("durable", "durable", lambda n: tla_bool(n.durable)),
            ("lock", "lock", lambda n: str(n.lock)),
            ("pin", "pin", lambda n: str(n.pin)),
            ("hits", "hits", lambda n: str(n.hits)),
            ("touched", "touched", lambda n: str(n.touched)),
            ("ns", "ns", lambda n: str(n.ns)),
        )
        self.obj_fields: Fields = (
            ("base", "base", lambda o: str(o.base)),
            ("length", "length", lambda o: str(o.length)),
            ("committed", "committed", lambda o: tla_bool(o.committed)),
            ("owner", "owner", lambda o: str(o.owner)),
        )
        if self.cfg.l2_alloc == "pages":  # (an object lists its pages: KVTree's L2Alloc)
            self.obj_fields += (("pages", "pages", lambda o: ints(o.pages)),)
        self.request_fields: Fields = (
            ("tokens", "tokens", lambda r: tok.ref(r.tokens)),
            ("out_pages", "out_pages", lambda r: str(r.out_pages)),
            ("phase", "phase", lambda r: f'"{r.phase}"'),
            ("node", "node", lambda r: str(r.node)),
            ("pages", "pages", lambda r: dev(r.pages)),
            ("tried", "reload_tried", lambda r: tla_bool(r.reload_tried)),
            ("hit", "hit", lambda r: str(r.hit)),
            ("hitlen", "hit_pages", lambda r: str(r.hit_pages)),
            ("hitpin", "hit_pin", lambda r: tla_bool(r.hit_pin)),
            ("ns", "ns", lambda r: str(r.ns)),
        )

    @staticmethod
    def record(constructor: str, fields: Fields, r: Any) -> str:
        """Record `r` written whole, with the trace module's `constructor`."""
        return f"{constructor}(" + ", ".join(text(r) for _, _, text in fields) + ")"

    def node(self, n: Any) -> str:
        return self.record("Nd", self.node_fields, n)

    def obj(self, o: Any) -> str:
        return self.record("ObP" if self.cfg.l2_alloc == "pages" else "Ob", self.obj_fields, o)

    def request(self, r: Any) -> str:
        return self.record("Rq", self.request_fields, r)

    def candidate(self, c: Any) -> str:
        return f"[anchor |-> {c.anchor}, tokens |-> {self.tok.tokens_of(c.tokens)}, hashes |-> {self.tok.hashes(c.hashes)}, ns |-> {c.ns}]"

    def spills(self, s: ClusterState) -> str:
        for op in s.spills:
            if op.obj != op.node:
                raise MappingError(f"spill of node {op.node} has object {op.obj}; the spec's is the node's id")
        return "<<" + ", ".join(f"[node |-> {op.node}, hashes |-> {self.tok.hashes(op.hashes)}, pinned |-> {tla_bool(op.pinned)}]" for op in s.spills) + ">>"

    def reloads(self, s: ClusterState) -> str:
        out = []
        for op in s.reloads:
            o = s.objects.get(op.obj)
            if o is None:
                raise MappingError(f"reload {op.key:#x} has no object {op.obj}")
            out.append(
                f"[key |-> {self.tok.content(op.key)}, anchor |-> {op.anchor}, tokens |-> {self.tok.tokens_of(op.tokens)}, "
                f"hashes |-> {self.tok.hashes(op.hashes)}, waiters |-> {ints(op.waiters)}, ttl |-> {op.ttl}, "
                f"base |-> {o.base}, length |-> {o.length}, ns |-> {op.ns}]"
            )
        return "<<" + ", ".join(out) + ">>"

    @staticmethod
    def per_rank(xs: Iterable[Any], f: Any = str) -> str:
        """A function on the ranks, from the tuple of its values (`PR`)."""
        return "PR(<<" + ", ".join(f(x) for x in xs) + ">>)"

    def dev(self, pages: tuple[int, ...]) -> str:
        """Device pages, one per position: page i of a run is in lane i mod R (the lowest
        free page of that lane when allocated), so each lane's pages often form one
        progression; written per lane (`Lanes`) when that is shorter."""
        plain = ints(pages)
        R = self.cfg.R
        if R == 1 or len(pages) < 2 * R:
            return plain
        lanes = "Lanes(<<" + ", ".join(ints(pages[r::R]) for r in range(R)) + f">>, {len(pages)})"
        return lanes if len(lanes) < len(plain) else plain

    def bools(self, xs: Iterable[bool]) -> str:
        return "<<" + ", ".join(tla_bool(x) for x in xs) + ">>"

    def staged(self, s: ClusterState) -> str:
        def ops(staged: Any) -> str:
            return "<<" + ", ".join(
                "<<" + ", ".join(f"<<{self.tok.content(h)}, {self.tok.content(c)}>>" for h, c in op) + ">>" for op in staged
            ) + ">>"

        return self.per_rank(s.spill_staged, ops)

    # -- whole variables --
    def whole(self, s: ClusterState) -> dict[str, str]:
        """Every spec variable of state `s`."""
        cfg = self.cfg
        regions = self.l2_regions(s)
        for nid, b in s.pending.items():
            if b.obj != nid or not b.locked:
                raise MappingError(f"pending backup of node {nid} has object {b.obj} (locked={b.locked}); the spec's is the node's id, locked")
        reload_objs = {op.obj for op in s.reloads}
        l3: dict[int, list[tuple[int, int | None]]] = {r: [] for r in range(cfg.R)}
        for (r, h), c in s.l3.items():
            l3[r].append((h, c))
        return {
            "nodes": "(" + " @@ ".join(f"{nid} :> {self.node(n)}" for nid, n in sorted(s.nodes.items())) + ")",
            "next_id": str(s.next_id),
            "clock": str(s.clock),
            "next_rid": str(s.next_rid),
            "dev_free": intset(p for lane in s.dev_free for p in lane),
            "l2_free": intset(regions),
            "objects": self.fcn((k, self.obj(o)) for k, o in sorted(s.objects.items()) if k not in reload_objs),
            "pending": intset(s.pending.keys()),
            "writes": ints(s.writes),
            "requests": self.fcn((rid, self.request(r)) for rid, r in sorted(s.requests.items())),
            "write_done": self.per_rank(s.write_done),
            "dev_content": f"Fill({self.tok.fill([(p, s.dev_content.get(p)) for p in range(cfg.device_pages)], cfg.R)})",
            "host_content": f"Fill({self.tok.fill([(h, self.host_page(s, h)) for h in range(cfg.L2)], cfg.R)})",
            "spill_queue": ints(s.spill_queue),
            "spills": self.spills(s),
            "reload_candidates": self.fcn((rid, self.candidate(c)) for rid, c in sorted(s.reload_candidates.items())),
            "reloads": self.reloads(s),
            "spill_gathered": self.per_rank(s.spill_gathered),
            "spill_done": self.per_rank(s.spill_done, self.bools),
            "reload_done": self.per_rank(s.reload_done, self.bools),
            "disk_ok": self.per_rank(s.disk_ok, tla_bool),
            "disk_faults": str(s.disk_faults),
            "l3": self.per_rank(
                (l3[r] for r in range(cfg.R)),
                lambda es: self.fcn((self.tok.content(h), self.tok.content(c)) for h, c in es),
            ),
            "spill_staged": self.staged(s),
            "loads": self.loads(s),
            "load_done": self.per_rank(s.load_done),
            "commit_round": self.per_rank(s.commit_round),
            "acked": self.per_rank(s.acked),
            "prepared": self.prepared(s),
            "diverged": self.diverged(s),
            "halted": self.halted(s),
        }

    @staticmethod
    def halted(s: ClusterState) -> str:
        """The step at which the reference stops (a raise or an assert): `""` while none."""
        return '""' if s.halted is None else f'"{s.halted}"'

    @staticmethod
    def diverged(s: ClusterState) -> str:
        """Where a rank decided otherwise than rank 0 (an injected defect's divergence):
        `<<>>` while none has, else `[action, ranks]`."""
        if s.diverged is None:
            return "<<>>"
        name, ranks = s.diverged
        return f'[action |-> "{name}", ranks |-> {intset(ranks)}]'

    @staticmethod
    def loads(s: ClusterState) -> str:
        return "<<" + ", ".join(
            f"[node |-> {op.node}, pages |-> <<{', '.join(f'<<{d}, {h}>>' for d, h in op.pages)}>>]" for op in s.loads
        ) + ">>"

    def prepared(self, s: ClusterState) -> str:
        return self.fcn((rid, NO_NODE if nid is None else nid) for rid, nid in sorted(s.prepared.items()))

    @staticmethod
    def fcn(items: Iterable[tuple[Any, str]]) -> str:
        parts = [f"{k} :> {v}" for k, v in items]
        return "EmptyFn" if not parts else "(" + " @@ ".join(parts) + ")"

    def l2_regions(self, s: ClusterState) -> frozenset[int]:
        runs = [tuple(r) for r in s.l2_free]
        if any(r != runs[0] for r in runs):
            raise MappingError("the host regions' free sets differ; the spec has one region")
        return frozenset(p for base, k in runs[0] for p in range(base, base + k))

    def host_page(self, s: ClusterState, h: int) -> int | None:
        L2 = self.cfg.L2
        c = s.host_content.get(h)
        for i in range(1, self.regions):
            if s.host_content.get(i * L2 + h) != c:
                raise MappingError(f"host page {h} holds different content in different regions; the spec has one region")
        return c
