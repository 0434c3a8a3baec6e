"""The GPU backend's pure part: how a transition's effects are shared out among ranks,
where the ranks must agree, and the fault-injection syntax. No torch here."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace

import pytest

from kvsm.config import load_config
from kvsm.gpu.hooks import CorruptSlab, InjectError, Tamper, parse
from kvsm.gpu.plan import PlanError, agreements, plan_rank
from kvsm.walk import walk

FOUR_RANKS = """
R = 4
P = 4
L1 = 4
L2 = 32
payloads = ["kv", "draft"]
policy = "write_through"
write_threshold = 1
load_back_threshold = 4
max_live = 2
[prompt_generator]
seed = 3
systems = 2
system_pages = 4
per_system = 3
min_pages = 1
max_pages = 4
out_pages = 1
[walk_weights]
Rollback = 0.05
Abort = 0.1
Arrive = 0.5
WriteDone = 3
Commit = 2
EvictDevice = 2
LoadBack = 8
"""


@pytest.fixture(scope="module")
def four_rank_walk(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "four.toml"
    path.write_text(FOUR_RANKS)
    return list(walk(load_config(path), 400, seed=3))


def _page_ops(effects):
    """Each page operation an effect list asks for, as a hashable value."""
    out = Counter()
    for e in effects:
        if e[0] == "poison_host":
            out.update(("poison_host", e[1] + i) for i in range(e[2]))
        else:
            out[e] += 1
    return out


def _batch_ops(state, batches):
    out = Counter()
    for b in batches:
        for j in range(len(b)):
            if b.kind == "fill":
                out[("fill", b.dev[j], b.content[j])] += 1
            elif b.kind == "load":
                out[("load", b.host[j], b.dev[j])] += 1
            elif b.kind == "store":
                out[("store", b.dev[j] % state.config.R, b.dev[j], b.host[j])] += 1
            elif b.kind == "poison_dev":
                out[("poison_dev", b.dev[j])] += 1
            else:
                out[("poison_host", b.host[j])] += 1
    return out


def test_every_page_operation_is_done_by_exactly_one_rank(four_rank_walk):
    kinds = Counter()
    for _, state in four_rank_walk:
        R = state.config.R
        done = Counter()
        for r in range(R):
            batches = plan_rank(state, r)
            for b in batches:
                kinds[b.kind] += 1
                assert all(p % R == r for p in b.dev), f"rank {r} got a page of another lane in {b}"
            done += _batch_ops(state, batches)
        assert done == _page_ops(state.effects)
    assert {"fill", "load", "store", "poison_dev", "poison_host"} <= set(kinds), kinds


def test_loaded_and_stored_pages_carry_the_models_claimed_content(four_rank_walk):
    for _, state in four_rank_walk:
        for r in range(state.config.R):
            for b in plan_rank(state, r):
                if b.kind in ("load", "store"):
                    assert b.content == [state.dev_content.get(p) for p in b.dev]
                    assert all(c is not None for c in b.content), "the model moved a poisoned page"


def test_runs_of_one_kind_keep_the_order_of_the_effects(four_rank_walk):
    # An Insert that evicts poisons pages, then fills the pages it freed: the batches
    # must come in that order, or the fill would be poisoned.
    reused = 0
    for t, state in four_rank_walk:
        for r in range(state.config.R):
            batches = plan_rank(state, r)
            order = [b.kind for b in batches]
            runs = [k for i, k in enumerate(e[0] for e in state.effects) if i == 0 or state.effects[i - 1][0] != k]
            assert [k for k in runs if k in order] == order
            poisoned = set()
            for b in batches:
                if b.kind == "poison_dev":
                    poisoned |= set(b.dev)
                elif b.kind == "fill":
                    reused += len(poisoned & set(b.dev))
    assert reused > 0, "the walk never reused a freed page within a transition; the test shows nothing"


def test_freed_host_object_is_split_among_ranks_without_overlap(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(("poison_host", 10, 7),))
    parts = [plan_rank(fake, r) for r in range(4)]
    pages = [h for p in parts for b in p for h in b.host]
    assert sorted(pages) == list(range(10, 17))
    assert [b.host for b in parts[1]] == [[11, 15]]


def test_a_store_of_a_page_in_another_lane_is_refused(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(("store", 1, 2, 0),))
    with pytest.raises(PlanError, match="store by rank 1 names device page 2 of lane 2"):
        plan_rank(fake, 1)


def test_a_page_freed_twice_in_one_run_is_refused(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(("poison_dev", 5), ("poison_dev", 5)))
    with pytest.raises(PlanError, match="page 5 twice"):
        plan_rank(fake, 1)


def test_agreements_sit_at_commit_and_around_host_frees(four_rank_walk):
    assert agreements("Commit", ()) == (False, True)
    assert agreements("EvictHost", (("poison_host", 3, 2),)) == (True, True)
    # a Reserve that finds room frees nothing and needs no agreement
    assert agreements("Reserve", ()) == (False, False)
    seen = Counter()
    for t, state in four_rank_walk:
        before, after = agreements(t.name, state.effects)
        frees = any(e[0] == "poison_host" for e in state.effects)
        assert before == frees and after == (frees or t.name == "Commit")
        seen[(t.name, before)] += 1
    # the walk frees host pages in each way the model does, and also reserves without
    assert {("EvictHost", True), ("Rollback", True), ("Reserve", False)} <= set(seen), seen


def test_injection_syntax():
    h = parse("corrupt_slab:12:1; tamper:30:0;corrupt_slab:4:2:9")
    assert h.corrupt == (CorruptSlab(12, 1), CorruptSlab(4, 2, 9))
    assert h.tamper == (Tamper(30, 0),)
    assert h.corrupt_at(4, 2) == CorruptSlab(4, 2, 9) and h.corrupt_at(4, 1) is None
    assert not parse("")
    with pytest.raises(InjectError, match="'tamper:x:1': arguments must be integers"):
        parse("tamper:x:1")
    with pytest.raises(InjectError, match="expected corrupt_slab"):
        parse("flip:1:2")


def test_plan_and_hooks_do_not_import_torch():
    assert "kvsm.gpu.plan" in sys.modules
    import subprocess

    code = "import sys, kvsm.gpu.plan, kvsm.gpu.hooks, kvsm.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
