"""Invariant 12, Collectives: call k of the commit collective on every rank is one
collective: within a round, no rank returns early from a call another rank entered
(that rank would wait in the MIN for a call that never comes, or pair it with another
collective), and a round is open only while a backup is in flight. Over a transition
the rule is the same, checked when the round or the writes changed (`step.py`)."""

from __future__ import annotations

from typing import Any

from ..state import ROUND_IDLE, ROUND_IN, ROUND_SKIPPED

I = 12


def collectives_violations(rounds: tuple[int, ...], writes: tuple[int, ...]) -> list[str]:
    """The rule on a commit round (`commit_round`) with the backups in flight (`writes`):
    what is wrong, in words."""
    out = []
    if any(c not in (ROUND_IDLE, ROUND_IN, ROUND_SKIPPED) for c in rounds):
        out.append(f"commit round {list(rounds)} holds an unknown position")
    entered = [r for r, c in enumerate(rounds) if c == ROUND_IN]
    skipped = [r for r, c in enumerate(rounds) if c == ROUND_SKIPPED]
    if entered and skipped:
        out.append(f"ranks {entered} entered the commit collective and ranks {skipped} returned early from the same call")
    if any(rounds) and not writes:
        out.append(f"a commit round is open {list(rounds)} with no backup in flight")
    return out


def whole(w: Any) -> None:
    for why in collectives_violations(w.s.commit_round, w.s.writes):
        w.bad(I, why)


def holds(s: Any) -> bool:
    """The whole-state rule, decided fast (`kvsm.invariants.fast`)."""
    rounds = s.commit_round
    if any(rounds):
        if any(c not in (ROUND_IDLE, ROUND_IN, ROUND_SKIPPED) for c in rounds) or (ROUND_IN in rounds and ROUND_SKIPPED in rounds) or not s.writes:
            return False
    return True

