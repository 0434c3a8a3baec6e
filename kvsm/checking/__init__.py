"""Checking every invariant along a run at speed (`kvsm replay --check`, `kvsm sim --check`,
`kvsm campaign`): the one way the simulator, the replay and the campaign check a run.

`kvsm.invariants.violations` recomputes invariants 1-10 from the whole state, which costs
time in proportion to the state; after every transition of a long run that dominates
everything else. A `Checker` instead checks after each transition only what that
transition can have broken: the nodes, requests, objects, pending backups, reload
candidates, device pages, host pages and disk entries it wrote
(`kvsm.invariants.local_violations`, each invariant's rule over a transition). Which keys
a transition wrote travels on the state it produced (`ClusterState.written`,
`kvsm.writes`), which pages it moved from those entries and its effects
(`kvsm.effects`).

Two relations need an index that the state does not keep: which node or request holds a
device page, and which object holds a host page. The checker keeps its own
(`kvsm.invariants.Shadow`), built from the whole state at the start and whenever the
writes of a transition are not known, and updated from every transition's writes.

The from-scratch check (`kvsm.invariants.full_violations`, which decides what
`violations` would say) still runs: after every transition that is an agreement point
(`Spec.agreement`: Commit, SpillAck, ReloadAdmit), after every `every` transitions,
after a transition whose writes are not known (a state not committed from the previous
one), and at the end. It reads the whole state each time and takes nothing from the
transactions; what it remembers between checks is the checker's own
(`kvsm.invariants.Cache`) and stands only while copies it compares with each new state
whole say that what it rests on is unchanged. When it finds a violation that the
per-transition checks did not, the checker checks the states since the last clean
from-scratch check again, from scratch, and reports the first that fails, so a report
always names the transition that broke the state. Invariant 11 (Ownership, over the
transition's effects) is cheap and checked after every transition. The digest sums of
invariant 10 are checked from scratch only (they sum over the whole state).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from ..invariants import INVARIANTS, STATE_INVARIANTS, Cache, Shadow, full_violations, holds, local_violations, step_violations
from ..state import ClusterState
from ..transitions import REGISTRY, Transition
from ..writes import written_between

EVERY = 512  # transitions between two from-scratch checks when no agreement point comes sooner

__all__ = ["EVERY", "INVARIANTS", "Checker", "Finding", "Stats", "full_violations", "holds"]


@dataclass
class Finding:
    """A violation: `at` is the caller's label of the transition after which the state
    first broke an invariant (a log line, a transition number), `how` says which check
    found it: "step" (the checks after that transition), "full" (the from-scratch check
    after that transition) or "located" (a later from-scratch check; the states since
    the last clean one were checked again to find the first that fails)."""

    at: Any
    transition: Transition | None
    violations: list[str]
    how: str


@dataclass
class Stats:
    """What was evaluated: from-scratch checks, per-transition checks, and per invariant
    how many times each kind of check evaluated it."""

    full: int = 0
    step: int = 0
    # per-transition evaluations not yet added to `per_invariant` (counted as plain numbers
    # on the hot path, added when read): of invariant 11, and of the state invariants
    owned_steps: int = 0
    state_steps: int = 0
    _per_invariant: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in INVARIANTS})

    @property
    def per_invariant(self) -> dict[str, Counter]:
        per = self._per_invariant
        if self.owned_steps:
            per["11 Ownership"]["step"] += self.owned_steps
            self.owned_steps = 0
        if self.state_steps:
            for k in STATE_INVARIANTS:
                per[k]["step"] += self.state_steps
            self.state_steps = 0
        return per

    def to_json(self) -> dict[str, Any]:
        return {
            "full_checks": self.full,
            "step_checks": self.step,
            "invariants": {k: dict(v) for k, v in self.per_invariant.items()},
        }


class Checker:
    """Checks a sequence of states, each produced from the previous by one transition.

    `start()` checks the first state from scratch; `step(t, after, at)` checks the state
    `t` produced from the previous one; `finish()` checks the last state from scratch.
    Each returns a `Finding` or None. `at` labels the transition in findings. The
    from-scratch check also runs after every agreement point (unless `at_agreement` is
    false, for measuring what those checks cost) and after `every` transitions; it is
    `full` (default `full_violations` with the checker's own cache, `self.cache`)."""

    def __init__(
        self,
        state: ClusterState,
        every: int = EVERY,
        at_agreement: bool = True,
        full: Callable[[ClusterState], list[str]] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.at_agreement = at_agreement
        self.cache = Cache()
        self.full = full if full is not None else partial(full_violations, cache=self.cache)
        self.state = state
        self.stats = Stats()
        self._shadow: Shadow | None = None
        # states since the last clean from-scratch check: (label, transition, state)
        self._since: list[tuple[Any, Transition | None, ClusterState]] = []

    def start(self, at: Any = 0) -> Finding | None:
        v = self._full(self.state)
        return Finding(at, None, v, "full") if v else None

    def step(self, t: Transition, after: ClusterState, at: Any = None) -> Finding | None:
        before, self.state = self.state, after
        st = self.stats
        st.step += 1
        owned = step_violations(t.rank, after)
        st.owned_steps += 1
        local = self._local(before, after)
        known = local is not None
        # every invariant the step broke: its effects' (11) and its state's, as the
        # whole-state check would name them
        bad = owned + (local or [])
        if bad:
            return Finding(at, t, bad, "step")
        self._since.append((at, t, after))
        if not known or (self.at_agreement and REGISTRY[t.name].agreement) or len(self._since) >= self.every:
            return self._checkpoint()
        return None

    def finish(self) -> Finding | None:
        if not self._since:
            return None
        return self._checkpoint()

    # ---- from scratch --------------------------------------------------------------------
    def _full(self, s: ClusterState) -> list[str]:
        self.stats.full += 1
        for k in STATE_INVARIANTS:
            self.stats.per_invariant[k]["full"] += 1
        return self.full(s)

    def _checkpoint(self) -> Finding | None:
        at, t, s = self._since[-1]
        v = self._full(s)
        if not v:
            self._since.clear()
            return None
        # the per-transition checks missed it: find the first state that fails
        for k, (at_k, t_k, s_k) in enumerate(self._since[:-1]):
            vk = self._full(s_k)
            if vk:
                return Finding(at_k, t_k, vk, "located")
        return Finding(at, t, v, "full")  # every earlier state holds: this transition broke it

    # ---- per transition ------------------------------------------------------------------
    def _local(self, before: ClusterState, after: ClusterState) -> list[str] | None:
        """The per-transition checks; None when what the transition wrote is not known
        (`after` was not committed from `before`): then the caller checks from scratch,
        and the shadow indexes are rebuilt at the next transition."""
        if after is before:
            return []
        written = written_between(before.written, after.written)
        if written is None or after.config is not before.config:
            self._shadow = None
            return None
        if self._shadow is None:
            self._shadow = Shadow(before)
        return local_violations(before, after, written, self._shadow, self.cache.chain, self.stats)
