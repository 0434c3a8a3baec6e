"""Shrinking a failing run to a short case: remove steps while the same failure still
happens, until no single removal keeps it (delta debugging: halves, quarters, ... then
single steps, repeated until nothing more can go).

Windows of up to 8 steps are tried at every position, larger ones at multiples of their
size. A failure is an invariant violation (the same invariants, by number and name, violated
after the last step and none before it) or a step the model refuses (the same
transition, refused for the same reason with its numbers ignored).

Removing a step changes what later steps refer to, so a candidate is replayed with its
references re-resolved (`kvsm.resolve`): request ids are renumbered in arrival order (the
steps of a request whose `Arrive` is gone go too), a node is found again by its prefix
(the page symbols from the root to its end), a split by the prefix it cuts at,
`EvictDevice` / `EvictHost` take the victim the replicated order picks then (the only one
they may take), and a disk step's `ok` and a backup's `fits` are what the state implies
then. Every candidate is checked by the incremental checker (`kvsm.checking`), which
checks after each step what it wrote; the violations that name the failure are those of
the from-scratch check of the state that first fails.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..checking import Checker
from ..config import Config
from ..invariants import violations as check_invariants
from ..resolve import Ref, references, replay_kept
from ..state import initial_state
from ..transitions import Rejected, Transition, apply


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


def first_failure(cfg: Config, steps: list[Transition]) -> tuple[int, Failure] | None:
    """The number of steps up to and including the first failure, and the failure."""
    s = initial_state(cfg)
    ck = Checker(s)
    states = [s]
    found = None
    for k, t in enumerate(steps, start=1):
        try:
            s = apply(s, t)
        except Rejected as e:
            found = ck.finish()
            if found is None:
                return k, Failure("rejected", _reason_key(t.name, str(e)), (str(e),))
            break
        states.append(s)
        found = ck.step(t, s, k)
        if found is not None:
            break
    else:
        found = ck.finish()
    if found is None:
        return None
    bad = check_invariants(states[found.at])
    return found.at, Failure("violation", _invariants(bad), tuple(bad))


def _attempt(
    cfg: Config, steps: list[Transition], refs: list[Ref], keep: list[int], target: Failure
) -> tuple[list[Transition], list[int]] | None:
    """Replay the kept steps (references re-resolved, `kvsm.resolve`) with every
    invariant checked (`kvsm.checking.Checker`); the steps actually taken, and their
    indices, when they end in the target failure and no state before it breaks an
    invariant, else None."""
    s0 = last = initial_state(cfg)
    ck = Checker(s0)
    if ck.start(0) is not None:
        return None
    taken: list[Transition] = []
    used: list[int] = []
    found = None
    for i, t, after in replay_kept(s0, steps, refs, keep):
        if found is not None:
            return None  # a step after the first broken state
        if isinstance(after, Rejected):
            ok = target.kind == "rejected" and i == keep[-1] and _reason_key(t.name, str(after)) == target.key
            return (taken + [t], used + [i]) if ok and ck.finish() is None else None
        taken.append(t)
        used.append(i)
        last = after
        found = ck.step(t, after, len(taken))
        if found is not None and found.at != len(taken):
            return None  # an earlier state broke (located by a later check)
    if target.kind != "violation" or not taken:
        return None
    if found is None:
        found = ck.finish()
        if found is None or found.at != len(taken):
            return None
    return (taken, used) if _invariants(check_invariants(last)) == target.key else None


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
    refs = references(cfg, steps)
    deadline = time.monotonic() + seconds
    keep = list(range(len(steps)))
    best = list(steps)
    chunk = max(1, len(keep) // 2)
    while True:
        progressed = False
        i = 0
        while i < len(keep):
            if time.monotonic() > deadline:
                return Shrunk(best, _as_shrunk(cfg, best, target), k, False)
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
    return Shrunk(best, _as_shrunk(cfg, best, target), k, True)


def _as_shrunk(cfg: Config, steps: list[Transition], target: Failure) -> Failure:
    """The failure of the shrunk `steps`: the target's, with the messages of the shrunk
    run (the nodes and requests there are numbered anew)."""
    ff = first_failure(cfg, steps)
    assert ff is not None and ff[0] == len(steps) and ff[1].key == target.key, (ff, target)
    return ff[1]
