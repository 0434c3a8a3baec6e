"""`Collectives`: the collectives of the simulated cluster (`kvsm.sim.cluster`), a mixin
of `Cluster`: where a rank's replica learns the other ranks' per-rank steps. The MIN
of a sync point (`learn_min`: finished writes, and appended acks under `ack_append =
reference`), the landed load-back copies (`learn_loads`), the commit collective's calls
(`commit_calls`), the ack appends (`append_acks`, `append_ack`) and the L3 collective
(`learn_l3`: spill, reload and disk progress). Under `replicas = agreement` a replica
that lacks nothing of the others' progress after one takes the log's state instead
(`Cluster._adopt`).
"""

from __future__ import annotations

from typing import Any, Callable

from ..state import Round
from ..transitions import Transition
from ..transitions.commit import commit_due
from .sharing import with_calls
from .stops import SimDivergence


def _append_all(v: Any) -> None:
    """Every rank appends the final ack of each submitted write, in one step a write
    (`v`: a `kvsm.sim.cluster.View`)."""
    while min(v.state.acked) < len(v.state.writes):
        v.apply(Transition.make("AckAppendAll"))


class Collectives:
    """The collective methods of `Cluster` (which holds the views and the unlearnt steps
    they read)."""

    __slots__ = ()

    def _learn(self, unseen: list[list[Transition]], what: str, local: bool = False) -> None:
        """Every rank's steps in `unseen` reach every other rank's replica, in that rank's
        order (`local`: they are steps of `LOCAL_STEPS`)."""
        calls = unseen is self._calls_unseen and self.adopting and self._calls_plain
        if unseen is self._calls_unseen:
            self._calls_plain = True  # a new round
        unlearnt = self._unlearnt(unseen) if local and self.adopting else None
        for v in self.replicas:
            if unlearnt is not None and not self._lags(v, unlearnt):
                self._adopt(v, what)
                continue
            if calls:
                self._catch_up(v)
                # every call of the round changed only its rank's entry (`_call`)
                v.state = with_calls(v.state, self.log.state.commit_round)
                continue
            for q, steps in enumerate(unseen):
                if q == v.rank:
                    continue
                for t in steps:
                    self._catch_up(v)  # (the steps read its state)
                    self._step_or_diverge(v, t, f"at the {what} of tick {self.tick}: rank {q}'s {t}")
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
        self._learn(self._calls_unseen, "commit collective", local=True)
        return any(rounds)

    def append_acks(self) -> None:
        """Under `ack_append = reference`: every rank appends the final ack of each
        submitted write, before its copy finishes. The simulator appends them when the
        writes are handed to the copy engines, on every rank at once, as the reference
        says it does ("a deterministic layer-end / post-forward point across CP
        ranks"); the model also lets ranks append at different times. Under
        `ack_append = lockstep` the appends are the replicated step `AckAppendAll`."""
        if self.cfg.ack_append == "lockstep":
            self.run(_append_all)
            return
        if self.cfg.ack_append != "reference":
            return
        for r in range(self.R):
            while self.state.acked[r] < len(self.state.writes):
                self.rank_step(r, Transition.make("AckAppend", rank=r))
        # appended in lockstep, so every rank knows the others' appends at once: a
        # replicated step taken before the next MIN (a rollback, which scrubs the acks
        # of the write it drops) then finds every replica's queues as the log has them
        self._learn(self._acks_unseen, "ack append", local=True)

    def append_ack(self, rank: int) -> None:
        """Under `ack_append = reference`, as the copy engines time it: rank `rank` appends
        the final ack of its next write, at a point of its own. The other ranks' replicas
        learn it at once (an ack changes nothing another rank decides by; a replicated
        step before the next MIN, a rollback that scrubs it, then finds every replica's
        queues as the log has them)."""
        self.rank_step(rank, Transition.make("AckAppend", rank=rank))
        self._learn(self._acks_unseen, "ack append", local=True)

    def learn_l3(self) -> None:
        """The L3 collective: every rank's spill, reload and disk progress since the last
        one reaches every other rank's replica, in that rank's order."""
        self._learn(self._l3_unseen, "L3 collective")

    def learn_min(self) -> int:
        """The MIN collective of a sync point: every rank learns the prefix of `writes`
        that all ranks finished and catches its replica up to it (first, under
        `ack_append = reference`, every rank's appended acks)."""
        self._learn(self._acks_unseen, "MIN collective", local=True)
        m = min(self.log.state.write_done)
        unlearnt = self._unlearnt(None) if self.adopting and self.replicas else None
        for v in self.replicas:
            if unlearnt is not None and not self._lags(v, unlearnt, m):
                self._adopt(v, "MIN collective")
                continue
            self._catch_up(v)
            for q in range(self.R):
                while v.state.write_done[q] < m:
                    self._step(v, Transition.make("WriteDone", rank=q))
        return m
