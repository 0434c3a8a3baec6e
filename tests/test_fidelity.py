"""Mechanisms modelled as the reference has them (docs/model.md, the reference's mechanisms):
the asynchronous load-back and the commit collective as per-rank calls, each reached by
exhaustive exploration of a small model, and the `commit_call` knob's three settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.config import load_config
from kvsm.explore import explore
from kvsm.invariants import violations
from kvsm.state import initial_state
from kvsm.transitions import apply, successors
from kvsm.tla.runner import graph_workers

from .helpers import T, node_by_key, run, serve


@pytest.fixture(scope="module")
def small2():
    """`small` (the ci model) with two requests: every mechanism below, in a few seconds."""
    return replace(load_config("small"), max_requests=2)


@pytest.fixture(scope="module")
def fixed_graph(small2):
    return explore(small2, check=True)


def test_atomic_commit_is_the_fixed_collective_without_its_round_states(small2, fixed_graph):
    """`atomic` reaches exactly the states of `fixed` in which no round is open, by the
    same steps; each atomic `Commit` is a round of calls that every rank enters."""
    atomic = explore(replace(small2, commit_call="atomic"), check=True)
    idle = {d for d, s in fixed_graph.states.items() if not any(s.commit_round)}
    assert set(atomic.states) == idle and len(idle) < len(fixed_graph.states)
    assert not atomic.violations and not fixed_graph.violations
    plain = {e for e in atomic.edges if e[1] != "Commit"}
    assert plain == {e for e in fixed_graph.edges if e[0] in idle and e[2] in idle and e[1] not in ("CommitCall", "Commit")}
    for a, _, b in (e for e in atomic.edges if e[1] == "Commit"):
        s = fixed_graph.states[a]
        s = apply(apply(s, T("CommitCall", rank=0)), T("CommitCall", rank=1))
        assert apply(s, T("Commit")).digest() == b


@pytest.fixture(scope="module")
def loads_graph():
    """The `loads` model (spec/MC_loads): room for another request's node beside a load."""
    return explore(load_config("loads"), check=True)


def test_exploration_reaches_loads_in_flight_while_requests_abort_insert_and_evict(loads_graph):
    """The spec and the model explore what happens to the pages of a load in flight: the
    loading request aborts, one rank's copy lands before the other's, another request
    inserts and a device eviction runs meanwhile (never of the loading node: its pages
    are locked), and no invariant breaks."""
    g = loads_graph
    assert not g.violations
    states = g.states
    in_flight = [s for s in states.values() if s.loads]
    assert any(len(set(s.load_done)) > 1 for s in in_flight)  # one rank done, the other not
    assert any(not any(r.node == s.loads[0].node for r in s.requests.values()) for s in in_flight)  # aborted
    during = {n for a, n, b in g.edges if states[a].loads}
    assert {"Abort", "Insert", "EvictDevice", "Finish", "LoadDone"} <= during
    for a, b in ((a, b) for a, n, b in g.edges if n in ("EvictDevice", "Insert") and states[a].loads):
        loading = states[a].loading_pages()
        held = {p: nid for nid, n in states[b].nodes.items() for p in n.dev}
        assert all(held.get(p) == held_a for p, held_a in
                   ((p, nid) for nid, n in states[a].nodes.items() for p in n.dev if p in loading))


def test_fixed_commit_calls_always_pair_up(fixed_graph):
    g = fixed_graph
    rounds = {s.commit_round for s in g.states.values()}
    assert rounds == {(0, 0), (1, 0), (0, 1), (1, 1)}
    assert not g.violations


def test_reference_commit_calls_reach_a_rank_that_skips_the_call(small2):
    g = explore(replace(small2, max_requests=1, commit_call="reference"), check=True)
    bad = [v for v in g.violations if v["violation"].startswith("12 Collectives")]
    assert bad
    shortest = min(bad, key=lambda v: len(v["trace"]))
    assert shortest["trace"][-3:] == ["WriteDone(r=0)", "CommitCall(r=0)", "CommitCall(r=1)"] or \
        shortest["trace"][-3:] == ["WriteDone(r=1)", "CommitCall(r=1)", "CommitCall(r=0)"]


def test_a_round_that_commits_nothing_returns_to_the_state_before_it():
    cfg = replace(load_config("small"), max_requests=0, max_live=0)
    s = serve(initial_state(cfg), 0, [1])
    a = node_by_key(s, (1,))
    s = run(s, T("Reserve", node=a, fits=True), T("WriteDone", rank=1))
    before = s.digest()
    for t, s2 in successors(s, ("CommitCall",)):
        s3 = run(s2, T("CommitCall", rank=1 - t.rank), T("Commit"))
        assert s3.digest() == before and not violations(s3)


