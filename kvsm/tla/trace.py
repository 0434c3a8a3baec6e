"""The trace modules of `kvsm validate`: a stretch of a log, with the model's states,
written as a TLA+ module that TLC follows step by step.

A trace module starts from one model state written in full (`SegInit`) and gives,
for every step, the transition with its arguments and what the model's step changed
in each spec variable (its *delta*). `TraceNext` takes the spec's action named by the
step and then compares every variable with the current value patched by the delta
(an unchanged variable with itself), so every variable of every state is compared,
and the variables that differ are named (`bad`); TLC stops at the first step whose
action is not enabled (a deadlock) or whose successor differs (the invariant
`TraceOk`). The comparison against "current value patched" is the model's next state
because the current value is, by induction from the compared initial state, the
model's current state.

Why deltas and not states: the default config's state holds 2,048 device and 4,096
host page contents, so a literal state per step makes the module grow with the state
size times the steps (1.7 MB for 1,000 steps, which TLC parses at about half a
megabyte a second) and evaluating every literal state costs TLC as much again. A
delta grows with what the step changed, and is applied by TLC's built-in
operators (`@@`, `\\`, `\\cup`), which are native.

Values are written compactly, each checked in Python to denote exactly the model's
value: page contents and page hashes as prefixes of the token sequences of the log's
arrivals (`Cnt(j, k)` is the first `k` symbols of `Tok[j]`), node keys as slices of
them, runs of integers as arithmetic progressions (`Ar`, `ArS`), and page contents
of a run of pages as one run (`Fill`).
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import content
from ..config import Config
from ..state import ClusterState
from ..transitions import Transition
from .models import ModelConfig, constant_bindings
from .frame import frames
from .runner import spec_dir
from .specmap import SPEC_VARIABLES, MappingError, NO_NODE, NO_OBJECT
from .values import to_tla

MODULE = "KVTrace"

# Each transition's parameters in the order of the spec's operator: log argument
# names, and "rank" for the rank of a per-rank transition.
SPEC_PARAMS: dict[str, tuple[str, ...]] = {
    "Arrive": ("rid", "tokens", "out_pages"),
    "Match": ("rid",),
    "Insert": ("rid",),
    "Finish": ("rid",),
    "Abort": ("rid",),
    "Split": ("node", "at"),
    "Reserve": ("node", "fits"),
    "Prepare": ("rid", "fits"),
    "WriteDone": ("rank",),
    "CommitCall": ("rank",),
    "Commit": (),
    "Rollback": ("node",),
    "EvictDevice": ("node",),
    "EvictHost": ("node",),
    "LoadBack": ("rid",),
    "LoadDone": ("rank",),
    "SpillSubmit": (),
    "SpillGathered": ("rank",),
    "SpillDone": ("rank", "ok"),
    "SpillAck": (),
    "ReloadMark": ("rid",),
    "ReloadReserve": ("rid",),
    "ReloadDone": ("rank", "ok"),
    "ReloadAdmit": (),
    "ReloadExpire": (),
    "DiskFail": ("rank",),
    "DiskRecover": ("rank",),
}

# How each variable's delta is applied to its current value (an operator of the trace
# module); None: the delta is the new value itself.
APPLY: dict[str, str | None] = {
    "nodes": "ApplyMap",
    "next_id": None,
    "clock": None,
    "next_rid": None,
    "dev_free": "ApplySet",
    "l2_free": "ApplySet",
    "objects": "ApplyMap",
    "pending": "ApplySet",
    "writes": "ApplySeq",
    "requests": "ApplyMap",
    "write_done": None,
    "dev_content": "ApplyDev",
    "host_content": "ApplyFill",
    "spill_queue": "ApplySeq",
    "spills": None,
    "reload_candidates": "ApplyMap",
    "reloads": None,
    "spill_gathered": None,
    "spill_done": None,
    "reload_done": None,
    "disk_ok": None,
    "disk_faults": None,
    "l3": "ApplyRanks",
    "spill_staged": None,
    "loads": None,
    "load_done": None,
    "commit_round": None,
    "prepared": None,
    "diverged": None,
}
assert tuple(APPLY) == SPEC_VARIABLES

_MISSING = object()


def _b(x: bool) -> str:
    return "TRUE" if x else "FALSE"


def _runs(xs: list[int], min_run: int = 3) -> list[tuple[int, int, int]]:
    """Maximal arithmetic runs (first, stride, count) of a list of integers, greedily;
    a run shorter than `min_run` is split into single elements (stride 1)."""
    out: list[tuple[int, int, int]] = []
    i, n = 0, len(xs)
    while i < n:
        if i + 1 < n:
            s = xs[i + 1] - xs[i]
            j = i + 1
            while j + 1 < n and xs[j + 1] - xs[j] == s:
                j += 1
            if s != 0 and j - i + 1 >= min_run:
                out.append((xs[i], s, j - i + 1))
                i = j + 1
                continue
        out.append((xs[i], 1, 1))
        i += 1
    return out


def _wrap(text: str, width: int = 160) -> str:
    """Break a long line of TLA+ after commas: TLC's parser slows down with the length
    of a line (a value written on one 100k-character line parses five times slower).
    Generated values hold no string with a comma in it."""
    if len(text) <= width:
        return text
    parts = text.split(", ")
    lines, cur = [], parts[0]
    for part in parts[1:]:
        if len(cur) >= width:
            lines.append(cur + ",")
            cur = "    " + part
        else:
            cur += ", " + part
    lines.append(cur)
    return "\n".join(lines)


def ints(xs: Iterable[int]) -> str:
    """A sequence of integers: literal elements and arithmetic runs `Ar(first, stride, n)`."""
    xs = list(xs)
    if len(xs) < 3:
        return "<<" + ", ".join(map(str, xs)) + ">>"
    pieces: list[str] = []
    lit: list[str] = []
    for a, s, n in _runs(xs):
        if n == 1:
            lit.append(str(a))
            continue
        if lit:
            pieces.append("<<" + ", ".join(lit) + ">>")
            lit = []
        pieces.append(f"Ar({a}, {s}, {n})")
    if lit:
        pieces.append("<<" + ", ".join(lit) + ">>")
    return pieces[0] if len(pieces) == 1 else "(" + " \\o ".join(pieces) + ")"


def intset(xs: Iterable[int]) -> str:
    """A set of integers: intervals `a..b`, progressions `ArS(first, stride, n)` and a
    literal set of the rest."""
    xs = sorted(xs)
    if not xs:
        return "{}"
    pieces: list[str] = []
    lit: list[str] = []
    for a, s, n in _runs(xs, min_run=4):
        if n == 1:
            lit.append(str(a))
        elif s == 1:
            pieces.append(f"{a}..{a + n - 1}")
        else:
            pieces.append(f"ArS({a}, {s}, {n})")
    if lit:
        pieces.append("{" + ", ".join(lit) + "}")
    return pieces[0] if len(pieces) == 1 else "(" + " \\cup ".join(pieces) + ")"


class Tokens:
    """The token sequences of the log's arrivals (`Tok[j]`, j from 1, numbered over the
    whole log) and, for every content identity that is a prefix of one of them, where
    it first occurs: `(j, k)`, the first k symbols of `Tok[j]`. A module defines `Tok`
    with only the sequences it uses (`used`)."""

    def __init__(self) -> None:
        self.seqs: list[tuple[int, ...]] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.at: dict[int, tuple[int, int]] = {}
        self.used: set[int] = set()

    def add(self, tokens: tuple[int, ...]) -> int:
        j = self.index.get(tokens)
        if j is None:
            self.seqs.append(tokens)
            j = self.index[tokens] = len(self.seqs)
            for k, c in enumerate(content.prefix_content(tokens), start=1):
                self.at.setdefault(c, (j, k))
        return j

    def ref(self, tokens: tuple[int, ...]) -> str:
        """The arrival's token sequence itself."""
        j = self.index.get(tokens)
        if j is None:
            return ints(tokens)
        self.used.add(j)
        return f"Tok[{j}]"

    def where(self, c: int) -> tuple[int, int]:
        try:
            j, k = self.at[c]
        except KeyError:
            raise MappingError(f"content {c:#x} is not the identity of any prefix of the log's arrivals") from None
        self.used.add(j)
        return j, k

    def content(self, c: int | None) -> str:
        """A page content (or page hash): the prefix whose identity it is, `<<>>` for none."""
        if c is None:
            return "<<>>"
        j, k = self.where(c)
        return f"Cnt({j}, {k})"

    def hashes(self, cs: tuple[int, ...]) -> str:
        """A sequence of page hashes: runs of consecutive prefixes of one sequence as
        `Pre(j, k, n)` (the prefixes of Tok[j] of lengths k .. k+n-1)."""
        if not cs:
            return "<<>>"
        pieces: list[str] = []
        run: list[int] = []  # j, k0, n

        def flush() -> None:
            if run:
                j, k0, n = run
                pieces.append(f"<<Cnt({j}, {k0})>>" if n == 1 else f"Pre({j}, {k0}, {n})")

        for c in cs:
            j, k = self.where(c)
            if run and run[0] == j and run[1] + run[2] == k:
                run[2] += 1
            else:
                flush()
                run = [j, k, 1]
        flush()
        return pieces[0] if len(pieces) == 1 else "(" + " \\o ".join(pieces) + ")"

    def prefix_of(self, c: int) -> tuple[int, ...] | None:
        """The prefix whose identity is `c`, if it is a prefix of an arrival."""
        jk = self.at.get(c)
        return None if jk is None else self.seqs[jk[0] - 1][: jk[1]]

    def slice(self, last: int, symbols: tuple[int, ...]) -> str:
        """`symbols`, which end the prefix whose identity is `last`, as a slice of the
        sequence that holds that prefix (checked to be these symbols)."""
        if not symbols:
            return "<<>>"
        j, k = self.at.get(last, (0, 0))
        n = len(symbols)
        if j and k >= n and self.seqs[j - 1][k - n : k] == symbols:
            self.used.add(j)
            return f"SubSeq(Tok[{j}], {k - n + 1}, {k})"
        return ints(symbols)

    def tokens_of(self, tokens: tuple[int, ...]) -> str:
        """A token sequence that is a prefix or a suffix slice of an arrival's (a
        candidate's or a reload's tokens), as a slice when one is found."""
        if tokens in self.index:
            return self.ref(tokens)
        return ints(tokens)

    def fill(self, items: list[tuple[int, int | None]], lanes: int = 1) -> str:
        """Page contents of `(page, content)` pairs, for `Fill`: `<<runs, poisoned
        pages>>`, a run `<<first page, stride, n, j, k, k stride>>` holding the prefixes
        of Tok[j] of lengths k, k + k stride, ... The pages are taken lane by lane (page
        mod `lanes`), where consecutive positions of a run of pages usually are."""
        pts: list[tuple[int, int, int]] = []
        poisoned: list[int] = []
        for p, c in sorted(items, key=lambda pc: (pc[0] % lanes, pc[0])):
            if c is None:
                poisoned.append(p)
            else:
                j, k = self.where(c)
                pts.append((p, j, k))
        runs: list[str] = []
        i, n = 0, len(pts)
        while i < n:
            p0, j0, k0 = pts[i]
            m = 1
            if i + 1 < n and pts[i + 1][1] == j0:
                s, t = pts[i + 1][0] - p0, pts[i + 1][2] - k0
                if s > 0:
                    m = 2
                    while i + m < n and pts[i + m][1] == j0 and pts[i + m][0] - pts[i + m - 1][0] == s and pts[i + m][2] - pts[i + m - 1][2] == t:
                        m += 1
            if m == 1:
                s, t = 1, 0
            runs.append(f"<<{p0}, {s}, {m}, {j0}, {k0}, {t}>>")
            i += m
        return "<<<<" + ", ".join(runs) + f">>, {intset(poisoned)}>>"

    def module_text(self) -> str:
        if not self.used:
            return "<<>>"
        return "(" + " @@ ".join(f"{j} :> {ints(self.seqs[j - 1])}" for j in sorted(self.used)) + ")"


