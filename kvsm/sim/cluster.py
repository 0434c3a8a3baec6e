"""The cluster as the simulator drives it: the log's state and one replica per rank.

Every rank runs the same scheduler on its own replica of the model and must reach the
same decisions without asking the others. The simulator runs each replicated step
(a *procedure*: a function of a `View` that applies transitions) once on the log's
state and once on every rank's replica. A rank's own `WriteDone` reaches its replica
when that rank finishes the write; the other ranks' progress reaches it only at a
sync point, through the MIN that `Commit` needs. So the replicas see the same
replicated transitions in a different order of per-rank steps, which is exactly what
`replicated_digest` must not notice.

Divergence is caught two ways, and either stops the run with a `SimDivergence` that
names the step: a rank whose procedure applies other transitions than the log's
(compared after every procedure), and a rank whose replicated digest differs from
the log's at a sync point.

With one rank the replica would be the log's state step for step (there is no other
rank whose progress arrives late), so it is not kept twice.
"""

from __future__ import annotations

from typing import Any, Callable

from ..state import ClusterState, Rejected, initial_state
from ..config import Config
from ..transitions import Transition, apply

OnApply = Callable[[Transition, ClusterState, ClusterState], None]


class SimDivergence(RuntimeError):
    """Ranks no longer agree; `step` says where (sync point, tick, log index, rank)."""

    def __init__(self, message: str, step: dict[str, Any]) -> None:
        super().__init__(message)
        self.step = step


class View:
    """One copy of the cluster state: a rank's replica, or (rank None) the log's."""

    __slots__ = ("rank", "state", "trail", "on_apply")

    def __init__(self, rank: int | None, state: ClusterState, on_apply: OnApply | None = None) -> None:
        self.rank = rank
        self.state = state
        self.trail: list[Transition] = []  # replicated transitions of the current procedure
        self.on_apply = on_apply

    @property
    def name(self) -> str:
        return "the log" if self.rank is None else f"rank {self.rank}"

    def apply(self, t: Transition) -> ClusterState:
        before = self.state
        after = apply(before, t)
        self.state = after
        if t.rank is None:
            self.trail.append(t)
        if self.on_apply is not None:
            self.on_apply(t, before, after)
        return after


class Cluster:
    def __init__(self, cfg: Config, on_apply: OnApply | None = None) -> None:
        s0 = initial_state(cfg)
        self.cfg = cfg
        self.R = cfg.R
        self.log = View(None, s0, on_apply)
        self.replicas = [View(r, s0) for r in range(cfg.R)] if cfg.R > 1 else []
        self.transitions = 0  # applied to the log's state
        self.sync_points = 0
        self.tick = 0
        self._agreed_at = (0, 0)  # (sync point, transitions) of the last agreement
        self._unseen: list[Transition] = []  # the log's replicated transitions since then

    @property
    def state(self) -> ClusterState:
        return self.log.state

    def views(self) -> list[View]:
        return [self.log, *self.replicas]

    def _where(self, rank: int | None) -> dict[str, Any]:
        return {"sync_point": self.sync_points, "tick": self.tick, "transition": self.transitions, "rank": rank}

    def run(self, proc: Callable[..., Any], *args: Any) -> Any:
        """A replicated step: `proc(view, *args)` on the log's state, then on every
        replica; every rank must apply the very transitions the log's run applied."""
        log = self.log
        log.trail = []
        first = self.transitions + 1
        result = proc(log, *args)
        self.transitions += len(log.trail)
        self._unseen.extend(log.trail)
        for v in self.replicas:
            v.trail = []
            try:
                proc(v, *args)
            except Rejected as e:
                self._diverged(v, log.trail, first, f"its {v.trail[-1] if v.trail else 'step'} was rejected ({e})")
            if v.trail != log.trail:
                self._diverged(v, log.trail, first, "it applied other transitions")
        return result

    def _diverged(self, v: View, expected: list[Transition], first: int, why: str) -> None:
        got = v.trail
        i = next((k for k in range(min(len(got), len(expected))) if got[k] != expected[k]), min(len(got), len(expected)))
        ours = str(expected[i]) if i < len(expected) else "nothing"
        theirs = str(got[i]) if i < len(got) else "nothing"
        step = self._where(v.rank) | {"transition": first + i, "expected": ours, "got": theirs}
        raise SimDivergence(
            f"{v.name} diverged at tick {self.tick}, log transition #{first + i}: {why}; "
            f"the log has {ours}, {v.name} has {theirs}",
            step,
        )

    def rank_step(self, rank: int, t: Transition) -> None:
        """A per-rank transition: the rank's own replica sees it now, the others later."""
        self.log.apply(t)
        self.transitions += 1
        if self.replicas:
            self.replicas[rank].apply(t)

    def learn_min(self) -> int:
        """The MIN collective of a sync point: every rank learns the prefix of `writes`
        that all ranks finished and catches its replica up to it."""
        m = min(self.log.state.write_done)
        for v in self.replicas:
            for q in range(self.R):
                while v.state.write_done[q] < m:
                    v.apply(Transition.make("WriteDone", rank=q))
        return m

    def check_agreement(self) -> None:
        """Compare every rank's replicated digest with the log's; stop at a divergence."""
        self.sync_points += 1
        if not self.replicas:
            return
        want = self.log.state.replicated_digest()
        own = self.log.state.write_done
        for v in self.replicas:
            got = v.state.replicated_digest()
            bad = None
            if got != want:
                bad = f"replicated digest {got} != {want} of the log's state"
            elif v.state.write_done[v.rank] != own[v.rank]:
                bad = f"it counts {v.state.write_done[v.rank]} finished writes of its own, the log {own[v.rank]}"
            if bad:
                sp, tr = self._agreed_at
                raise SimDivergence(
                    f"{v.name} diverged by sync point {self.sync_points} (tick {self.tick}, after log transition "
                    f"#{self.transitions} {self._unseen[-1] if self._unseen else ''}): {bad}; the ranks last agreed at "
                    f"sync point {sp} (after transition #{tr}), so one of the {len(self._unseen)} replicated "
                    f"transitions since then differs in effect",
                    self._where(v.rank) | {"agreed_sync_point": sp, "agreed_transition": tr},
                )
        self._agreed_at = (self.sync_points, self.transitions)
        self._unseen = []
