"""Replaying a run with some of its steps removed: what both shrinkers (`kvsm corpus add`,
`kvsm.corpus.shrink`, and a campaign's failing runs, `kvsm.campaign.shrink`) replay.

Removing a step changes what later steps refer to: requests and nodes are numbered in
the order they are made, and a step's outcome (a disk step's `ok`, a backup's `fits`)
is what the state implies. So each kept step is replayed with its references
re-resolved in the state it now meets:

- request ids are renumbered in arrival order; the steps of a request whose `Arrive` is
  gone go with it;
- a node (`Reserve`, `Rollback`) is found again by its prefix, the page symbols from the
  root to its end, and a split (`Split`, `PruneStaleTail`) by the prefix it cuts at;
- `EvictDevice` / `EvictHost` take the victim the replicated order picks then, the only
  one the model offers;
- a `SpillDone` / `ReloadDone` whose `ok`, or a `Reserve` / `Prepare` whose `fits`, the
  state no longer implies takes the other.

A step that cannot be resolved, or that the model refuses in the state it now meets
(the copy of a write that was removed, say), is left out of the replay: what a shrinker
keeps is the steps actually taken, each one applied.

`references(cfg, steps)` records what each original step refers to, once;
`replay_kept` replays any subset of the steps with those references.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .config import Config
from .render.names import node_paths
from .state import ClusterState, Rejected, initial_state
from .transitions import REGISTRY, Transition, apply
from .transitions.tree import walk_key

# a step whose outcome the state decides: the argument the state decides
_OUTCOME = {"SpillDone": "ok", "ReloadDone": "ok", "Reserve": "fits", "Prepare": "fits"}


@dataclass
class Ref:
    """What an original step refers to, in terms that survive removing other steps."""

    prefix: tuple[int, ...] | None = None  # a node's whole prefix (Reserve, Rollback)
    cut: tuple[int, ...] | None = None  # the prefix a Split cuts after


def references(cfg: Config, steps: Sequence[Transition]) -> list[Ref]:
    """What each of `steps`, replayed from the initial state, refers to (up to the first
    step the model refuses: the steps after it refer to nothing)."""
    s = initial_state(cfg)
    out = []
    paths: dict[int, tuple[int, ...]] | None = None
    for t in steps:
        args = dict(t.args)
        ref = Ref()
        if t.name in ("Reserve", "Rollback", "Split", "PruneStaleTail"):
            paths = node_paths(s) if paths is None else paths
            if t.name in ("Reserve", "Rollback"):
                ref.prefix = paths.get(args["node"])
            else:
                n = s.nodes.get(args["node"])
                if n is not None and n.parent in paths:
                    ref.cut = paths[n.parent] + tuple(n.key[: args["at"]])
        out.append(ref)
        try:
            nxt = apply(s, t)
        except Rejected:
            break
        if nxt.nodes is not s.nodes:
            paths = None
        s = nxt
    return out


def resolve(s: ClusterState, t: Transition, ref: Ref, rids: dict[int, int]) -> Transition | None:
    """`t` with its references re-resolved in state `s` (`rids`: original request id ->
    the id it took, filled in by each `Arrive`); None when it cannot be."""
    args: dict[str, Any] = dict(t.args)
    if t.name == "Arrive":
        rids[args["rid"]] = s.next_rid
        args["rid"] = s.next_rid
    elif "rid" in args:
        if args["rid"] not in rids:
            return None
        args["rid"] = rids[args["rid"]]
    if t.name in ("Reserve", "Rollback"):
        found = _node_at(s, ref.prefix) if ref.prefix else None
        if found is None:
            return None
        args["node"] = found
    elif t.name in ("Split", "PruneStaleTail"):
        cut = _cut(s, ref.cut) if ref.cut is not None else None
        if cut is None:
            return None
        args["node"], args["at"] = cut
    elif t.name in ("EvictDevice", "EvictHost"):
        # the only instance the model offers is the victim its order picks
        return next(iter(REGISTRY[t.name].candidates(s)), None)
    return Transition.make(t.name, rank=t.rank, **args)


def _node_at(s: ClusterState, prefix: tuple[int, ...]) -> int | None:
    """The node whose prefix is exactly `prefix`, or None."""
    w = walk_key(s.nodes, prefix)
    return w.full[-1] if w.full and w.cut is None and w.covered == len(prefix) else None


def _cut(s: ClusterState, prefix: tuple[int, ...]) -> tuple[int, int] | None:
    """The node inside which `prefix` ends, and how many of its pages the prefix covers;
    None when the prefix is not in the tree or ends at a node's end."""
    w = walk_key(s.nodes, prefix)
    return w.cut if w.cut is not None and w.covered + w.cut[1] == len(prefix) else None


def apply_either(s: ClusterState, t: Transition) -> tuple[ClusterState, Transition]:
    """Apply `t`; a step whose outcome (`ok`, `fits`) the state no longer implies takes
    the other. Raises `Rejected` (for `t` as given) when neither applies."""
    try:
        return apply(s, t), t
    except Rejected:
        arg = _OUTCOME.get(t.name)
        if arg is None:
            raise
        other = Transition.make(t.name, rank=t.rank, **{**dict(t.args), arg: not t.arg(arg)})
        try:
            return apply(s, other), other
        except Rejected:
            pass
        raise


def replay_kept(
    s0: ClusterState, steps: Sequence[Transition], refs: Sequence[Ref], keep: Sequence[int]
) -> Iterator[tuple[int, Transition, ClusterState | Rejected]]:
    """Replay the steps at indices `keep` from `s0`, references re-resolved: yields
    `(index, step as taken, state after it)` for each step taken. A step that cannot be
    resolved (its request's `Arrive`, or its node, is gone) or that the model refuses in
    the state it now meets (a copy finished whose write was removed) is left out, but
    for the last kept step: refused, it is yielded with its `Rejected` in place of the
    state."""
    s = s0
    rids: dict[int, int] = {}
    last = keep[-1] if keep else None
    for i in keep:
        t = resolve(s, steps[i], refs[i], rids)
        if t is None:
            continue
        try:
            s, t = apply_either(s, t)
        except Rejected as e:
            if i == last:
                yield i, t, e
            continue
        yield i, t, s
