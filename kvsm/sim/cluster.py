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

A rank's `LoadDone` (its copies of a load-back landed) reaches its own replica at once
and the others' at the next sync point (`learn_loads`): a batch's forward pass waits for
every rank's copies, so no replicated decision comes between. At a sync point every
rank reaches the commit collective's call (`CommitCall`, its own replica first), the
others learn each call (`commit_calls`), and `Commit` completes the round.

With L3, a rank's own spill and reload progress (`SpillGathered`, `SpillDone`,
`ReloadDone`) and its disk's state (`DiskFail`, `DiskRecover`) likewise reach its
replica at once and the others' replicas only at the next L3 collective (`learn_l3`),
where every rank contributes its current counters and counts and the model's
`SpillAck`, `ReloadAdmit` and `ReloadReserve` take the MIN and AND over them.

With one rank the replica would be the log's state step for step (there is no other
rank whose progress arrives late), so it is not kept twice.
"""

from __future__ import annotations

from typing import Any, Callable

from ..digest_sums import COMPONENTS
from ..state import ClusterState, Rejected, Round, initial_state
from ..config import Config
from ..transitions import Transition, apply
from ..transitions.commit import commit_due
from .stops import SimDivergence

OnApply = Callable[[Transition, ClusterState, ClusterState], None]

# per-rank transitions whose news travels with the L3 collective (WriteDone travels with
# the MIN of a sync point)
L3_LOCAL = frozenset(("SpillGathered", "SpillDone", "ReloadDone", "DiskFail", "DiskRecover"))
_I_L3 = COMPONENTS.index("l3")


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
        # a rank's replica takes that rank's own decisions (they differ from the other
        # ranks' only under an injected defect); the log's state is the cluster's
        after = apply(before, t, view=self.rank)
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
        # per rank: its L3 steps that the other ranks' replicas have not learnt yet
        self._l3_unseen: list[list[Transition]] = [[] for _ in range(cfg.R)]
        # per rank: its LoadDone and CommitCall steps the other ranks' replicas have not learnt
        self._loads_unseen: list[list[Transition]] = [[] for _ in range(cfg.R)]
        self._calls_unseen: list[list[Transition]] = [[] for _ in range(cfg.R)]
        # per rank: its AckAppend steps (ack_append = reference), learnt at the MIN
        self._acks_unseen: list[list[Transition]] = [[] for _ in range(cfg.R)]

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

    def device_diverged(self, rank: int, what: str) -> None:
        """A rank's device (its copy engine or its disk) finished work its model does not
        expect next: the model's count of that rank's progress has left what the rank
        did (a correct model never does). Stops the run like a replica divergence."""
        raise SimDivergence(
            f"rank {rank} diverged at tick {self.tick}, after log transition #{self.transitions}: {what}",
            self._where(rank) | {"expected": what, "got": "another count"},
        )

    def rank_step(self, rank: int, t: Transition) -> None:
        """A per-rank transition: the rank's own replica sees it now, the others later."""
        self.log.apply(t)
        self.transitions += 1
        if self.replicas:
            v = self.replicas[rank]
            try:
                v.apply(t)
            except Rejected as e:
                raise SimDivergence(
                    f"{v.name} diverged at tick {self.tick}, log transition #{self.transitions}: its own {t} "
                    f"was rejected on its replica ({e})",
                    self._where(rank) | {"expected": str(t), "got": "rejected"},
                ) from None
            if t.name in L3_LOCAL:
                self._l3_unseen[rank].append(t)
            elif t.name == "LoadDone":
                self._loads_unseen[rank].append(t)
            elif t.name == "CommitCall":
                self._calls_unseen[rank].append(t)
            elif t.name == "AckAppend":
                self._acks_unseen[rank].append(t)

    def _learn(self, unseen: list[list[Transition]], what: str) -> None:
        """Every rank's steps in `unseen` reach every other rank's replica, in that rank's order."""
        for v in self.replicas:
            for q, steps in enumerate(unseen):
                if q == v.rank:
                    continue
                for t in steps:
                    try:
                        v.apply(t)
                    except Rejected as e:
                        raise SimDivergence(
                            f"{v.name} diverged at the {what} of tick {self.tick}: rank {q}'s {t} "
                            f"was rejected on its replica ({e})",
                            self._where(v.rank) | {"expected": str(t), "got": "rejected"},
                        ) from None
        for steps in unseen:
            steps.clear()

    def learn_loads(self) -> None:
        """Every rank's landed load-back copies since the last sync point reach the others."""
        self._learn(self._loads_unseen, "sync point")

    def commit_calls(self, order: list[int] | None = None, before_call: Callable[[int, set[int]], None] | None = None) -> bool:
        """Every rank reaches the commit collective's call (in rank order, or `order`; the
        random schedule's `before_call(rank, entered)` may let the ranks that have not
        entered finish writes first), then learns every other rank's, after that rank's
        finished writes up to the MIN; returns whether they entered it. Under
        `commit_call = reference` (or the defect `skip_collective`) a rank whose own ack
        queue is empty returns early instead: when every rank does, there is no
        collective; when another rank entered, the calls no longer pair up and the run
        stops (invariant 12). Under `ack_append = reference` no rank calls while only
        prepared backups not attached yet are in flight (the reference's
        `ongoing_write_through` is empty)."""
        if not commit_due(self.state):
            return False
        entered: set[int] = set()
        for r in order if order is not None else range(self.R):
            if before_call is not None:
                before_call(r, entered)
            self.rank_step(r, Transition.make("CommitCall", rank=r))
            entered.add(r)
        rounds = self.state.commit_round
        if any(rounds) and not all(x == Round.IN for x in rounds):
            early = [r for r, x in enumerate(rounds) if x == Round.SKIPPED]
            cause = "bug = skip_collective" if self.cfg.bug == "skip_collective" else "commit_call = reference"
            raise SimDivergence(
                f"ranks {early} returned early from the commit collective that ranks "
                f"{[r for r, x in enumerate(rounds) if x == Round.IN]} entered (tick {self.tick}): the collective calls no "
                f"longer pair up (invariant 12 Collectives; {cause})",
                self._where(early[0]),
            )
        if before_call is not None:
            # writes finished during the calls: a rank's count travels with its call
            self.learn_min()
        self._learn(self._calls_unseen, "commit collective")
        return any(rounds)

    def append_acks(self) -> None:
        """Under `ack_append = reference`: every rank appends the final ack of each
        submitted write, before its copy finishes. The simulator appends them when the
        writes are handed to the copy engines, on every rank at once, as the reference
        says it does ("a deterministic layer-end / post-forward point across CP
        ranks"); the model also lets ranks append at different times."""
        if self.cfg.ack_append != "reference":
            return
        for r in range(self.R):
            while self.state.acked[r] < len(self.state.writes):
                self.rank_step(r, Transition.make("AckAppend", rank=r))
        # appended in lockstep, so every rank knows the others' appends at once: a
        # replicated step taken before the next MIN (a rollback, which scrubs the acks
        # of the write it drops) then finds every replica's queues as the log has them
        self._learn(self._acks_unseen, "ack append")

    def learn_l3(self) -> None:
        """The L3 collective: every rank's spill, reload and disk progress since the last
        one reaches every other rank's replica, in that rank's order."""
        self._learn(self._l3_unseen, "L3 collective")

    def learn_min(self) -> int:
        """The MIN collective of a sync point: every rank learns the prefix of `writes`
        that all ranks finished and catches its replica up to it (first, under
        `ack_append = reference`, every rank's appended acks)."""
        self._learn(self._acks_unseen, "MIN collective")
        m = min(self.log.state.write_done)
        for v in self.replicas:
            for q in range(self.R):
                while v.state.write_done[q] < m:
                    v.apply(Transition.make("WriteDone", rank=q))
        return m

    def check_agreement(self, l3_learnt: bool = False) -> None:
        """Compare every rank's replicated digest with the log's, and its own local progress
        (with `l3_learnt`, right after `learn_l3`: every rank's L3 state); stop at a
        divergence."""
        self.sync_points += 1
        if not self.replicas:
            return
        log = self.log.state
        want = log.replicated_digest()
        for v in self.replicas:
            got = v.state.replicated_digest()
            bad = None
            if got != want:
                bad = f"replicated digest {got} != {want} of the log's state"
            else:
                bad = _local_difference(v.state, log, v.rank, l3_learnt)
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


