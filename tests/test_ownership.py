"""Invariant 11, Ownership: the effects of every transition make each rank touch only its
own device pages, its own pages of an L2 object and its own disk.

The ghost content cannot tell which rank copied a page, so a model whose ranks copy each
other's pages keeps invariants 1-10; only the typed effects show who did the work.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm import effects as fx
from kvsm.config import load_config
from kvsm.explore import explore
from kvsm.invariants import step_violations, violations, violations_after
from kvsm.state import lane_of
from kvsm.transitions import REGISTRY
from kvsm.transitions.registry import rank_of
from kvsm.tx import Tx
from kvsm.walk import walk

from .helpers import T, backup, fresh, node_by_key, serve


def _write_done_of_the_other_lanes(s, t):
    """A mutant `WriteDone(r)`: rank r copies the pages of every lane but its own."""
    r = rank_of(s, t)
    tx = Tx(s)
    nid = s.writes[s.write_done[r]]
    obj = tx.objects[tx.pending[nid].obj]
    for i, p in enumerate(tx.node(nid).dev):
        if lane_of(p, s.config.R) != r:
            tx.store_host(r, p, obj.base + i)
    tx.write_done[r] += 1
    return tx.commit()


@pytest.fixture
def cross_lane_writes(monkeypatch):
    monkeypatch.setitem(REGISTRY, "WriteDone", replace(REGISTRY["WriteDone"], apply=_write_done_of_the_other_lanes))


@pytest.mark.parametrize("config,steps", [("default", 1500), ("l3", 400)])
def test_every_effect_of_a_correct_walk_obeys_ownership(config, steps):
    kinds = set()
    for seed in range(3):
        for t, s in walk(load_config(config), steps, seed):
            assert violations_after(t.rank, s) == [], t
            kinds |= {e.kind for e in s.effects}
    assert {"fill", "store", "poison_dev"} <= kinds, kinds


def test_a_rank_copying_other_lanes_keeps_invariants_1_to_10_but_breaks_ownership(cross_lane_writes):
    caught = clean_states = 0
    for seed in range(6):
        for t, s in walk(load_config("default"), 1500, seed):
            assert violations(s) == [], "the ghost content cannot tell which rank wrote a page"
            clean_states += 1
            bad = step_violations(t.rank, s)
            if bad:
                assert t.name == "WriteDone"
                assert bad[0].startswith("11 Ownership: ") and "stores device page" in bad[0]
                caught += 1
                break
    assert caught == 6 and clean_states > 6


def test_exploring_the_small_config_finds_the_cross_lane_writes(cross_lane_writes):
    # two requests of small's three (the whole graph under the mutant is a minute of
    # exploring; one request already backs up pages of both lanes)
    g = explore(replace(load_config("small"), max_requests=2))
    found = [v for v in g.violations if v["violation"].startswith("11 Ownership")]
    assert found and found[0]["trace"][-1].startswith("WriteDone(")
    assert all(v["violation"].startswith("11 ") for v in g.violations)


def test_a_store_of_a_page_of_another_lane_is_named():
    s = serve(fresh(R=2), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = backup(s, nid)
    fake = replace(s, effects=(fx.Store(rank=0, page=1, host_page=0),))
    assert step_violations(0, fake) == ["11 Ownership: rank 0 stores device page 1, which lives in lane 1"]


def test_a_per_rank_step_doing_another_ranks_work_is_named():
    s = fresh(R=2)
    fake = replace(s, effects=(fx.PoisonDev(page=1),))
    assert step_violations(1, fake) == []
    assert step_violations(0, fake) == ["11 Ownership: a step of rank 0 emits PoisonDev(page=1), which is work of rank 1"]
    fake = replace(s, effects=(fx.PoisonHost(base=0, length=2),))
    assert step_violations(None, fake) == []
    assert "shared by every rank" in step_violations(1, fake)[0]


def test_l3_effects_list_only_the_pages_their_rank_owns():
    s = fresh(R=2)
    ok = fx.SpillGather(rank=1, base=4, pages=(fx.HostPage(host=5, hash=0xA), fx.HostPage(host=7, hash=0xB)))
    bad = fx.ReloadRead(rank=1, base=4, pages=(fx.HostPage(host=4, hash=0xA),), ok=True)
    assert step_violations(1, replace(s, effects=(ok,))) == []
    assert step_violations(1, replace(s, effects=(bad,))) == [
        "11 Ownership: rank 1 reads into host page 4, index 0 of its object, owned by rank 0"
    ]
    assert step_violations(None, replace(s, effects=(fx.SpillWrite(rank=2, hashes=(), ok=True),))) == [
        "11 Ownership: spill_write names rank 2, not one of 0..1"
    ]


def test_effects_take_no_part_in_state_equality():
    s = fresh(R=2)
    assert replace(s, effects=(fx.PoisonDev(page=1),)) == s


def test_six_seeded_simulations_catch_the_cross_lane_writes_only_by_ownership(cross_lane_writes):
    from kvsm.sim.options import SimOptions
    from kvsm.sim.runner import simulate
    from kvsm.sim.stops import SimInvariantError

    for seed in range(6):
        opts = SimOptions(workload="thrash", requests=40, ranks=2, l1_pages=16, l2_pages=64, seed=seed, check=True)
        with pytest.raises(SimInvariantError, match=r"WriteDone\(r=\d\).*11 Ownership: rank \d stores device page") as e:
            simulate(opts)
        assert " 1 Tree" not in str(e.value) and "7 Content" not in str(e.value)
