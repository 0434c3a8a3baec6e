"""`StampView` (spec/KVView.tla, kvsm.tla.view) merges only states that no step and no
invariant tells apart: on complete state graphs, states with one view have the same
invariant verdicts and, label by label, successors with the same views (a
bisimulation), so TLC checking a model under the view misses no violation."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import replace
from typing import Any, Callable, Hashable, Iterable

import pytest

from kvsm.config import Prompt, load_config
from kvsm.explore import explore
from kvsm.invariants import violations
from kvsm.state import initial_state
from kvsm.tla.specmap import canon_model
from kvsm.tla.view import stamp_view


def view_classes(
    states: Iterable[Hashable],
    edges: Iterable[tuple[Hashable, str, Hashable]],
    view: Callable[[Hashable], Any],
    verdict: Callable[[Hashable], Any] = lambda k: None,
) -> dict[Any, tuple]:
    """Each view's signature: the verdict of its states and the (label, successor's
    view) pairs of their edges. Raises AssertionError, naming both states, when two
    states with one view differ in either."""
    v = {k: view(k) for k in states}
    out: dict[Hashable, set] = defaultdict(set)
    for a, name, b in edges:
        out[a].add((name, v[b]))
    classes: dict[Any, tuple] = {}
    first: dict[Any, Hashable] = {}
    for k, key in v.items():
        sig = (verdict(k), frozenset(out[k]))
        seen = classes.setdefault(key, sig)
        first.setdefault(key, k)
        assert seen == sig, f"states {first[key]!r} and {k!r} have one view but differ: {seen} against {sig}"
    return classes


def quotient_depth(initial: Hashable, edges: Iterable[tuple[Hashable, str, Hashable]], view: Callable[[Hashable], Any]) -> int:
    """The depth TLC reports for a breadth-first search under the view: the number of
    levels of the search over one state per view."""
    succ: dict[Hashable, list] = defaultdict(list)
    for a, _, b in edges:
        succ[a].append(b)
    level = {view(initial): 1}
    frontier, depth = deque([initial]), 1
    while frontier:
        nxt: deque = deque()
        for a in frontier:
            for b in succ[a]:
                vb = view(b)
                if vb not in level:
                    level[vb] = level[view(a)] + 1
                    depth = max(depth, level[vb])
                    nxt.append(b)
        frontier = nxt
    return depth


def _broken(s: Any) -> frozenset:
    return frozenset(v.split(":", 1)[0] for v in violations(s))


SMALL = load_config("small")
L3 = load_config("l3")

# Complete graphs of a few seconds each: the ci constants with two requests, with
# defects whose graphs end in broken states, lru with a write threshold of two (hit
# counts above the cap), the l3 config with two one-page prompts (spills, reloads
# admitted and expired, disk faults), and wallclock_tiebreak (the view is the whole
# state).
CONFIGS = {
    "small_two_requests": replace(SMALL, max_requests=2),
    "evict_pending": replace(SMALL, max_requests=2, bug="evict_pending"),
    "double_free": replace(SMALL, max_requests=2, bug="double_free"),
    "lru_threshold_2": replace(SMALL, write_threshold=2, eviction="lru", commit_call="atomic"),
    "l3_one_page_prompts": replace(L3, prompts=(Prompt((1,)), Prompt((2,)))),
    "wallclock_tiebreak": replace(SMALL, max_requests=2, bug="wallclock_tiebreak"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_states_with_one_view_are_bisimilar_and_break_the_same_invariants(name):
    cfg = CONFIGS[name]
    g = explore(cfg, check=False, cut=cfg.bug != "none")
    canon = {d: canon_model(s) for d, s in g.states.items()}
    classes = view_classes(g.states, g.edges, lambda d: stamp_view(canon[d], cfg), lambda d: _broken(g.states[d]))
    if cfg.bug == "wallclock_tiebreak":
        assert len(classes) == len(g.states)
        return
    assert len(classes) < len(g.states)  # the view merges states on each of these graphs
    if cfg.bug != "none":
        assert any(verdict for verdict, _ in classes.values())  # and some of them break an invariant


def test_the_view_ranks_stamps_with_the_clock_and_caps_hits():
    c = canon_model(initial_state(SMALL))
    (root,) = c.nodes
    c = c._replace(nodes=frozenset({root._replace(hits=7, touched=40), root._replace(id=1, hits=0, touched=25)}), clock=90)
    v = stamp_view(c, SMALL)
    assert sorted((n.hits, n.touched) for n in v.nodes) == [(0, 0), (2, 1)] and v.clock == 2
    # a stamp equal to the clock ranks with it; the cap follows a higher write threshold
    v = stamp_view(c._replace(clock=40), replace(SMALL, write_threshold=3))
    assert sorted((n.hits, n.touched) for n in v.nodes) == [(0, 0), (3, 1)] and v.clock == 1


def test_a_view_that_forgot_the_hit_count_is_caught():
    """Dropping hits altogether merges a node that a write-through backup may take
    (two hits) with one it may not (one hit): Reserve tells them apart, and so does
    the check."""
    cfg = CONFIGS["lru_threshold_2"]
    g = explore(cfg, check=False)
    canon = {d: canon_model(s) for d, s in g.states.items()}

    def forgetful(d: str) -> Any:
        v = stamp_view(canon[d], cfg)
        return v._replace(nodes=frozenset(n._replace(hits=0) for n in v.nodes))

    with pytest.raises(AssertionError, match="have one view but differ"):
        view_classes(g.states, g.edges, forgetful)