def test_the_fast_checks_agree_with_the_invariants_on_loads_and_rounds(loads_graph, small2):
    """kvsm.checking's from-scratch check decides exactly what `violations` does on every
    state with loads in flight and open rounds, the violating rounds of `reference` included;
    its per-transition checks find nothing along walks of the loads model and find the
    skipped call right after the step that made it."""
    from kvsm.checking import Checker, holds
    from kvsm.walk import walk

    ref = explore(replace(small2, max_requests=1, commit_call="reference"), check=False)
    for g in (loads_graph, ref):
        for s in g.states.values():
            assert holds(s) == (not violations(s))
    cfg = load_config("loads")
    for seed in range(6):
        s0 = initial_state(cfg)
        c = Checker(s0, every=1_000_000)
        assert c.start() is None
        for t, s in walk(cfg, 300, seed, s0):
            assert c.step(t, s) is None, t
        assert c.finish() is None
    s = initial_state(replace(small2, commit_call="reference"))
    c = Checker(s)
    steps = [T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Reserve", node=1, fits=True),
             T("WriteDone", rank=0), T("CommitCall", rank=0), T("CommitCall", rank=1)]
    for i, t in enumerate(steps):
        s = apply(s, t)
        f = c.step(t, s, at=i)
    assert f is not None and f.at == 6 and f.how == "step" and f.violations[0].startswith("12 Collectives")


def test_the_checker_catches_a_page_written_while_its_load_is_in_flight():
    """The per-transition check of the ground of load_uaf: a step that writes a device page
    a load-back still copies into is caught right after that step."""
    from kvsm.checking import Checker
    from kvsm.tx import Tx

    from .helpers import backup

    cfg = replace(load_config("loads"), max_requests=0, max_live=0)
    s = serve(initial_state(cfg), 0, [1, 2])
    s = run(backup(s, 1), T("EvictDevice", node=1), T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=0), T("Match", rid=1),
            T("LoadBack", rid=1), T("Abort", rid=1))
    c = Checker(s)
    assert c.start() is None
    tx = Tx(s)
    tx.fill_dev(s.nodes[1].dev[0], 99)
    f = c.step(T("Fill"), tx.commit(), at="planted")
    assert f is not None and f.how == "step" and f.violations[0].startswith("7 Content") and "in flight" in f.violations[0]

# ---- TLC: the finding and the small models -----------------------------------------------------


@pytest.mark.tlc
def test_tlc_finds_the_early_return_of_the_reference_in_its_small_model(tmp_path):
    from kvsm.log import read_log
    from kvsm.tla.check import check
    from kvsm.tla.location import spec_dir

    res = check(str(spec_dir() / "MC_commit_early_return.cfg"), log_path=tmp_path / "t.jsonl")
    assert res.tlc.violation is not None and res.tlc.violation.property == "Collectives"
    _, stream = read_log(str(res.log))
    assert [t.name for _, _, t, _ in stream][-3:] == ["WriteDone", "CommitCall", "CommitCall"]


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_loads_model_and_it_holds_every_invariant(loads_graph):
    from kvsm.tla.check import check
    from kvsm.tla.conform import conform

    from kvsm.tla.location import spec_dir

    cfg = str(spec_dir() / "MC_loads.cfg")
    res = conform(cfg, explored=loads_graph)
    assert res.equal and res.tlc_states == res.model_states == 127372, res.to_json()
    safety = check(cfg, properties=False, workers=graph_workers())
    assert safety.ok and safety.tlc.distinct_states == 127372, safety.to_json()
    assert "temporal properties" not in safety.tlc.output


@pytest.mark.tlc
@pytest.mark.exhaustive
def test_the_loads_model_holds_both_liveness_properties():
    """(A minute of liveness checking; ci's constants' liveness, with two requests, is
    checked in the default run: tests/test_tla.py.)"""
    from kvsm.tla.check import check
    from kvsm.tla.location import spec_dir

    res = check(str(spec_dir() / "MC_loads.cfg"), workers=graph_workers())
    assert res.ok and res.tlc.violation is None, res.to_json()
    assert "branches of temporal properties for the complete state space" in res.tlc.output


# ---- the simulator ------------------------------------------------------------------------------


def test_the_simulator_stops_where_a_reference_rank_returns_early_from_the_collective(tmp_path):
    """Under commit_call = "reference" the simulator's ranks, whose copies finish at their
    own times, soon reach a round in which one returns early while another entered: the
    run stops there and says which calls no longer pair up. Under "fixed" the same run
    completes, with a round of calls at every sync point with a backup in flight."""
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.stops import SimDivergence

    base = (Path(__file__).resolve().parent.parent / "kvsm" / "configs" / "default.toml").read_text()
    ref = tmp_path / "ref.toml"
    ref.write_text(base.replace('policy = "write_through"', 'policy = "write_through"\ncommit_call = "reference"'))
    opts = SimOptions(workload="thrash", requests=60, ranks=2, l1_pages=64, l2_pages=160, seed=5, tiers="l1,l2",
                      faults="slow:0.2")
    with pytest.raises(SimDivergence, match=r"returned early from the commit collective.*invariant 12"):
        simulate(replace(opts, config=str(ref)), tmp_path / "ref.jsonl")
    res = simulate(opts, tmp_path / "fixed.jsonl")
    by = res.summary["transitions_by_name"]
    assert by["CommitCall"] == 2 * by["Commit"] > 0 and by["LoadDone"] == 2 * by["LoadBack"] > 0
