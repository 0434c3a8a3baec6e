"""The VIEW of `spec/KVView.tla` (`StampView`) on canonical states: what TLC keeps of
a state when it checks a model under that view.

Access stamps are read only by comparing them, so each node's `touched` and the
clock become their rank among the values of the stamps and the clock; a hit count is
read only against the thresholds 2 and `WriteThreshold`, so it is capped at the
larger. Under the defect `wallclock_tiebreak` a rank does arithmetic on stamps and
the view is the whole state. `tests/test_view.py` checks, on complete state graphs,
that states with one view are bisimilar and satisfy the same invariants, and that TLC
counts one state per view.
"""

from __future__ import annotations

from bisect import bisect_left

from ..config import Config
from .canon import Canon


def stamp_view(c: Canon, cfg: Config) -> Canon:
    """The class of `c` under `StampView`: equal for two states exactly when TLC's
    view of them is equal."""
    if cfg.bug == "wallclock_tiebreak":
        return c
    values = sorted({n.touched for n in c.nodes} | {c.clock})
    cap = max(2, cfg.write_threshold)
    nodes = frozenset(n._replace(hits=min(n.hits, cap), touched=bisect_left(values, n.touched)) for n in c.nodes)
    return c._replace(nodes=nodes, clock=bisect_left(values, c.clock))
