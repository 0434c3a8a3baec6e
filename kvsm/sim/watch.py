"""The simulator's one way to check a run (`--check`): a `kvsm.checking.Checker` that sees
every transition of the log, before anything else reads the state it produced."""

from __future__ import annotations

from typing import Any, Callable

from ..checking import EVERY, Checker
from ..state import ClusterState
from ..transitions import Transition
from .stops import SimInvariantError


class Watch:
    """What sees every transition of the log besides the log itself: the invariant
    checker (with `check`; a from-scratch check after every `every` transitions, 1 to
    stop at the first state that breaks an invariant) and the caller's `on_transition`.
    A violation raises `SimInvariantError`, naming the transition that broke the state."""

    def __init__(
        self,
        s0: ClusterState,
        check: bool,
        on_transition: Callable[[Transition, ClusterState], None] | None = None,
        every: int = EVERY,
        count: int = 0,
    ) -> None:
        self.checker = Checker(s0, every=every) if check else None
        self.on_transition = on_transition
        self.count = count  # transitions of the log before `s0`
        if self.checker is not None:
            self._raise(self.checker.start(0))

    def write(self, t: Transition, state: ClusterState) -> None:
        self.count += 1
        if self.checker is not None:
            self._raise(self.checker.step(t, state, self.count))
        if self.on_transition is not None:
            self.on_transition(t, state)

    def finish(self) -> None:
        if self.checker is not None:
            self._raise(self.checker.finish())

    def _raise(self, found: Any) -> None:
        if found is not None:
            where = f"after log transition #{found.at} {found.transition}" if found.transition is not None else "in the initial state"
            raise SimInvariantError(f"{where}: " + "; ".join(found.violations), found.at, tuple(found.violations))
