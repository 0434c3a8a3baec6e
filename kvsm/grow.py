"""Growing a large tree fast: a log whose first part builds a tree of a chosen size in
about two transitions a node, followed by an ordinary walk over it.

A walk grows its tree slowly (about 11 steps a node: most of its draws are requests that
hit, backups, evictions), so a tree of a million nodes would take it hours. `grow`
instead plans the tree first, on a shadow of its own (`Plan`): each new request either
extends a node chosen uniformly at random with 1 to `max_pages` fresh pages (one new
node) or, when the node is a leaf of two pages or more, diverges inside it (the node is
split: two new nodes). Nodes are never more than `depth` + 1 below the root, so that a
larger tree is wider, not deeper: a request walks as many nodes on a tree of a million
nodes as on one of a thousand.
Each planned request is then taken through the model's own transitions, one at a time:
`Arrive` with its prompt, `Match` (which makes the split), `Insert` (the new node) and
`Finish`. The config's device pool holds every page the growth allocates and a few more a lane,
so nothing is evicted while the tree grows and the walk then runs on a full cache; L2
holds as much as the device. After the growth, `grow` goes on with
`kvsm.walk.walk` for `walk_steps` steps: its requests' prompts (the config's, the same
number for every size) either repeat a path of the grown tree (a hit) or extend a node of
it with a fresh page. The result is a genuine log: every state is the model's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Iterator

from .config import Config, Prompt
from .state import ClusterState, initial_state
from .transitions import Transition, apply
from .walk import walk


class Plan:
    """The shadow tree `grow` plans with: for each node its own page symbols, its parent,
    its depth and its number of children. Node 0 is the root."""

    def __init__(self, seed: int, depth: int, max_pages: int, R: int) -> None:
        self.rng = random.Random(seed)
        self.depth, self.max_pages, self.R = depth, max_pages, R
        self.keys: list[tuple[int, ...]] = [()]
        self.parent = [-1]
        self.level = [0]
        self.kids = [0]
        self.next_sym = 1
        self.lane_pages = [0] * R  # device pages the growth takes in each lane

    def __len__(self) -> int:
        return len(self.keys)

    def path_key(self, i: int) -> tuple[int, ...]:
        """The symbols from the root down to the end of node `i`."""
        parts = []
        while i > 0:
            parts.append(self.keys[i])
            i = self.parent[i]
        return tuple(s for part in reversed(parts) for s in part)

    def fresh(self, n: int) -> tuple[int, ...]:
        out = tuple(range(self.next_sym, self.next_sym + n))
        self.next_sym += n
        return out

    def _node(self, key: tuple[int, ...], parent: int) -> int:
        self.keys.append(key)
        self.parent.append(parent)
        self.level.append(self.level[parent] + 1)
        self.kids.append(0)
        self.kids[parent] += 1
        return len(self.keys) - 1

    def next_prompt(self) -> tuple[int, ...]:
        """One more request: its prompt, and the plan's tree as the model's will be after
        that request's `Insert`."""
        rng = self.rng
        while True:
            i = rng.randrange(len(self.keys))
            key = self.keys[i]
            split = i > 0 and not self.kids[i] and len(key) > 1 and self.level[i] <= self.depth
            if split or self.level[i] < self.depth:
                break
        suffix = self.fresh(rng.randint(1, self.max_pages))
        if split:
            # diverge inside leaf i: an upper node takes its first `at` pages
            at = rng.randrange(1, len(key))
            upper = self._node(key[:at], self.parent[i])
            self.kids[self.parent[i]] -= 1
            self.keys[i], self.parent[i] = key[at:], upper
            self.level[i] += 1
            self.kids[upper] += 1
            i = upper
        prefix = self.path_key(i)
        self._node(suffix, i)
        for k in range(len(prefix), len(prefix) + len(suffix)):
            self.lane_pages[k % self.R] += 1
        return prefix + suffix

    def sample_prompts(self, count: int) -> list[tuple[int, ...]]:
        """`count` prompts over the planned tree, half of them a whole path from the root to
        a node drawn at random, half a path extended by one fresh page."""
        out = []
        for k in range(count):
            i = self.rng.randrange(1, len(self.keys))
            key = self.path_key(i)
            out.append(key + self.fresh(1) if k % 2 else key)
        return out


@dataclass(frozen=True)
class Growth:
    """What `grow` needs: the config (its prompts are the walk's), the plan's seed and
    shape, and the requests the growth takes."""

    config: Config
    seed: int
    depth: int
    max_pages: int
    requests: int
    nodes: int  # the tree's nodes after the growth, the root included


def plan_growth(
    nodes: int, base: Config, seed: int = 1, depth: int = 4, max_pages: int = 4, prompts: int = 512, slack: int = 64
) -> Growth:
    """The growth to a tree of at least `nodes` nodes (the root included): the plan is made
    once here to size the config (device pages for every page the growth takes in its
    lane, plus `slack` a lane; L2 for the whole device) and to draw the walk's `prompts`.
    `base` gives the rest of the config (R, P, weights, ...)."""
    if nodes < 2:
        raise ValueError(f"a grown tree has at least 2 nodes, not {nodes}")
    plan = Plan(seed, depth, max_pages, base.R)
    requests = 0
    while len(plan) < nodes:
        plan.next_prompt()
        requests += 1
    walk_prompts = tuple(Prompt(p, 1) for p in plan.sample_prompts(prompts))
    # a request's own decoding page is taken and freed before the next one arrives
    L1 = max(plan.lane_pages) + 1 + slack
    cfg = replace(base, L1=L1, L2=base.R * L1, prompts=walk_prompts)
    return Growth(config=cfg, seed=seed, depth=depth, max_pages=max_pages, requests=requests, nodes=len(plan))


def grow(g: Growth, walk_steps: int, walk_seed: int = 1, state: ClusterState | None = None) -> Iterator[tuple[Transition, ClusterState]]:
    """The growth's transitions (four a request), then `walk_steps` steps of the walk."""
    s = state if state is not None else initial_state(g.config)
    plan = Plan(g.seed, g.depth, g.max_pages, g.config.R)
    for _ in range(g.requests):
        rid = s.next_rid
        steps = (
            Transition.make("Arrive", rid=rid, tokens=plan.next_prompt(), out_pages=1),
            Transition.make("Match", rid=rid),
            Transition.make("Insert", rid=rid),
            Transition.make("Finish", rid=rid),
        )
        for t in steps:
            s = apply(s, t)
            yield t, s
    yield from walk(g.config, walk_steps, walk_seed, state=s)
