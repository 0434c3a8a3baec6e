"""`kvsm walk`: a seeded random walk over the enabled transitions.

Each step picks a transition at random, weighted by the config's `walk_weights`
(default 1), among the transitions that have an enabled instance, then one of its
enabled instances uniformly (for `Arrive`: a prompt drawn uniformly from the config's
list). The same config and seed give the
same walk, byte for byte.
"""

from __future__ import annotations

import random
from typing import Iterator

from .config import Config
from .state import ClusterState, Rejected, initial_state
from .transitions import REGISTRY, Transition, names_for


def _candidates(state: ClusterState, name: str, rng: random.Random) -> Iterator[Transition]:
    """A family's instances in random order; large families are sampled first."""
    spec = REGISTRY[name]
    if name == "Arrive" and state.config.prompts:
        # one prompt drawn from the config's list (a list of 100k prompts is not
        # enumerated at every step); a rejected arrival rejects them all
        p = rng.choice(state.config.prompts)
        yield Transition.make("Arrive", rid=state.next_rid, tokens=p.pages, out_pages=p.out_pages)
        return
    if name == "Reserve" and len(state.backup_index) > 16:
        # a large tree can have thousands of backup candidates: try a few drawn at
        # random before enumerating them all
        from .transitions.reserve import reserve_fits

        pool = state.backup_index
        for _ in range(8):
            nid = pool[rng.randrange(len(pool))]
            yield Transition.make("Reserve", node=nid, fits=reserve_fits(state, nid))
    cands = list(spec.candidates(state))
    rng.shuffle(cands)
    yield from cands


def step(state: ClusterState, rng: random.Random, weights: dict[str, float]) -> tuple[Transition, ClusterState] | None:
    names = [n for n in names_for(state.config) if weights.get(n, 1.0) > 0]
    while names:
        w = [weights.get(n, 1.0) for n in names]
        name = rng.choices(names, weights=w)[0]
        spec = REGISTRY[name]
        for t in _candidates(state, name, rng):
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
