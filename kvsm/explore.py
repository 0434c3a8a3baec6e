"""`kvsm explore`: breadth-first exploration of every reachable state of a config.

States are identified by their digest. The result counts distinct states, distinct
labelled edges `(state, transition name, next state)` (self-loops included, as TLC
counts them), the depth (the number of states on the longest shortest path from the
initial state, TLC's convention), the edges per transition name, and every invariant
violation with the shortest trace that reaches it (invariants 1-10 in every state,
invariant 11 on every edge). This is the Python half of
`kvsm conform`.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

from .config import Config
from .invariants import step_violations
from .invariants import violations as check_invariants
from .state import ClusterState, initial_state
from .transitions import NAMES, Transition, names_for, successors


@dataclass
class Graph:
    states: dict[str, ClusterState] = field(default_factory=dict)
    edges: set[tuple[str, str, str]] = field(default_factory=set)
    depth: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    parents: dict[str, tuple[str, Transition] | None] = field(default_factory=dict)
    names: tuple[str, ...] = NAMES

    def trace_to(self, digest: str) -> list[Transition]:
        out: list[Transition] = []
        cur = self.parents.get(digest)
        while cur is not None:
            prev, t = cur
            out.append(t)
            cur = self.parents.get(prev)
        return out[::-1]

    def summary(self) -> dict[str, Any]:
        by = Counter(name for _, name, _ in self.edges)
        return {
            "states": len(self.states),
            "edges": len(self.edges),
            "depth": self.depth,
            "edges_by_transition": {n: by.get(n, 0) for n in self.names},
            "violations": self.violations,
        }


def explore(
    cfg: Config,
    check: bool = True,
    max_states: int = 0,
    on_level: Callable[[int, int], None] | None = None,
    keep_states: bool = True,
    cut: bool = False,
) -> Graph:
    """Every state reachable from the initial one. With `cut`, a state that violates an
    invariant (1-10, 12, 13) is reached but not expanded: the graph of a model with an
    injected defect up to where it breaks, which is what TLC explores with the
    invariants as an action constraint (`kvsm conform --bug`)."""
    g = Graph(names=names_for(cfg))
    s0 = initial_state(cfg)
    d0 = s0.digest()
    g.states[d0] = s0
    g.parents[d0] = None
    frontier = deque([s0])
    level = 0
    while frontier:
        level += 1
        if on_level is not None:
            on_level(level, len(g.states))
        nxt: deque[ClusterState] = deque()
        for s in frontier:
            d = s.digest()
            if check or cut:
                broken = check_invariants(s)
                if check:
                    for v in broken:
                        g.violations.append({"violation": v, "trace": [str(t) for t in g.trace_to(d)]})
                if cut and broken:
                    continue
            for t, s2 in successors(s):
                d2 = s2.digest()
                g.edges.add((d, t.name, d2))
                if check:
                    for v in step_violations(t.rank, s2):
                        g.violations.append({"violation": v, "trace": [str(x) for x in g.trace_to(d)] + [str(t)]})
                if d2 not in g.states:
                    if max_states and len(g.states) >= max_states:
                        raise RuntimeError(f"more than {max_states} states; the config is too large to explore")
                    g.states[d2] = s2
                    g.parents[d2] = (d, t)
                    nxt.append(s2)
        frontier = nxt
    g.depth = level
    if not keep_states:
        g.states = {k: None for k in g.states}  # type: ignore[misc]
    return g
