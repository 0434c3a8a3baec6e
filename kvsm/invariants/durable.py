"""Invariant 8, Durable: every page of a durable node is on its owner rank's disk (page
`i` belongs to rank `i mod R`)."""

from __future__ import annotations

from itertools import chain
from typing import Any

from .. import content
from ..state import lane_of

I = 8


def l3_keys_of(n: Any, cfg: Any) -> tuple[int, ...]:
    """Node `n`'s pages' L3 keys: their content identities, or under `l3_key = "tokens"`
    their token chain (`kvsm.content.tokens_key`)."""
    if not n.ns or not cfg.l3_by_tokens:
        return n.hashes
    return tuple(content.tokens_key(h, n.ns) for h in n.hashes)


def node(r: Any, s: Any, nid: int, n: Any) -> None:
    R = s.config.R
    for i, h in enumerate(l3_keys_of(n, s.config)):
        if (lane_of(i, R), h) not in s.l3:
            r.bad(I, f"durable node {nid}: page {i}'s owner rank {lane_of(i, R)} does not hold it on disk")


def whole(w: Any) -> None:
    for nid, n in w.nodes.items():
        if n.durable:
            node(w, w.s, nid, n)


def holds(durable: list, l3_keys: Any, cache: Any) -> bool:
    """The whole-state rule, decided fast (`kvsm.invariants.fast`): `durable` lists each
    durable node's disk keys (a tuple per node, the same object while the node is the
    same), `l3_keys` the disk entries; the keys found stay found while no disk entry has
    gone (`cache.durable`, with the disks' epoch)."""
    epoch = cache.disks.epoch
    last = cache.durable
    if last[0] == epoch:  # no disk entry went since: only the durable nodes' keys not checked yet
        held = last[2]
        todo = [d for d in durable if id(d) not in held]
    else:
        todo = durable
    if not all(map(l3_keys.__contains__, chain.from_iterable(todo))):
        return False
    # (the list keeps the tuples alive, so their ids name them)
    cache.durable = [epoch, durable, set(map(id, durable))]
    return True


# ---- over what a transition wrote (`kvsm.invariants.step`) ------------------------------------


def step_node(d: Any, nid: int, a: Any, b: Any, same: bool) -> None:
    """A node that became durable, or whose pages changed."""
    if a.durable and (not same or not b.durable):
        node(d, d.A, nid, a)


def step_removed(d: Any) -> None:
    """A disk entry went (`d.l3_removed`): every durable node must still have its pages
    (rare; whole)."""
    for nid, n in d.An.items():
        if n.durable:
            node(d, d.A, nid, n)