# ---- one model state, variable by variable ----------------------------------------------------


class Encoder:
    """Spec values of model states (kvsm.tla.specmap's correspondence), written as
    compact TLA+ text: whole variables for a segment's first state, deltas between
    consecutive states for its steps."""

    def __init__(self, cfg: Config, tokens: Tokens) -> None:
        self.cfg = cfg
        self.tok = tokens
        self.regions = len(cfg.payloads)

    # -- records --
    def node(self, n: Any) -> str:
        return (
            f"Nd({n.parent}, {self.tok.slice(n.hashes[-1] if n.hashes else content.ROOT, n.key)}, {self.dev(n.dev)}, "
            f"{NO_OBJECT if n.host is None else n.host}, {_b(n.durable)}, {n.lock}, {n.pin}, {n.hits}, {n.touched})"
        )

    def node_mod(self, o: Any, n: Any) -> str | None:
        f = []
        if o.parent != n.parent:
            f.append(f"parent |-> {n.parent}")
        if o.key != n.key:
            f.append(f"key |-> {self.tok.slice(n.hashes[-1] if n.hashes else content.ROOT, n.key)}")
        if o.dev != n.dev:
            f.append(f"dev |-> {self.dev(n.dev)}")
        if o.host != n.host:
            f.append(f"host |-> {NO_OBJECT if n.host is None else n.host}")
        if o.durable != n.durable:
            f.append(f"durable |-> {_b(n.durable)}")
        for a in ("lock", "pin", "hits", "touched"):
            if getattr(o, a) != getattr(n, a):
                f.append(f"{a} |-> {getattr(n, a)}")
        return "[" + ", ".join(f) + "]" if f else None

    @staticmethod
    def obj(o: Any) -> str:
        return f"Ob({o.base}, {o.length}, {_b(o.committed)}, {o.owner})"

    @staticmethod
    def obj_mod(o: Any, n: Any) -> str | None:
        f = [f"{a} |-> {v if not isinstance(v, bool) else _b(v)}" for a in ("base", "length", "committed", "owner")
             if (v := getattr(n, a)) != getattr(o, a)]
        return "[" + ", ".join(f) + "]" if f else None

    def request(self, r: Any) -> str:
        return f"Rq({self.tok.ref(r.tokens)}, {r.out_pages}, \"{r.phase}\", {r.node}, {self.dev(r.pages)}, {_b(r.reload_tried)})"

    def request_mod(self, o: Any, n: Any) -> str | None:
        if o.tokens != n.tokens or o.out_pages != n.out_pages:
            return ""  # rewritten whole
        f = []
        if o.phase != n.phase:
            f.append(f'phase |-> "{n.phase}"')
        if o.node != n.node:
            f.append(f"node |-> {n.node}")
        if o.pages != n.pages:
            f.append(f"pages |-> {self.dev(n.pages)}")
        if o.reload_tried != n.reload_tried:
            f.append(f"tried |-> {_b(n.reload_tried)}")
        return "[" + ", ".join(f) + "]" if f else None

    def candidate(self, c: Any) -> str:
        return f"[anchor |-> {c.anchor}, tokens |-> {self.tok.tokens_of(c.tokens)}, hashes |-> {self.tok.hashes(c.hashes)}]"

    def spills(self, s: ClusterState) -> str:
        for op in s.spills:
            if op.obj != op.node:
                raise MappingError(f"spill of node {op.node} has object {op.obj}; the spec's is the node's id")
        return "<<" + ", ".join(f"[node |-> {op.node}, hashes |-> {self.tok.hashes(op.hashes)}, pinned |-> {_b(op.pinned)}]" for op in s.spills) + ">>"

    def reloads(self, s: ClusterState) -> str:
        out = []
        for op in s.reloads:
            o = s.objects.get(op.obj)
            if o is None:
                raise MappingError(f"reload {op.key:#x} has no object {op.obj}")
            out.append(
                f"[key |-> {self.tok.content(op.key)}, anchor |-> {op.anchor}, tokens |-> {self.tok.tokens_of(op.tokens)}, "
                f"hashes |-> {self.tok.hashes(op.hashes)}, waiters |-> {ints(op.waiters)}, ttl |-> {op.ttl}, "
                f"base |-> {o.base}, length |-> {o.length}]"
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
        return "<<" + ", ".join(_b(x) for x in xs) + ">>"

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
            "disk_ok": self.per_rank(s.disk_ok, _b),
            "disk_faults": str(s.disk_faults),
            "l3": self.per_rank(
                (l3[r] for r in range(cfg.R)),
                lambda es: self.fcn((self.tok.content(h), self.tok.content(c)) for h, c in es),
            ),
            "spill_staged": self.staged(s),
            "loads": self.loads(s),
            "load_done": self.per_rank(s.load_done),
            "commit_round": self.per_rank(s.commit_round),
            "prepared": self.prepared(s),
            "diverged": self.diverged(s),
        }

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

    # -- deltas --
    def delta(self, a: ClusterState, b: ClusterState) -> dict[str, str]:
        """What the step from `a` to `b` changed, per spec variable (unchanged ones are
        left out), as the operand of the variable's `APPLY` operator."""
        d: dict[str, str] = {}
        if a.nodes is not b.nodes:
            x = self.map_delta(a.nodes, b.nodes, self.node, self.node_mod)
            if x:
                d["nodes"] = x
        for v in ("next_id", "clock", "next_rid", "disk_faults"):
            if getattr(a, v) != getattr(b, v):
                d[v] = str(getattr(b, v))
        if a.dev_free is not b.dev_free:
            gone: set[int] = set()
            add: set[int] = set()
            for la, lb in zip(a.dev_free, b.dev_free):
                if la is not lb:
                    sa, sb = set(la), set(lb)
                    gone |= sa - sb
                    add |= sb - sa
            if gone or add:
                d["dev_free"] = f"<<{intset(gone)}, {intset(add)}>>"
        if a.l2_free is not b.l2_free:
            ra, rb = set(a.l2_free[0]), set(b.l2_free[0])
            if any(tuple(r) != tuple(b.l2_free[0]) for r in b.l2_free[1:]):
                raise MappingError("the host regions' free sets differ; the spec has one region")
            pa = {p for base, k in ra - rb for p in range(base, base + k)}
            pb = {p for base, k in rb - ra for p in range(base, base + k)}
            if pa - pb or pb - pa:
                d["l2_free"] = f"<<{intset(pa - pb)}, {intset(pb - pa)}>>"
        if a.objects is not b.objects or a.reloads is not b.reloads:
            ka = {op.obj for op in a.reloads}
            kb = {op.obj for op in b.reloads}
            oa = {k: o for k, o in a.objects.items() if k not in ka}
            ob = {k: o for k, o in b.objects.items() if k not in kb}
            x = self.map_delta(oa, ob, self.obj, self.obj_mod)
            if x:
                d["objects"] = x
        if a.pending is not b.pending:
            pa, pb = set(a.pending.keys()), set(b.pending.keys())
            for nid in pb - pa:
                p = b.pending[nid]
                if p.obj != nid or not p.locked:
                    raise MappingError(f"pending backup of node {nid} has object {p.obj} (locked={p.locked}); the spec's is the node's id, locked")
            if pa != pb:
                d["pending"] = f"<<{intset(pa - pb)}, {intset(pb - pa)}>>"
        if a.writes != b.writes:
            d["writes"] = self.seq_delta(a.writes, b.writes)
        if a.requests is not b.requests:
            x = self.map_delta(a.requests, b.requests, self.request, self.request_mod)
            if x:
                d["requests"] = x
        if a.write_done != b.write_done:
            d["write_done"] = self.per_rank(b.write_done)
        if a.dev_content is not b.dev_content:
            ch = self.content_changes(a, b, "dev_content")
            if ch:
                d["dev_content"] = self.dev_fill(a, b, ch)
        if a.host_content is not b.host_content:
            ch = self.content_changes(a, b, "host_content")
            hs = sorted({k % self.cfg.L2 for k in ch})
            if hs:
                d["host_content"] = self.tok.fill([(h, self.host_page(b, h)) for h in hs], self.cfg.R)
        if a.spill_queue != b.spill_queue:
            d["spill_queue"] = self.seq_delta(a.spill_queue, b.spill_queue)
        if a.spills != b.spills:
            d["spills"] = self.spills(b)
        if a.reload_candidates is not b.reload_candidates:
            x = self.map_delta(a.reload_candidates, b.reload_candidates, self.candidate, None)
            if x:
                d["reload_candidates"] = x
        if a.reloads != b.reloads or (a.reloads and a.objects is not b.objects):
            x = self.reloads(b)
            if x != self.reloads(a):
                d["reloads"] = x
        if a.spill_gathered != b.spill_gathered:
            d["spill_gathered"] = self.per_rank(b.spill_gathered)
        if a.spill_done != b.spill_done:
            d["spill_done"] = self.per_rank(b.spill_done, self.bools)
        if a.reload_done != b.reload_done:
            d["reload_done"] = self.per_rank(b.reload_done, self.bools)
        if a.disk_ok != b.disk_ok:
            d["disk_ok"] = self.per_rank(b.disk_ok, _b)
        if a.l3 is not b.l3:
            x = self.l3_delta(a, b)
            if x:
                d["l3"] = x
        if a.spill_staged != b.spill_staged:
            d["spill_staged"] = self.staged(b)
        if a.loads != b.loads:
            d["loads"] = self.loads(b)
        if a.load_done != b.load_done:
            d["load_done"] = self.per_rank(b.load_done)
        if a.commit_round != b.commit_round:
            d["commit_round"] = self.per_rank(b.commit_round)
        if a.prepared != b.prepared:
            d["prepared"] = self.prepared(b)
        if a.diverged != b.diverged:
            d["diverged"] = self.diverged(b)
        return d

    def map_delta(self, a: Any, b: Any, whole: Any, mod: Any) -> str | None:
        """`<<new or rewritten entries, changed fields of entries, removed keys>>` for
        `ApplyMap`. `mod(old, new)` gives an entry's
        changed fields, None when the spec sees no change, "" to rewrite it whole;
        without `mod` a changed entry is rewritten whole."""
        upd: list[str] = []
        mods: list[str] = []
        new = 0
        for k, v in b.items():
            o = a.get(k, _MISSING)
            if o is v:
                continue
            if o is _MISSING:
                new += 1
                upd.append(f"{k} :> {whole(v)}")
                continue
            if mod is None:
                m = None if o == v else ""
            else:
                m = mod(o, v)
            if m is None:
                continue  # no field the spec has changed (a node's children, say)
            if m == "":
                upd.append(f"{k} :> {whole(v)}")
            else:
                mods.append(f"{k} :> {m}")
        gone: list[int] = []
        if len(a) + new != len(b):
            gone = [k for k in a.keys() if k not in b]
        if not (upd or mods or gone):
            return None
        f = lambda xs: "(" + " @@ ".join(xs) + ")" if xs else "EmptyFn"  # noqa: E731
        return f"<<{f(upd)}, {f(mods)}, {intset(gone)}>>"

    @staticmethod
    def seq_delta(a: tuple, b: tuple) -> str:
        """`<<d, s>>` when b is a without its first d elements with s appended (a
        queue), for `ApplySeq`."""
        for drop in range(len(a) + 1):
            keep = len(a) - drop
            if keep <= len(b) and a[drop:] == b[:keep]:
                return f"<<{drop}, {ints(b[keep:])}>>"
        raise AssertionError("unreachable: dropping every element always matches")

    def dev_fill(self, a: ClusterState, b: ClusterState, changed: set[int]) -> str:
        """The device pages a step filled or loaded, `<<node fills, other pages>>` for
        `ApplyDev`: a node that came onto L1 in this step usually had its pages filled
        with its own page hashes (Insert, LoadBack), written `<<node, j, k>>` (page i of
        the node's new `dev` holds the prefix of Tok[j] of length k + i - 1, checked
        here against every page); the rest as a `Fill`."""
        nodes: list[str] = []
        rest = set(changed)
        if a.nodes is not b.nodes:
            for nid, n in b.nodes.items():
                o = a.nodes.get(nid)
                if o is n or not n.dev or (o is not None and o.dev == n.dev):
                    continue
                if not all(p in rest and b.dev_content.get(p) == h for p, h in zip(n.dev, n.hashes)):
                    continue
                jk = self.tok.at.get(n.hashes[-1])
                if jk is None:
                    continue
                j, k = jk
                k0 = k - len(n.hashes) + 1
                seq = self.tok.seqs[j - 1]
                # each page's prefix of Tok[j] must be the one its hash names
                if any(self.tok.at.get(h) != (j, k0 + i) and self.tok.prefix_of(h) != seq[: k0 + i] for i, h in enumerate(n.hashes)):
                    continue
                self.tok.used.add(j)
                nodes.append(f"<<{nid}, {j}, {k0}>>")
                rest.difference_update(n.dev)
        fill = self.tok.fill([(p, b.dev_content.get(p)) for p in rest], self.cfg.R)
        return f"<<<<{', '.join(nodes)}>>, {fill}>>"

    def content_changes(self, a: ClusterState, b: ClusterState, name: str) -> set[int]:
        """The keys of a content map that differ between a and b: those the step's
        effects name, checked to be all of them (else every key is compared)."""
        ma, mb = getattr(a, name), getattr(b, name)
        L2 = self.cfg.L2
        keys: set[int] = set()
        for e in b.effects:
            k = e.kind
            if name == "dev_content":
                if k in ("fill", "load", "poison_dev"):
                    keys.add(e.page)
            elif k == "store":
                keys.update(i * L2 + e.host_page for i in range(self.regions))
            elif k == "poison_host":
                keys.update(i * L2 + h for i in range(self.regions) for h in range(e.base, e.base + e.length))
            elif k == "reload_read":
                keys.update(i * L2 + p.host for i in range(self.regions) for p in e.pages)
        m = ma.mutate()
        for key in keys:
            v = mb.get(key, _MISSING)
            if v is _MISSING:
                m.pop(key, None)
            else:
                m[key] = v
        if m.finish() == mb:
            return {key for key in keys if ma.get(key, _MISSING) != mb.get(key, _MISSING)}
        # a change no effect names: compare every key
        return {key for key in set(ma.keys()) | set(mb.keys()) if ma.get(key, _MISSING) != mb.get(key, _MISSING)}

    def l3_delta(self, a: ClusterState, b: ClusterState) -> str | None:
        keys = {k for k in set(a.l3.keys()) | set(b.l3.keys()) if a.l3.get(k, _MISSING) != b.l3.get(k, _MISSING)}
        if not keys:
            return None
        per: dict[int, tuple[list[str], list[str]]] = {}
        for r, h in sorted(keys):
            upd, gone = per.setdefault(r, ([], []))
            if (r, h) in b.l3:
                upd.append(f"{self.tok.content(h)} :> {self.tok.content(b.l3[(r, h)])}")
            else:
                gone.append(self.tok.content(h))
        f = lambda xs: "(" + " @@ ".join(xs) + ")" if xs else "EmptyFn"  # noqa: E731
        return "(" + " @@ ".join(
            f"{r} :> <<{f(u)}, EmptyFn, {{{', '.join(g)}}}>>" for r, (u, g) in sorted(per.items())
        ) + ")"


