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
These collectives are `Cluster`'s mixin `kvsm.sim.collectives.Collectives`.

With one rank the replica would be the log's state step for step (there is no other
rank whose progress arrives late), so it is not kept twice.

How much of this a run does is its `replicas` level (docs/sim.md, "How often replicas
are compared"): `every` (the default) all of it; `agreement` the same comparisons, but a
replica whose state is the log's takes the log's outcome of a procedure instead of
running it (where no rank's view decides), and at a collective after which it lacks
nothing of the other ranks' progress it is compared and takes the log's state instead
of applying their steps one by one (`kvsm.sim.sharing`); `off` no replicas at all.
"""

from __future__ import annotations

from typing import Any, Callable

from ..state import ClusterState, Rejected, initial_state
from ..config import Config
from ..transitions import Transition, apply
from .collectives import Collectives
from .options import REPLICAS
from .sharing import LOCAL_STEPS, call_only, local_difference, replicated_key, state_key, views_differ, with_calls
from .stops import SimDivergence

OnApply = Callable[[Transition, ClusterState, ClusterState], None]

# per-rank transitions whose news travels with the L3 collective (WriteDone travels with
# the MIN of a sync point)
L3_LOCAL = frozenset(("SpillGathered", "SpillDone", "ReloadDone", "DiskFail", "DiskRecover"))


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


class Cluster(Collectives):
    def __init__(self, cfg: Config, on_apply: OnApply | None = None, replicas: str = "every") -> None:
        if replicas not in REPLICAS:
            raise ValueError(f"replicas {replicas!r}: must be one of {' | '.join(REPLICAS)}")
        s0 = initial_state(cfg)
        self.cfg = cfg
        self.R = cfg.R
        self.level = replicas
        self.log = View(None, s0, on_apply)
        self.replicas = [View(r, s0) for r in range(cfg.R)] if cfg.R > 1 and replicas != "off" else []
        # `_steps` remembers the per-rank steps applied since the last sync point, (state
        # key before, transition) -> state after, for the replicas that apply them later;
        # `agreement`: a replica whose state is the log's takes the log's outcome of a
        # procedure where no rank's view decides (`share_runs`)
        self.share_steps = replicas == "agreement"
        self.share_runs = self.share_steps and not views_differ(cfg)
        self._steps: dict[tuple[tuple, Transition], ClusterState] = {}
        # ... and a replica that lacks only other ranks' steps of LOCAL_STEPS takes the log's
        # state at the collective where it learns them (`_adopt`) while `adopting`
        self.adopting = self.share_steps
        self._calls_plain = True  # every commit call since the last learnt round changed only its entry
        self.replica_runs = 0  # procedures and per-rank steps a replica applied itself
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
        self._unseen_lists = (self._l3_unseen, self._loads_unseen, self._calls_unseen, self._acks_unseen)
        # `agreement`, while `adopting`: per rank, its own `WriteDone` steps that its replica
        # has not applied yet (`_defer`)
        self._deferred: list[list[Transition]] = [[] for _ in range(cfg.R)]

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
        if not self.replicas:  # (nothing to compare with, and no one to tell what it missed)
            result = proc(log, *args)
            self.transitions += len(log.trail)
            return result
        first = self.transitions + 1
        before = log.state
        result = proc(log, *args)
        self.transitions += len(log.trail)
        self._unseen.extend(log.trail)
        # under `agreement` (share_runs): replicas that start from one state (by digest)
        # reach one state; the log's run stands for those that start from its state
        ran: dict[tuple, ClusterState] | None = None  # (made when first needed)
        for v in self.replicas:
            if self._deferred[v.rank]:
                self._catch_up(v)
            if self.share_runs:
                if v.state is before:
                    v.state = log.state
                    continue
                d = state_key(v.state)
                if ran is None:
                    ran = {state_key(before): log.state}
                if d in ran:
                    v.state = ran[d]
                    continue
            v.trail = []
            self.replica_runs += 1
            try:
                proc(v, *args)
            except Rejected as e:
                self._diverged(v, log.trail, first, f"its {v.trail[-1] if v.trail else 'step'} was rejected ({e})")
            if v.trail != log.trail:
                self._diverged(v, log.trail, first, "it applied other transitions")
            if ran is not None:
                ran[d] = v.state
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
        before = self.log.state
        after = self.log.apply(t)
        self.transitions += 1
        if self.replicas:
            v = self.replicas[rank]
            # the replicas that learn this step later may find it here
            self._steps[(state_key(before), t)] = after
            if self.adopting and t.name in LOCAL_STEPS and replicated_key(before) != replicated_key(after):
                # it changed the replicated state after all: from now on the replicas
                # learn every step one by one (a correct model never gets here)
                self.adopting = False
            try:
                if self.adopting and t.name == "WriteDone" and (self._deferred[rank] or v.state is not before):
                    self._defer(v, t, before)
                elif self.adopting and t.name == "CommitCall":
                    self._catch_up(v)
                    self._call(v, before, after)
                else:
                    self._catch_up(v)
                    self._step(v, t)
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

    def _defer(self, v: View, t: Transition, before: ClusterState) -> None:
        """`agreement`: rank `v.rank`'s own `WriteDone` `t`, which the log applied to
        `before`, waits to reach its replica (which lacks some other rank's progress) until
        something reads the replica (`_catch_up`) or a collective replaces it with the
        log's state (`_adopt`), where it is not applied at all. A `WriteDone` reads only
        the replicated state and its rank's own counts (finished writes, appended acks,
        its commit call) and changes only its rank's local state; so the first deferred
        step waits only while the replica's own counts are those of the log's state it
        was applied to (the others follow on from it: every other step of that rank, and
        every step the replica takes, catches it up first)."""
        r = v.rank
        if not self._deferred[r]:
            mine = v.state
            if (mine.write_done[r], mine.acked[r], mine.commit_round[r]) != (before.write_done[r], before.acked[r], before.commit_round[r]):
                self._step(v, t)
                return
        self._deferred[r].append(t)

    def _catch_up(self, v: View) -> None:
        """Replica `v` applies its rank's own deferred `WriteDone` steps (`_defer`)."""
        steps = self._deferred[v.rank]
        if not steps:
            return
        self._deferred[v.rank] = []
        for t in steps:
            self._step_or_diverge(v, t, f"at tick {self.tick}: its own {t}, applied late,")

    def _step_or_diverge(self, v: View, t: Transition, what: str) -> None:
        """Replica `v` takes step `t` of the log; a rejection is a divergence, said as
        `v` diverged `what` "was rejected on its replica"."""
        try:
            self._step(v, t)
        except Rejected as e:
            raise SimDivergence(
                f"{v.name} diverged {what} was rejected on its replica ({e})",
                self._where(v.rank) | {"expected": str(t), "got": "rejected"},
            ) from None

    def _call(self, v: View, before: ClusterState, after: ClusterState) -> None:
        """`agreement`: rank `v.rank`'s commit call, which the log took from `before` to
        `after`, reaches its replica. A call that changed nothing but its rank's entry of
        the commit round (`call_only`) is that entry on the replica too, and so are the
        other ranks' calls of this round when `_learn` brings them, if all were such
        calls (`_calls_plain`): the round then costs the replicas no step of the model."""
        r = v.rank
        plain = call_only(before, after, r)
        self._calls_plain &= plain
        if v.state is before:
            v.state = after
        elif plain:
            rounds = list(v.state.commit_round)
            rounds[r] = after.commit_round[r]
            v.state = with_calls(v.state, tuple(rounds))
        else:
            self._step(v, Transition.make("CommitCall", rank=r))

    def _step(self, v: View, t: Transition) -> None:
        """Replica `v` applies per-rank step `t`. A per-rank step decides nothing from the
        rank's view, so its outcome is a function of the state and the transition: when
        the log or another replica applied `t` to the state `v` has (equal digests) since
        the last sync point, `v` takes that outcome."""
        key = (state_key(v.state), t)
        after = self._steps.get(key)
        if after is not None:
            v.state = after
            return
        self.replica_runs += 1
        self._steps[key] = v.apply(t)

    def _unlearnt(self, learnt: list[list[Transition]] | None) -> list[bool]:
        """Per rank: whether it has steps that the other ranks' replicas have not learnt,
        but for those in `learnt`."""
        return [any(u is not learnt and u[q] for u in self._unseen_lists) for q in range(self.R)]

    def _lags(self, v: View, unlearnt: list[bool], upto: int = 0) -> bool:
        """Whether replica `v` still lacks some other rank's progress once it has learnt
        the steps not in `unlearnt` (`_unlearnt`) and every rank's finished writes up to
        the MIN `upto`."""
        r, mine, log = v.rank, v.state.write_done, self.log.state.write_done
        for q in range(self.R):
            if q != r and (unlearnt[q] or max(mine[q], upto) < log[q]):
                return True
        return False

    def _adopt(self, v: View, what: str) -> None:
        """`agreement`, at a collective after which replica `v` lacks nothing of the other
        ranks' progress: instead of applying their steps one by one, it takes the log's
        state, once its replicated digest and its own local progress are the log's (a
        per-rank step changes only its rank's local state, so learning them would reach
        the log's state)."""
        log = self.log.state
        if self._deferred[v.rank]:
            # its own finished writes since then: the log applied each to a state with the
            # replicated part it has (the log's, unchanged by the local steps since) and
            # with its own counts (`_defer`), so each has on it the effect it had on the log
            v.state = v.state if replicated_key(v.state) != replicated_key(log) else log
            self._deferred[v.rank] = []
        if v.state is not log:
            self._compare(v, log, False, f"the {what} (tick {self.tick}")
            v.state = log

    def check_agreement(self, l3_learnt: bool = False) -> None:
        """Compare every rank's replicated digest with the log's, and its own local progress
        (with `l3_learnt`, right after `learn_l3`: every rank's L3 state); stop at a
        divergence."""
        self.sync_points += 1
        if not self.replicas:
            return
        self._steps.clear()
        log = self.log.state
        for v in self.replicas:
            self._catch_up(v)
            if v.state is not log:  # (under `agreement` a replica may share the log's state)
                self._compare(v, log, l3_learnt, f"sync point {self.sync_points} (tick {self.tick}")
        self._agreed_at = (self.sync_points, self.transitions)
        self._unseen = []

    def _compare(self, v: View, log: ClusterState, l3_learnt: bool, where: str) -> None:
        """Stop the run if replica `v` differs from the log's state `log` in its replicated
        digest or in the local progress it must know."""
        if replicated_key(v.state) != replicated_key(log):
            bad = f"replicated digest {v.state.replicated_digest()} != {log.replicated_digest()} of the log's state"
        else:
            bad = local_difference(v.state, log, v.rank, l3_learnt)
        if bad:
            sp, tr = self._agreed_at
            raise SimDivergence(
                f"{v.name} diverged by {where}, after log transition "
                f"#{self.transitions} {self._unseen[-1] if self._unseen else ''}): {bad}; the ranks last agreed at "
                f"sync point {sp} (after transition #{tr}), so one of the {len(self._unseen)} replicated "
                f"transitions since then differs in effect",
                self._where(v.rank) | {"agreed_sync_point": sp, "agreed_transition": tr},
            )
