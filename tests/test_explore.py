"""Exhaustive exploration of the built-in `small` config: every invariant holds in every
reachable state, and the graph exercises every transition and the hard cases."""

from __future__ import annotations

import pytest

from kvsm.config import load_config
from kvsm.transitions import names_for, successors


@pytest.fixture(scope="module")
def graph(small_graph):
    return small_graph


@pytest.mark.slow
def test_no_invariant_fails_in_any_reachable_state(graph):
    summary = graph.summary()
    assert summary["violations"] == []
    assert summary["states"] > 10_000


@pytest.mark.slow
def test_every_transition_labels_an_edge(graph):
    by = graph.summary()["edges_by_transition"]
    assert set(by) == set(names_for(load_config('small'))) and all(v > 0 for v in by.values()), by


@pytest.mark.slow
def test_the_hard_cases_happen(graph):
    planner = host_evict = out_of_step = False
    for s in graph.states.values():
        for t, s2 in successors(s, ("LoadBack", "Reserve", "Commit")):
            if t.name == "LoadBack":
                planner |= any(n.dev and (nid not in s2.nodes or not s2.nodes[nid].dev) for nid, n in s.nodes.items())
            elif t.name == "Reserve":
                host_evict |= len(s2.nodes) < len(s.nodes)
            else:
                out_of_step |= len(set(s.write_done)) > 1
        if planner and host_evict and out_of_step:
            break
    assert planner and host_evict and out_of_step


@pytest.mark.slow
def test_trace_to_a_state_replays_to_it(graph):
    from kvsm.state import initial_state
    from kvsm.transitions import apply

    cfg = load_config("small")
    g = graph
    deepest = max(g.states, key=lambda d: len(g.trace_to(d)))
    s = initial_state(cfg)
    for t in g.trace_to(deepest):
        s = apply(s, t)
    assert s.digest() == deepest and len(g.trace_to(deepest)) == g.depth - 1