# ---- the module -------------------------------------------------------------------------------


def step_record(t: Transition, tok: Tokens, delta: dict[str, str] | None) -> str:
    """The log's step with its arguments, and (unless the model rejected it) the
    model's delta `d`."""
    fields = [f'name |-> "{t.name}"']
    if t.rank is not None:
        fields.append(f"rank |-> {t.rank}")
    for k, v in t.args:
        if k == "tokens":
            fields.append(f"tokens |-> {tok.ref(tuple(v))}")
        elif isinstance(v, (tuple, list)):
            fields.append(f"{k} |-> {ints(v)}")
        else:
            fields.append(f"{k} |-> {to_tla(v)}")
    if delta is not None:
        fields.append("d |-> [" + ", ".join(f"{k} |-> {v}" for k, v in delta.items()) + "]" if delta else "d |-> EmptyFn")
    return "[" + ", ".join(fields) + "]"


def _take_case() -> str:
    """`Take(s)`: the spec's action named by step `s`, with the step's arguments."""
    arms = []
    for name, args in SPEC_PARAMS.items():
        call = name if not args else f"{name}({', '.join('s.' + a for a in args)})"
        arms.append(f's.name = "{name}" -> {call}')
    return "Take(s) ==\n    CASE " + "\n      [] ".join(arms)


