"""The invariants (docs/model.md), one module each, every module holding the rule over a
whole state (`whole`) beside the rule over what one transition wrote (`step...`) and,
where it has one, the rule's fast whole-state form (`holds`):

    tree (1)  residency (2)  locks (3)  pending (4)  device_pages (5)  host_pages (6)
    content (7)  durable (8)  reload (9)  counts (10)  ownership (11)
    collectives (12)  agreement (13)  running (14)  isolation (15)

Every check reports a violation of invariant `i` as one message, "{i} {Name}: ...",
made by that invariant's module (`common.label`).

`violations(state)` checks invariants 1-10 and 12-15 of a state and returns those
messages, empty when every one holds. It recomputes everything it checks from the tree
itself and never trusts a running structure (those are what invariant 10 checks), so it
is O(size of state).

`step_violations(rank, state)` checks invariant 11, Ownership, on one transition: the
effects that produced `state` (`kvsm.effects`) make each rank touch only its own device
pages, its own pages of an L2 object and its own disk; a per-rank transition of rank
`rank` does only that rank's work. It is O(effects).

`holds(state, cache)` decides `violations(state) == []` fast (`fast`), remembering in
`cache` what helps the next state; `local_violations` checks invariants 1-10 and 12-15
over what one transition wrote (`step`). `kvsm.checking.Checker` runs both along a run.
"""

from __future__ import annotations

from ..state import ClusterState
from . import agreement, collectives, content, counts, device_pages, durable, host_pages, isolation, locks, pending, reload, residency, running, tree
from .agreement import agreement_violation
from .collectives import collectives_violations
from .common import INVARIANTS, NAMES, STATE_INVARIANTS, Whole, contract, label, prepared_ids
from .fast import Cache, holds
from .ownership import step_violations
from .pending import prepared_violations
from .step import Shadow, local_violations

# The whole-state rules, in the order their reports are listed (invariant 3's matched
# requests, and invariant 10's per-rank progress, come after 10's counters).
WHOLE = (
    residency.whole, locks.whole, pending.whole, device_pages.whole, host_pages.whole, content.whole,
    durable.whole, reload.whole, counts.whole, locks.whole_matched, counts.whole_progress,
    collectives.whole, agreement.whole, running.whole, isolation.whole,
)


def violations(s: ClusterState) -> list[str]:
    w = Whole(s)
    if not tree.whole(w):
        return w.out  # the other rules read the tree
    for rule in WHOLE:
        rule(w)
    return w.out


def violations_after(rank: int | None, s: ClusterState) -> list[str]:
    """Every invariant a transition must keep: 1-10 and 12-15 of the state `s` it
    produced, and 11 of the transition itself (`rank` is its rank, None for a replicated
    one)."""
    return violations(s) + step_violations(rank, s)


def full_violations(s: ClusterState, cache: Cache | None = None) -> list[str]:
    """`violations(s)`, decided faster: `holds` recomputes every invariant from the
    state's values (never from its derived structures) and says only whether all hold;
    when one does not, `violations` recomputes it all to name it."""
    return [] if holds(s, cache) else violations(s)


__all__ = [
    "INVARIANTS", "NAMES", "STATE_INVARIANTS", "Cache", "Shadow", "agreement_violation", "collectives_violations",
    "contract", "full_violations", "holds", "label", "local_violations", "prepared_ids", "prepared_violations",
    "step_violations", "violations", "violations_after",
]
