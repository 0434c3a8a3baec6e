"""Shrinking a failing run to a short case: remove steps while the same failure still
happens, until no single removal keeps it (delta debugging: halves, quarters, ... then
single steps, repeated until nothing more can go).

Windows of up to 8 steps are tried at every position, larger ones at multiples of their
size. A failure is an invariant violation (the same invariants, by number and name, violated
after the last step and none before it) or a step the model refuses (the same
transition, refused for the same reason with its numbers ignored).

Removing a step changes what later steps refer to, so a candidate is replayed with its
references re-resolved: request ids are renumbered in arrival order (the steps of a
request whose `Arrive` is gone go too), a node is found again by its prefix (the page
symbols from the root to its end), a split by the prefix it cuts at, `EvictDevice` /
`EvictHost` take the victim the replicated order picks then (the only one they may take),
and a disk step's `ok` and a `Reserve`'s `fits` are what the state implies then.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..invariants import violations as check_invariants
from ..state import ClusterState, initial_state
from ..transitions import REGISTRY, Rejected, Transition, apply
from ..render.names import node_paths


@dataclass(frozen=True)
class Failure:
    kind: str  # "violation" | "rejected"
    key: tuple  # what must stay the same
    messages: tuple[str, ...]  # the violations, or the refusal's reason

    def describe(self) -> str:
        if self.kind == "violation":
            return "the model violates " + "; ".join(self.messages)
        return f"the model refuses {self.key[0]}: {self.messages[0]}"


def _invariants(msgs: list[str]) -> tuple:
    # "7 Content: page 3 ..." -> "7 Content"
    return tuple(sorted({m.split(":", 1)[0] for m in msgs}))


def _reason_key(name: str, reason: str) -> tuple:
    return (name, re.sub(r"-?\d+", "N", reason))


@dataclass
class _Ref:
    """What an original step refers to, in terms that survive removing other steps."""

    rid: int | None = None
    prefix: tuple[int, ...] | None = None  # a node's whole prefix (Reserve, Rollback)
    cut: tuple[int, ...] | None = None  # the prefix a Split cuts after


def first_failure(cfg: Config, steps: list[Transition]) -> tuple[int, Failure] | None:
    """The number of steps up to and including the first failure, and the failure."""
    s = initial_state(cfg)
    for k, t in enumerate(steps, start=1):
        try:
            s = apply(s, t)
        except Rejected as e:
            return k, Failure("rejected", _reason_key(t.name, str(e)), (str(e),))
        bad = check_invariants(s)
        if bad:
            return k, Failure("violation", _invariants(bad), tuple(bad))
    return None


def _refs(cfg: Config, steps: list[Transition]) -> list[_Ref]:
    s = initial_state(cfg)
    out = []
    for t in steps:
        args = dict(t.args)
        ref = _Ref(rid=args.get("rid"))
        if t.name in ("Reserve", "Rollback"):
            ref.prefix = node_paths(s).get(args["node"])
        elif t.name in ("Split", "PruneStaleTail"):
            n = s.nodes.get(args["node"])
            paths = node_paths(s)
            if n is not None and n.parent in paths:
                ref.cut = paths[n.parent] + tuple(n.key[: args["at"]])
        out.append(ref)
        try:
            s = apply(s, t)
        except Rejected:
            break
    return out


def _resolve(s: ClusterState, t: Transition, ref: _Ref, rids: dict[int, int]) -> Transition | None:
    """`t` with its references re-resolved in state `s`; None when it cannot be."""
    args: dict[str, Any] = dict(t.args)
    if t.name == "Arrive":
        rids[args["rid"]] = s.next_rid
        args["rid"] = s.next_rid
    elif "rid" in args:
        if args["rid"] not in rids:
            return None
        args["rid"] = rids[args["rid"]]
    if t.name in ("Reserve", "Rollback"):
        if ref.prefix is None:
            return None
        found = next((nid for nid, p in node_paths(s).items() if p == ref.prefix and nid != 0), None)
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
        victim = next(iter(REGISTRY[t.name].candidates(s)), None)
        if victim is None:
            return None
        return victim
    return Transition.make(t.name, rank=t.rank, **args)


def _cut(s: ClusterState, prefix: tuple[int, ...]) -> tuple[int, int] | None:
    """The node inside which `prefix` ends, and how many of its pages the prefix covers;
    None when the prefix is not in the tree or ends at a node's end."""
    cur = s.nodes.get(0)
    i = 0
    while cur is not None and i < len(prefix):
        cid = cur.children.get(prefix[i])
        child = s.nodes.get(cid) if cid is not None else None
        if child is None:
            return None
        n = 0
        while n < len(child.key) and i + n < len(prefix) and child.key[n] == prefix[i + n]:
            n += 1
        if i + n == len(prefix) and n < len(child.key):
            return child.id, n
        if n < len(child.key):
            return None
        i += n
        cur = child
    return None


