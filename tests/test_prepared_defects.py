"""The injected defects on the production write-through path (prepared backups):
`Prepare` is a deciding step with evict-to-fit, so `local_host_alloc` and
`wallclock_tiebreak` reach it, and `double_free` also fires where a prepared backup is
rolled back (at `Insert` with another length, or at `Abort`). TLC finds each on the
prepared model (spec/MC_prepared_defects) at that step, and the Python model with the
defect replays TLC's counterexample to the same violation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.defects import PREPARED_MODEL, PREPARED_PATH
from kvsm.invariants import violations
from kvsm.log import read_log
from kvsm.replay import replay
from kvsm.transitions import apply, enabled

from kvsm.state import initial_state

from .helpers import T, config, run, serve

ROOT = Path(__file__).resolve().parent.parent


def _commit(s):
    return run(s, T("WriteDone", rank=0), T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))


def _prepared_request(s, rid, tokens, prepare=True):
    s = run(s, T("Arrive", rid=rid, tokens=tokens, out_pages=0), T("Match", rid=rid))
    if prepare:
        s = run(s, T("Prepare", rid=rid, fits=True))
    s = run(s, T("Insert", rid=rid))
    if prepare:
        s = _commit(s)
    return run(s, T("Finish", rid=rid))


def _with_bug(s, bug):
    return replace(s, config=replace(s.config, bug=bug))


def _full_pool_one_host_leaf():
    """(1, 2) backed by a prepared backup and evicted from L1: the two-page host pool is
    full and (1, 2) is its one host leaf; request 1 ([3]) is matched, and its prepare
    needs one page (owned by rank 0: index 0)."""
    s = initial_state(config(prepared_backups=True, L1=1, L2=2, write_threshold=3))
    s = _prepared_request(s, 0, [1, 2])
    s = run(s, T("EvictDevice", node=1), T("Arrive", rid=1, tokens=[3], out_pages=0), T("Match", rid=1))
    return s


def _two_tied_host_leaves():
    """Two one-page host leaves, (2) touched at 2 and (1) at 3 (re-owned by a third
    request), in a full two-page pool; request 3 ([3]) is matched. A rank whose clock
    reads both accesses in one tick orders them by id, the other by time."""
    s = initial_state(config(prepared_backups=True, L1=1, L2=2, write_threshold=3))
    s = _prepared_request(s, 0, [1])
    s = _prepared_request(s, 1, [2])
    s = _prepared_request(s, 2, [1], prepare=False)
    s = run(s, T("EvictDevice", node=1))
    assert [k[2] for k in s.host_index] == [2, 1]
    return run(s, T("Arrive", rid=3, tokens=[3], out_pages=0), T("Match", rid=3))


@pytest.mark.parametrize("build, bug", [(_full_pool_one_host_leaf, "local_host_alloc"), (_two_tied_host_leaves, "wallclock_tiebreak")])
def test_prepare_is_a_deciding_step_that_a_rank_view_defect_reaches(build, bug):
    s = build()
    t = T("Prepare", rid=max(s.requests), fits=True)
    # without the defect every rank decides the prepare alike: no divergence
    assert t in enabled(s)
    ok = apply(s, t)
    assert ok.diverged is None and not violations(ok)
    # with it, rank 0 evicts to fit and reserves, rank 1 decides otherwise
    s2 = _with_bug(s, bug)
    assert t in enabled(s2)  # the cluster's candidate is rank 0's decision
    bad = apply(s2, t)
    assert bad.diverged == ("Prepare", (1,))
    assert any(v.startswith("13 Agreement: Prepare") for v in violations(bad))
    # rank 1's own decision: local_host_alloc sizes no room (it owns no page of the
    # object) and finds none; wallclock_tiebreak evicts the other host leaf
    mine = apply(s2, t, view=0)
    if bug == "local_host_alloc":
        assert apply(s2, T("Prepare", rid=t.arg("rid"), fits=False), view=1).prepared[t.arg("rid")] is None
    else:
        theirs = apply(s2, t, view=1)
        assert set(mine.nodes) != set(theirs.nodes)


def test_double_free_frees_a_prepared_backup_rolled_back_at_abort_but_keeps_its_object():
    s = initial_state(config(prepared_backups=True))
    s = run(s, T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Prepare", rid=0, fits=True))
    obj = s.objects[1]
    ok = apply(s, T("Abort", rid=0))
    assert not ok.prepared and ok.writes == () and not ok.objects and not violations(ok)
    bad = apply(_with_bug(s, "double_free"), T("Abort", rid=0))
    # the pages are freed (a reserve can be given them) while the object still names them
    assert not bad.prepared and bad.writes == () and bad.objects[1] == obj
    assert bad.l2_free == ok.l2_free
    assert any(v.startswith("6 HostPages: host page 0 is free and in object 1") for v in violations(bad))


def test_double_free_fires_on_an_insert_that_rolls_a_prepared_backup_back():
    s = initial_state(config(prepared_backups=True))
    s = run(s, T("Arrive", rid=0, tokens=[1, 2, 3], out_pages=0), T("Match", rid=0), T("Prepare", rid=0, fits=True))
    s = serve(s, 1, [1, 2])  # request 0's new node is now [3] alone: the lengths differ
    ok = apply(s, T("Insert", rid=0))
    assert not ok.prepared and 1 not in ok.objects and not violations(ok)
    bad = apply(_with_bug(s, "double_free"), T("Insert", rid=0))
    assert not bad.prepared and 1 not in bad.writes and 1 in bad.objects and 1 not in bad.nodes
    assert any(v.startswith("6 HostPages") for v in violations(bad))


@pytest.fixture(scope="module")
def tlc_on_the_prepared_path(tmp_path_factory):
    """TLC's check of each defect on the prepared model, run once."""
    from kvsm.tla.check import check

    d = tmp_path_factory.mktemp("tlc-prepared")
    return {name: check(str(ROOT / PREPARED_MODEL), bug=name, log_path=d / f"{name}.jsonl") for name in sorted(PREPARED_PATH)}