def _apply(var: str, cur: str, d: str) -> str:
    op = APPLY[var]
    if op == "ApplyDev":
        return f"{op}({cur}, {d}.{var}, E)"
    return f"{d}.{var}" if op is None else f"{op}({cur}, {d}.{var})"


def _changes_table() -> str:
    """`Changes`: each action's name -> the variables it may change, those that no
    top-level UNCHANGED conjunct of its definition keeps (kvsm.tla.frame)."""
    fr = frames(spec_dir(), tuple(SPEC_PARAMS), SPEC_VARIABLES)
    rows = []
    for a in SPEC_PARAMS:
        may = [v for v in SPEC_VARIABLES if v not in fr[a]]
        rows.append(f'"{a}" :> ' + ("AllVars" if len(may) == len(SPEC_VARIABLES) else "{" + ", ".join(f'"{v}"' for v in may) + "}"))
    return "(" + "\n    @@ ".join(rows) + ")"


def _checked(v: str) -> str:
    """Variable v after the step: compared with the model's next value when the
    step's action may change it, else (the spec keeps it) required to be one the
    model's step left alone too."""
    expected = "E" if v == "nodes" else f'IF "{v}" \\in DOMAIN d THEN {_apply(v, v, "d")} ELSE {v}'
    return f'(IF "{v}" \\in ch THEN Chk("{v}", {v}\' = {expected}) ELSE Untouched("{v}", d))'


