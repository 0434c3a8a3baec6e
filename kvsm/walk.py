"""`kvsm walk`: a seeded random walk over the enabled transitions.

Each step picks a transition family at random, weighted by the config's
`walk_weights` (default 1), among the families that have an enabled instance, then
one of that family's enabled instances uniformly. The same config and seed give the
same walk, byte for byte.
"""

from __future__ import annotations

import random
from typing import Iterator

from .config import Config
from .state import ClusterState, Rejected, initial_state
from .transitions import NAMES, REGISTRY, Transition


def step(state: ClusterState, rng: random.Random, weights: dict[str, float]) -> tuple[Transition, ClusterState] | None:
    names = [n for n in NAMES if weights.get(n, 1.0) > 0]
    while names:
        w = [weights.get(n, 1.0) for n in names]
        name = rng.choices(names, weights=w)[0]
        spec = REGISTRY[name]
        cands = list(spec.candidates(state))
        rng.shuffle(cands)
        for t in cands:
            try:
                return t, spec.apply(state, t)
            except Rejected:
                continue
        names.remove(name)
    return None


def walk(cfg: Config, steps: int, seed: int, state: ClusterState | None = None) -> Iterator[tuple[Transition, ClusterState]]:
    """Up to `steps` transitions; stops early where nothing is enabled."""
    rng = random.Random(seed)
    weights = dict(cfg.walk_weights)
    s = state if state is not None else initial_state(cfg)
    for _ in range(steps):
        nxt = step(s, rng, weights)
        if nxt is None:
            return
        yield nxt
        s = nxt[1]