def _local_difference(mine: ClusterState, log: ClusterState, rank: int, every_rank: bool) -> str | None:
    """How rank `rank`'s replica differs from the log in local state it must know: its
    own finished writes and L3 progress, and with `every_rank` everyone's L3 state."""
    if mine.write_done[rank] != log.write_done[rank]:
        return f"it counts {mine.write_done[rank]} finished writes of its own, the log {log.write_done[rank]}"
    if mine.acked[rank] != log.acked[rank]:
        return f"it counts {mine.acked[rank]} appended write acks of its own, the log {log.acked[rank]}"
    if mine.load_done[rank] != log.load_done[rank]:
        return f"it counts {mine.load_done[rank]} landed load-backs of its own, the log {log.load_done[rank]}"
    if not log.config.L3:
        return None
    ranks = range(log.config.R) if every_rank else (rank,)
    for field in ("spill_gathered", "spill_done", "reload_done", "disk_ok"):
        a, b = getattr(mine, field), getattr(log, field)
        for r in ranks:
            if a[r] != b[r]:
                return f"its {field}[{r}] is {a[r]!r}, the log's {b[r]!r}"
    if every_rank and mine.current_sums()[_I_L3] != log.current_sums()[_I_L3]:
        return "its view of the ranks' disks (l3) differs from the log's"
    return None