@pytest.mark.tlc
@pytest.mark.parametrize("name", sorted(PREPARED_PATH))
def test_tlc_catches_the_defect_on_the_prepared_path(name, tlc_on_the_prepared_path):
    prop, action = PREPARED_PATH[name]
    v = tlc_on_the_prepared_path[name].to_json()["violation"]
    assert v is not None and v["kind"] == "invariant" and v["property"] == prop, v
    _, lines = read_log(v["log"])
    steps = [t for _, _, t, _ in lines]
    assert len(steps) == v["steps"] and steps[-1].name == action
    if name != "double_free":
        assert "Reserve" not in {t.name for t in steps}  # no backup but the prepared ones
    mutant = replay(v["log"], check=True, bug=name)
    assert mutant.first_mismatch is None
    assert {x["step"] for x in mutant.violations} == {v["steps"]}
    # the correct model refuses the counterexample or takes it without a violation
    correct = replay(v["log"], check=True)
    assert correct.first_mismatch is not None or not correct.violations


@pytest.mark.parametrize("bug, faults, action", [("local_host_alloc", None, "Prepare"), ("double_free", "abort:0.05", "Insert")])
def test_the_simulator_catches_the_defect_on_the_prepared_path(tmp_path, bug, faults, action):
    """Prepared backups only (no catch-up Reserve: the write threshold is out of reach):
    the simulator's checks stop seed 0 at a step of the prepared path."""
    from kvsm.sim import STOPS, SimOptions, simulate, stop_record

    cfg = tmp_path / "prepared-only.toml"
    toml = (ROOT / "tests" / "data" / "sim_l3.toml").read_text()
    assert "write_threshold = 1\n" in toml
    cfg.write_text("prepared_backups = true\n" + toml.replace("write_threshold = 1\n", "write_threshold = 1000\n"))
    opts = dict(workload="multi-turn", config=str(cfg), tiers="l1,l2", ranks=2, l1_pages=64, l2_pages=64, requests=80, seed=0, faults=faults, check=True)
    with pytest.raises(STOPS) as e:
        simulate(SimOptions(bug=bug, **opts))
    rec = stop_record(e.value, 0)
    assert rec["detector"] == "invariant" and f"{action}(" in rec["message"], rec
    assert ("13 Agreement: Prepare" if bug == "local_host_alloc" else "6 HostPages") in rec["message"]
    # (the same shape of run without a defect, prepared backups attached and rolled back
    # with every invariant checked: tests/test_prepared.py)
