"""What a transaction wrote, carried on the state it committed (`ClusterState.written`),
beside its effects and, like them, outside the state's identity, equality and digest.

`kvsm.invariants` checks after a transition only the entries it wrote. A `Writes` names
the state it belongs to (`serial`, unique in the process) and the commits that led to it:
per commit, the serial of the state it started from and the keys it set or deleted in
each map of `kvsm.digest_sums.MAP_COMPONENTS`, in that order. A state made any other way
(`initial_state`, `dataclasses.replace`, which does not copy this field) has none (None)
until a commit on it gives it one with no commits: what led to it is not known. A few commits are kept
(`KEPT`), so that a transition that commits more than once (one transaction on the
result of another) is traced back to the state it started from; only key sets are
kept, never a state.
"""

from __future__ import annotations

from itertools import count
from typing import Any

KEPT = 4  # commits a record keeps (the newest last)

_serials = count()
EMPTY: frozenset = frozenset()


class Writes:
    __slots__ = ("serial", "commits")

    def __init__(self, commits: tuple[tuple[int, tuple[Any, ...]], ...] = ()) -> None:
        self.serial = next(_serials)
        self.commits = commits

    def __repr__(self) -> str:
        return f"Writes(serial={self.serial}, commits={len(self.commits)})"


def committed(base: Any, keys: tuple[Any, ...]) -> Writes:
    """The record of a state committed on the state `base` (given a record of its own,
    with no commits, if it has none: it was not made by a commit), with `keys` (per map,
    the keys set or deleted) written; a map with no key written has the shared empty
    set `EMPTY` (so that a record keeps no empty set of its own)."""
    rec = base.written
    if rec is None:
        rec = Writes()
        object.__setattr__(base, "written", rec)
    return Writes(rec.commits[1 - KEPT:] + ((rec.serial, keys),))


def written_between(before: Writes | None, after: Writes | None) -> tuple[Any, ...] | None:
    """The keys written, per map, by the commits that led from the state whose record is
    `before` to the one whose record is `after` (one commit, or a short chain within one
    transition); None when `after` was not committed from `before` in at most KEPT
    commits (or either has no record)."""
    if before is None or after is None:
        return None
    target = before.serial
    chain = []
    for base, keys in reversed(after.commits):
        chain.append(keys)
        if base == target:
            break
    else:
        return None
    if len(chain) == 1:
        return chain[0]
    return tuple(set().union(*parts) for parts in zip(*chain))
