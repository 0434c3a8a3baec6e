"""The deltas of a trace module's steps: what a step of the model changed in each spec
variable, as the operand of the variable's `APPLY` operator in the trace module
(`kvsm.tla.trace`). A changed record is written as the fields that changed
(`fields_delta`, one builder for every record type), or whole."""

from __future__ import annotations

from typing import Any

from ..state import ClusterState
from ..tx import _WRITTEN_INDEX
from ..writes import written_between
from .compact import ints, intset, tla_bool
from .encoder import Encoder, Fields
from .canon import MappingError

_MISSING = object()


def fields_delta(o: Any, n: Any, fields: Fields) -> str | None:
    """`[field |-> value, ...]` of the fields of record `n` that differ from those of
    `o`, for `ApplyMap`'s changed fields; None when none does."""
    f = [f"{name} |-> {text(n)}" for name, attr, text in fields if getattr(o, attr) != getattr(n, attr)]
    return "[" + ", ".join(f) + "]" if f else None


class DeltaEncoder(Encoder):
    """An `Encoder` that also writes the delta between consecutive model states."""

    _written: tuple[Any, ...] | None = None  # the keys the step being encoded wrote, per map

    def node_mod(self, o: Any, n: Any) -> str | None:
        return fields_delta(o, n, self.node_fields)

    def obj_mod(self, o: Any, n: Any) -> str | None:
        return fields_delta(o, n, self.obj_fields)

    def request_mod(self, o: Any, n: Any) -> str | None:
        if o.tokens != n.tokens or o.out_pages != n.out_pages:
            return ""  # rewritten whole
        return fields_delta(o, n, self.request_fields[2:])

    def delta(self, a: ClusterState, b: ClusterState) -> dict[str, str]:
        """What the step from `a` to `b` changed, per spec variable (unchanged ones are
        left out), as the operand of the variable's `APPLY` operator."""
        d: dict[str, str] = {}
        # the keys the step wrote, per map (the model's own record, `kvsm.writes`, which
        # its digest sums and `kvsm.invariants` rely on): only those can differ, so only
        # those are compared; None (not known) compares every key
        w = written_between(a.written, b.written)
        self._written = w
        if a.nodes is not b.nodes:
            x = self.map_delta(a.nodes, b.nodes, self.node, self.node_mod, self._keys("nodes"))
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
            if not a.reloads and not b.reloads:
                x = self.map_delta(a.objects, b.objects, self.obj, self.obj_mod, self._keys("objects"))
            else:  # (a reload's object is no spec object)
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
            x = self.map_delta(a.requests, b.requests, self.request, self.request_mod, self._keys("requests"))
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
            x = self.map_delta(a.reload_candidates, b.reload_candidates, self.candidate, None, self._keys("reload_candidates"))
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
            d["disk_ok"] = self.per_rank(b.disk_ok, tla_bool)
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
        if a.acked != b.acked:
            d["acked"] = self.per_rank(b.acked)
        if a.prepared != b.prepared:
            d["prepared"] = self.prepared(b)
        if a.diverged != b.diverged:
            d["diverged"] = self.diverged(b)
        if a.halted != b.halted:
            d["halted"] = self.halted(b)
        return d

    def _keys(self, name: str) -> list[Any] | None:
        """The keys of map `name` the step wrote, in order; None when not known."""
        w = self._written
        return None if w is None else sorted(w[_WRITTEN_INDEX[name]])

    def map_delta(self, a: Any, b: Any, whole: Any, mod: Any, keys: list[Any] | None = None) -> str | None:
        """`<<new or rewritten entries, changed fields of entries, removed keys>>` for
        `ApplyMap`. `mod(old, new)` gives an entry's
        changed fields, None when the spec sees no change, "" to rewrite it whole;
        without `mod` a changed entry is rewritten whole. `keys`: the only keys that
        may differ (default: every key)."""
        upd: list[str] = []
        mods: list[str] = []
        if keys is None:  # (in key order, as from `keys`: the same text either way)
            keys = sorted(set(a.keys()) | set(b.keys()))
        items = [(k, b[k]) for k in keys if k in b]
        gone = [k for k in keys if k not in b and k in a]
        for k, v in items:
            o = a.get(k, _MISSING)
            if o is v:
                continue
            if o is _MISSING:
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
        if self._written is not None:  # the keys the step wrote (`delta`)
            return {k for k in self._written[_WRITTEN_INDEX[name]] if ma.get(k, _MISSING) != mb.get(k, _MISSING)}
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
        cand = self._written[_WRITTEN_INDEX["l3"]] if self._written is not None else set(a.l3.keys()) | set(b.l3.keys())
        keys = {k for k in cand if a.l3.get(k, _MISSING) != b.l3.get(k, _MISSING)}
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
