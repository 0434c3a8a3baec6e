"""The split family: `Split(node, at)`.

A split is demand-driven: it is enabled where a live request's key diverges inside a
node (a queued request's `Match`, over its key but the last page, or a matched
request's `Insert`, over its whole key, would split it there). `Match` and `Insert` perform the same split themselves when they need it;
`Split` lets the split happen as a step of its own, without the access stamps of
the walk that needs it. The reference has no such step: it splits only inside a walk
that stamps what it visits (`_match_prefix_helper`, `insert`), and its prefix probe
(`_probe_existing_radix_prefix_len_no_split`) does not split. docs/model.md (the
mechanism table) records the departure: states in which a node is split and its
path not yet stamped, which the reference never has.
"""

from __future__ import annotations

from typing import Iterable

from ..state import MATCHED, QUEUED, ClusterState, Rejected
from ..tx import Tx
from .transition import Transition
from .registry import Spec, register
from .tree import split_blocked_by_backup, split_node, walk_key
from .request import match_key


def demanded_splits(s: ClusterState) -> set[tuple[int, int]]:
    """Where a queued request's match key (`Match`) or a matched request's whole key
    (`Insert`) ends or diverges inside a node whose backup is not pending."""
    out = set()
    for req in s.requests.values():
        if req.phase in (QUEUED, MATCHED):
            key = match_key(req.tokens) if req.phase == QUEUED else req.tokens
            cut = walk_key(s.nodes, key, ns=req.ns, bug=s.config.bug).cut
            if cut is not None and not split_blocked_by_backup(s.config, cut[0], s.pending):
                out.add(cut)
    return out


def split(s: ClusterState, t: Transition) -> ClusterState:
    nid, at = t.arg("node"), t.arg("at")
    if nid not in s.nodes:
        raise Rejected(f"node {nid} does not exist")
    if (nid, at) not in demanded_splits(s):
        raise Rejected(f"no live request's key diverges inside node {nid} after {at} pages")
    tx = Tx(s)
    split_node(tx, nid, at)
    return tx.commit()


def split_candidates(s: ClusterState) -> Iterable[Transition]:
    for nid, at in sorted(demanded_splits(s)):
        yield Transition.make("Split", node=nid, at=at)


register(Spec(name="Split", family="split", apply=split, candidates=split_candidates, args={"node": "int", "at": "int"}))
