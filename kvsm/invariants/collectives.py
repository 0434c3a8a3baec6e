"""Invariant 12, Collectives: call k of the commit collective on every rank is one
collective: within a round, no rank returns early from a call another rank entered
(that rank would wait in the MIN for a call that never comes, or pair it with another
collective), and a round is open only while a backup is in flight. Over a transition
the rule is the same, checked when the round or the writes changed (`step.py`)."""

from __future__ import annotations

from typing import Any

from ..state import Round

ROUNDS = tuple(Round)  # the values a rank's commit round may take

I = 12


def collectives_violations(rounds: tuple[int, ...], writes: tuple[int, ...]) -> list[str]:
    """The rule on a commit round (`commit_round`) with the backups in flight (`writes`):
    what is wrong, in words."""
    out = []
    if any(c not in ROUNDS for c in rounds):
        out.append(f"commit round {list(rounds)} holds an unknown position")
    entered = [r for r, c in enumerate(rounds) if c == Round.IN]
    skipped = [r for r, c in enumerate(rounds) if c == Round.SKIPPED]
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
        if any(c not in ROUNDS for c in rounds) or (Round.IN in rounds and Round.SKIPPED in rounds) or not s.writes:
            return False
    return True