def module_text(init: dict[str, str], steps: list[str], tok: Tokens, from_init: bool) -> str:
    """A trace module: `SegInit` is the first state, `Steps` the steps. With
    `from_init` the first state is also the spec's `Init` (the log's start)."""
    got = "\n    \\cup ".join(_checked(v) for v in SPEC_VARIABLES)
    all_vars = "{" + ", ".join(f'"{v}"' for v in SPEC_VARIABLES) + "}"
    same_init = "\n    \\cup ".join(f'Chk("{v}", {v} = First.{v})' for v in SPEC_VARIABLES)
    assign = "\n".join(f"    /\\ {v} = First.{v}" for v in SPEC_VARIABLES)
    first = ",\n    ".join(_wrap(f"{v} |-> {init[v]}") for v in SPEC_VARIABLES)
    trace_init = (
        "TraceInit == Init /\\ cursor = 1 /\\ bad = SameAsFirst" if from_init else "TraceInit == SegInit /\\ cursor = 1 /\\ bad = {}"
    )
    body_steps = (",\n    ").join(_wrap(s) for s in steps)
    return f"""---- MODULE {MODULE} ----
\\* Generated by `kvsm validate`: a stretch of a log as a behaviour to check against KVCache.
EXTENDS KVCache
VARIABLES cursor, bad

Ar(a, s, n) == [i \\in 1 .. n |-> a + s * (i - 1)]
ArS(a, s, n) == {{a + s * i : i \\in 0 .. n - 1}}

\\* The token sequences of the log's arrivals that this stretch needs.
Tok == {_wrap(tok.module_text())}

Cnt(j, k) == IF j = 0 THEN NoContent ELSE SubSeq(Tok[j], 1, k)
Pre(j, k, n) == [i \\in 1 .. n |-> SubSeq(Tok[j], 1, k + i - 1)]
RunFn(r) == [p \\in ArS(r[1], r[2], r[3]) |-> SubSeq(Tok[r[4]], 1, r[5] + r[6] * ((p - r[1]) \\div r[2]))]
\\* The long folds below are recursive functions local to their operator, not recursive
\\* operators: TLC looks names up along the whole chain of operator calls, so a chain of
\\* n recursive operator calls costs about n^2 (a node of 120 pages, a step of many runs).
FillFrom(rs) == LET F[i \\in 1 .. Len(rs) + 1] == IF i > Len(rs) THEN EmptyFn ELSE RunFn(rs[i]) @@ F[i + 1]
                IN F[1]
Fill(d) == FillFrom(d[1]) @@ [p \\in d[2] |-> NoContent]

Nd(parent, key, dev, host, durable, lock, pin, hits, touched) ==
    [parent |-> parent, key |-> key, dev |-> dev, host |-> host, durable |-> durable,
     lock |-> lock, pin |-> pin, hits |-> hits, touched |-> touched]
Ob(base, length, committed, owner) == [base |-> base, length |-> length, committed |-> committed, owner |-> owner]
Rq(tokens, out_pages, phase, node, pages, tried) ==
    [tokens |-> tokens, out_pages |-> out_pages, phase |-> phase, node |-> node, pages |-> pages, tried |-> tried]
PR(t) == [r \\in Ranks |-> t[r + 1]]
Lanes(ls, n) == [i \\in 1 .. n |-> ls[((i - 1) % R) + 1][((i - 1) \\div R) + 1]]

\\* Deltas: a map's <<new entries, changed fields of entries, removed keys>>, a set's
\\* <<removed, added>>, a queue's <<elements dropped at its head, elements appended>>,
\\* page contents as runs for Fill.
Merge(r, m) == [x \\in DOMAIN r |-> IF x \\in DOMAIN m THEN m[x] ELSE r[x]]
ApplyMap(f, d) ==
    LET g == IF d[3] = {{}} THEN f ELSE Remove(f, d[3])
    IN d[1] @@ ([x \\in DOMAIN d[2] |-> Merge(g[x], d[2][x])] @@ g)
ApplySet(f, d) == (f \\ d[1]) \\cup d[2]
ApplySeq(f, d) == SubSeq(f, d[1] + 1, Len(f)) \\o d[2]
ApplyFill(f, d) == Fill(d) @@ f
SeqFill(ps, j, k) ==
    LET F[i \\in 1 .. Len(ps) + 1] == IF i > Len(ps) THEN EmptyFn ELSE (ps[i] :> SubSeq(Tok[j], 1, k + i - 1)) @@ F[i + 1]
    IN F[1]
NodeFills(fs, E) ==
    LET F[i \\in 1 .. Len(fs) + 1] == IF i > Len(fs) THEN EmptyFn ELSE SeqFill(E[fs[i][1]].dev, fs[i][2], fs[i][3]) @@ F[i + 1]
    IN F[1]
\\* Device pages: those filled with the pages of nodes of E (the model's next nodes), and the others.
ApplyDev(f, d, E) == (NodeFills(d[1], E) @@ Fill(d[2])) @@ f
ApplyRanks(f, d) == [r \\in DOMAIN f |-> IF r \\in DOMAIN d THEN ApplyMap(f[r], d[r]) ELSE f[r]]

\\* The first state of the stretch: the model's state before its first step.
First == [
    {first}]

\\* The steps: the transition with its arguments, and `d`, what the model's step
\\* changed (absent when the model rejected the step: the stretch ends with it,
\\* unconstrained).
Steps == <<
    {body_steps}>>

Chk(v, ok) == IF ok THEN {{}} ELSE {{v}}
\\* A variable the step's action keeps (a top-level UNCHANGED of its definition): the
\\* spec's next value is the current one, which is the model's unless its step changed it.
Untouched(v, d) == IF v \\in DOMAIN d THEN {{v}} ELSE {{}}

AllVars == {all_vars}
\\* The variables each action may change: those no UNCHANGED conjunct of its
\\* definition keeps (kvsm.tla.frame reads them from the spec).
Changes == {_changes_table()}

SameAsFirst ==
    {same_init}

\\* The variables whose value after step s is not the model's.
Bad(s) ==
    LET d == s.d
        ch == Changes[s.name]
        E == IF "nodes" \\in DOMAIN d THEN ApplyMap(nodes, d.nodes) ELSE nodes  \\* the model's next nodes
    IN
    {got}

{_take_case()}

SegInit ==
{assign}

{trace_init}

\\* Take the step at the cursor; the variables that then differ from the model's
\\* next state are `bad` (TraceOk fails on them). After the last step, stutter.
TraceNext ==
    \\/ /\\ cursor <= Len(Steps)
       /\\ bad = {{}}
       /\\ Take(Steps[cursor])
       /\\ bad' = IF "d" \\in DOMAIN Steps[cursor] THEN Bad(Steps[cursor]) ELSE {{}}
       /\\ cursor' = cursor + 1
    \\/ /\\ cursor = Len(Steps) + 1
       /\\ UNCHANGED <<vars, cursor, bad>>

TraceOk == bad = {{}}
TraceView == <<cursor, bad>>
====
"""


def trace_config(cfg: Config) -> ModelConfig:
    # Prompts only shape Next's arrivals; the log's Arrive steps carry their own tokens.
    consts = {k: ("=", v) for k, v in constant_bindings(cfg).items() if k != "Prompts"}
    consts["Prompts"] = ("=", "{}")
    return ModelConfig(
        constants=consts,
        sections={"INIT": ["TraceInit"], "NEXT": ["TraceNext"], "INVARIANTS": ["TraceOk"], "VIEW": ["TraceView"]},
    )