def _apply(s: ClusterState, t: Transition) -> tuple[ClusterState, Transition]:
    """Apply `t`; a disk step whose `ok`, or a `Reserve` whose `fits`, the state no longer
    implies takes the other."""
    try:
        return apply(s, t), t
    except Rejected:
        if t.name in ("SpillDone", "ReloadDone"):
            other = Transition.make(t.name, rank=t.rank, ok=not t.arg("ok"))
        elif t.name == "Reserve":
            other = Transition.make(t.name, node=t.arg("node"), fits=not t.arg("fits"))
        else:
            raise
        return apply(s, other), other


def _attempt(
    cfg: Config, steps: list[Transition], refs: list[_Ref], keep: list[int], target: Failure
) -> tuple[list[Transition], list[int]] | None:
    """Replay the kept steps (references re-resolved); the steps actually taken, and
    their indices, when they end in the target failure, else None."""
    s = initial_state(cfg)
    rids: dict[int, int] = {}
    taken: list[Transition] = []
    used: list[int] = []
    states = []
    for pos, i in enumerate(keep):
        t = _resolve(s, steps[i], refs[i], rids)
        if t is None:
            if "rid" in dict(steps[i].args):
                continue  # a step of a request whose Arrive was removed goes with it
            return None
        try:
            s, t = _apply(s, t)
        except Rejected as e:
            if target.kind == "rejected" and pos == len(keep) - 1 and _reason_key(t.name, str(e)) == target.key:
                return (taken + [t], used + [i]) if _clean(states) else None
            return None
        taken.append(t)
        used.append(i)
        states.append(s)
    if target.kind != "violation" or not states:
        return None
    if _invariants(check_invariants(s)) != target.key:
        return None
    return (taken, used) if _clean(states[:-1]) else None


def _clean(states: list[ClusterState]) -> bool:
    return all(not check_invariants(x) for x in states)


@dataclass
class Shrunk:
    steps: list[Transition]
    failure: Failure
    original: int  # steps before shrinking (up to the failure)
    minimal: bool  # False when the time budget ran out first


def shrink(cfg: Config, steps: list[Transition], seconds: float = 120.0) -> Shrunk | None:
    """The shortest run found that fails as `steps` first fails; None when it does not fail."""
    ff = first_failure(cfg, steps)
    if ff is None:
        return None
    k, target = ff
    steps = list(steps[:k])
    refs = _refs(cfg, steps)
    deadline = time.monotonic() + seconds
    keep = list(range(len(steps)))
    best = list(steps)
    chunk = max(1, len(keep) // 2)
    while True:
        progressed = False
        i = 0
        while i < len(keep):
            if time.monotonic() > deadline:
                return Shrunk(best, target, k, False)
            cand = keep[:i] + keep[i + chunk :]
            got = _attempt(cfg, steps, refs, cand, target) if cand else None
            if got is not None:
                best, keep = got
                progressed = True
            else:
                # small windows slide one step at a time: a Reserve and its Rollback only
                # go together, wherever they sit
                i += 1 if chunk <= 8 else chunk
        if chunk > 1:
            # every size of window up to 8 (a round of the commit collective on R ranks is
            # R + 1 steps that only go together), halving above
            chunk = chunk // 2 if chunk > 8 else chunk - 1
        elif not progressed:
            break
    return Shrunk(best, target, k, True)
