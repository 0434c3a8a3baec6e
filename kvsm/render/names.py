"""How the renderer writes what a state refers to: content identities as the prefix of
page symbols they stand for (`Names`), and the short forms of pages, host runs, node
ids and clipped lists that every section, and the effect lines, use."""

from __future__ import annotations

from typing import Iterable

from .. import content
from ..state import ROOT_ID, ClusterState

# lists longer than this are clipped to their first few and last entries with a count
CLIP = 8


class Names:
    """Content identity -> the prefix of page symbols it is the identity of, for every
    prefix of the token sequences it has been told about. It only grows: an identity
    names one prefix for ever, so one `Names` serves every state of a log."""

    def __init__(self, token_seqs: Iterable[tuple[int, ...]] = ()) -> None:
        self.names: dict[int, tuple[int, ...]] = {}
        self._seen: set[tuple[int, ...]] = set()
        # What was rendered of the values of earlier states, keyed by the identity of those
        # values: a log's states share every value a step did not change, so a view of the
        # next state recomputes only what changed. Each entry keeps its values alive, so an
        # identity is never reused for another value while it is here.
        self.memo: dict[tuple, tuple] = {}
        for t in token_seqs:
            self.add(t)

    def add(self, tokens: tuple[int, ...], prev: int = content.ROOT, before: tuple[int, ...] = (), ns: int = 0) -> None:
        """The prefixes of `before + tokens`, whose identities chain from `prev`, in
        namespace `ns` (named, as the spec writes them, after the symbol -ns)."""
        if ns and (not before or before[0] != -ns):
            before = (-ns,) + before
        whole = before + tuple(tokens)
        if whole in self._seen:
            return
        self._seen.add(whole)
        for k, c in enumerate(content.chain_in(ns, prev, tokens), start=1):
            if c not in self.names:
                self.names[c] = before + tuple(tokens[:k])

    def known(self, c: int, prefix: tuple[int, ...]) -> None:
        if c not in self.names:
            self.names[c] = prefix

    def show(self, c: int | None) -> str:
        if c is None:
            return "garbage"
        p = self.names.get(c)
        return symbols(p) if p is not None else f"?{c:016x}"


def clip(parts: list[str], limit: int = CLIP) -> str:
    if len(parts) <= limit:
        return " ".join(parts)
    return " ".join(parts[: limit - 2] + ["…", parts[-1]]) + f" ({len(parts)})"


def symbols(seq: Iterable[int]) -> str:
    seq = list(seq)
    if len(seq) <= CLIP:
        return "[" + ",".join(map(str, seq)) + "]"
    return "[" + ",".join(map(str, seq[: CLIP - 2])) + f",…,{seq[-1]}]({len(seq)})"


def ranges(values: list[int], step: int, prefix: str) -> str:
    """Sorted values as `p1 p3..p9`: a run `a..b` is every value from a to b in `step`s."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + step:
            j += 1
        if j - i >= 2:
            out.append(f"{prefix}{values[i]}..{prefix}{values[j]}")
        else:
            out.extend(f"{prefix}{v}" for v in values[i : j + 1])
        i = j + 1
    return clip(out) if out else "-"


def page(p: int, R: int) -> str:
    """Device page `p` with the rank whose lane holds it: `p5(r1)` (not `l1`, which
    would read as the tier L1)."""
    return f"p{p}(r{p % R})"


def page_list(pages: Iterable[int], R: int) -> str:
    return clip([page(p, R) for p in pages]) or "-"


def host_range(base: int, length: int) -> str:
    return f"h{base}" if length == 1 else f"h{base}..{base + length - 1}"


def node_label(nid: int) -> str:
    return f"#{nid}"


def node_paths(s: ClusterState) -> dict[int, tuple[int, ...]]:
    """Each node's prefix (the page symbols from the root to its end), where its parent
    chain reaches the root."""
    out: dict[int, tuple[int, ...]] = {ROOT_ID: ()}
    nodes = s.nodes

    for nid in nodes.keys():
        if nid not in out:
            # iterative over the chain's depth: walk up first, then fill down
            chain, cur, seen = [], nid, set()
            while cur not in out and cur in nodes and cur not in seen:
                seen.add(cur)
                chain.append(cur)
                cur = nodes[cur].parent
            if cur in out:
                for c in reversed(chain):
                    out[c] = out[nodes[c].parent] + tuple(nodes[c].key)
    return out


def names_of(s: ClusterState, names: Names | None = None) -> Names:
    """`names` (a new one if None), completed with every prefix the state spells out: its
    nodes (through their page hashes), requests, reload candidates and reloads."""
    n = names if names is not None else Names()
    seen = n.memo.get("named nodes")
    fresh = [] if seen is not None and seen[0] is s.nodes else \
        [node for node in s.nodes.values() if node.hashes and n.memo.get(("named", id(node)), (None,))[0] is not node]
    if fresh:
        paths = node_paths(s)
        for node in fresh:
            p = paths.get(node.id)
            if p is None:
                continue
            start = len(p) - len(node.key)
            ns = (-node.ns,) if node.ns else ()
            for i, h in enumerate(node.hashes):
                n.known(h, ns + p[: start + i + 1])
            n.memo[("named", id(node))] = (node,)
    n.memo["named nodes"] = (s.nodes,)  # every node of this map is named (or has no path)
    for req in s.requests.values():
        n.add(tuple(req.tokens), ns=req.ns)
    ops = list(s.reload_candidates.values()) + list(s.reloads)
    paths = node_paths(s) if ops else {}
    for cand in ops:
        a = paths.get(cand.anchor)
        anchor = s.nodes.get(cand.anchor)
        if a is not None and anchor is not None:
            n.add(tuple(cand.tokens), anchor.last_content, a, ns=cand.ns)
    return n
