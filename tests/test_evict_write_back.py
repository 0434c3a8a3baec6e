"""The reference's `evict()` under write_back (`evict_write_back`, docs/model.md): a
device eviction takes an unbacked leaf too, writes it back inside its own step and
evicts it as backed; where the write-back finds no host run the reference asserts
(invariant 14 Running, docs/findings.md path b), and `sync_fixed` skips that victim."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm import effects as fx
from kvsm.config import Config, ConfigError
from kvsm.invariants import violations, violations_after
from kvsm.state import Rejected
from kvsm.transitions import REGISTRY, apply

from .helpers import T, backup, fresh, run, serve, write_back_profile_model


def _one_unbacked(value: str, L2: int = 2):
    """Node 1 ([1], one page in lane 0) unbacked on L1, its request finished."""
    s = serve(fresh(R=2, L1=1, L2=L2, policy="write_back", evict_write_back=value), 0, [1])
    assert s.nodes[1].host is None and s.nodes[1].dev == (0,)
    return s


def _host_held_by_a_pending_backup(value: str):
    """One host page, held by node 1's backup in flight (node 1 is held on L1 by it),
    and node 2 ([2]) unbacked on L1: no host victim can make room for node 2."""
    s = serve(fresh(R=2, L1=2, L2=1, policy="write_back", evict_write_back=value), 0, [1])
    s = run(s, T("Reserve", node=1, fits=True))
    s = serve(s, 1, [2])
    assert 1 in s.pending and s.nodes[2].host is None and s.nodes[2].dev and not s.host_index
    return s


def _first(s):
    return [t.arg("node") for t in REGISTRY["EvictDevice"].candidates(s)]


@pytest.mark.parametrize("value", ["sync", "sync_fixed"])
def test_an_unbacked_leaf_is_written_back_and_evicted_in_one_step(value):
    s = _one_unbacked(value)
    assert _first(s) == [1]
    after = run(s, T("EvictDevice", node=1))
    n = after.nodes[1]
    obj = after.objects[n.host]
    # backed (committed) and off L1; its host copy holds the KV its device page held
    assert obj.committed and n.dev == () and after.host_content[obj.base] == s.dev_content[0]
    assert [e for e in after.effects if isinstance(e, fx.Store)] == [fx.Store(0, 0, obj.base)]
    assert after.halted is None and not violations(after)


def test_under_the_model_before_the_knob_an_unbacked_leaf_is_no_victim():
    s = _one_unbacked("locked")
    assert _first(s) == []
    with pytest.raises(Rejected, match="no node can be evicted from L1"):
        apply(s, T("EvictDevice", node=1))
    # and under write_through the knob changes nothing: the leaf is deleted, as before
    wt = serve(fresh(R=2, L1=1, L2=2, evict_write_back="sync"), 0, [1])
    after = apply(wt, T("EvictDevice", node=1))
    assert 1 not in after.nodes and not after.objects


def test_the_write_back_evicts_host_leaves_to_fit():
    # the one host page holds node 1, backed and off L1: node 2's write-back evicts it
    s = _one_unbacked("sync", L2=1)
    s = run(backup(s, 1), T("EvictDevice", node=1))
    s = serve(s, 1, [2])
    assert list(s.host_index) and s.nodes[2].host is None
    after = run(s, T("EvictDevice", node=2))
    assert 1 not in after.nodes and after.nodes[2].host is not None and not after.nodes[2].dev


def test_a_write_back_that_finds_no_run_makes_the_reference_s_assert_fire():
    s = _host_held_by_a_pending_backup("sync")
    assert _first(s) == [2]
    after = apply(s, T("EvictDevice", node=2))
    # the reference appends the victim all the same and asserts it is backed: it stops
    assert after.halted == "EvictDevice" and after.effects == ()
    assert replace(after, halted=None) == s
    v = violations_after(None, after)
    assert len(v) == 1 and v[0].startswith("14 Running: EvictDevice: ") and "write_backup returned 0" in v[0]


def test_with_the_fix_a_victim_whose_write_back_finds_no_room_is_skipped():
    s = _host_held_by_a_pending_backup("sync_fixed")
    assert _first(s) == []
    with pytest.raises(Rejected, match="no node can be evicted from L1"):
        apply(s, T("EvictDevice", node=2))
    # once node 1's backup commits it is a backed victim (touched first): taken before node 2
    for r in range(2):
        s = run(s, T("WriteDone", rank=r))
    s = run(s, T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert _first(s) == [1]
    s = run(s, T("EvictDevice", node=1))
    # node 1 is a host leaf now: node 2's write-back evicts it to fit, so node 2 is a victim
    assert _first(s) == [2]
    after = run(s, T("EvictDevice", node=2))
    assert after.nodes[2].host is not None and 1 not in after.nodes


def test_the_argument_must_name_the_victim_the_order_picks():
    s = _one_unbacked("sync")
    with pytest.raises(Rejected, match="picks node 1, not 7"):
        apply(s, T("EvictDevice", node=7))


def test_the_knob_is_left_out_of_a_config_s_json_at_its_default_and_checked():
    assert "evict_write_back" not in Config().to_json()
    assert Config(evict_write_back="sync").to_json()["evict_write_back"] == "sync"
    with pytest.raises(ConfigError, match="field 'evict_write_back' must be one of locked, sync, sync_fixed, got 'async'"):
        Config.from_json({"evict_write_back": "async"})


# ---- the GPU backend ---------------------------------------------------------------------------------


def test_the_gpu_backend_stores_the_write_back_and_agrees_after_the_step():
    from kvsm.gpu.plan import agreements, plan_rank

    s = _one_unbacked("sync")
    after = apply(s, T("EvictDevice", node=1))
    obj = after.objects[after.nodes[1].host]
    store = [b for b in plan_rank(after, 0) if b.op is fx.Store]
    assert [(b.dev, b.host, b.content) for b in store] == [([0], [obj.base], [s.dev_content[0]])]
    # its commit is in the step: the ranks agree after it, as after a Commit
    assert agreements("EvictDevice", after.effects) == (False, True)


@pytest.mark.exhaustive
def test_the_gpu_backend_replays_an_eviction_s_write_back_and_loads_it_back_on_real_bytes(tmp_path):
    # rank processes on the CPU: [1,2] written back inside its EvictDevice, then loaded back
    # by request 1 from the host pages the write-back filled (several seconds: torch)
    pytest.importorskip("torch")
    from kvsm.defects import write_log
    from kvsm.gpu.launch import Options, replay as gpu_replay

    cfg = Config(R=2, L1=1, L2=2, policy="write_back", evict_write_back="sync")
    steps = [T("Arrive", rid=0, tokens=(1, 2), out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0),
             T("EvictDevice", node=1), T("Arrive", rid=1, tokens=(1, 2, 5), out_pages=0), T("Match", rid=1),
             T("LoadBack", rid=1), T("LoadDone", rank=1), T("LoadDone", rank=0), T("Abort", rid=1)]
    log = write_log(cfg, steps, tmp_path / "evict-write-back.jsonl")
    out = gpu_replay(Options(str(log), device="cpu", page_bytes=512, layers=1, timeout_s=120))
    assert out["ok"] and out["pages_stored"] == 2 and out["pages_loaded"] == 2, out


# ---- the finding (docs/findings.md, finding 6) -------------------------------------------------------

FINDINGS_FIXED = {"commit_call": "fixed", "own_disk_durable": "fixed", "unbacked_evict": "fixed",
                  "durable_split": "fixed", "write_back_evict": "deferred_fixed"}


def test_the_profile_runs_evict_at_the_reference_s_value_and_the_finding_s_case_is_a_knob_case_of_it():
    from kvsm.config import load_config
    from kvsm.corpus.format import read_case
    from kvsm.tla.location import spec_dir

    assert load_config("reference-write-back").evict_write_back == "sync"
    assert load_config("reference-write-back-default").evict_write_back == "sync"
    case = read_case(str(spec_dir().parent / "traces" / "finding-evict-write-back.txt"))
    assert case.knob == "evict_write_back" and case.config_base == "reference-write-back"
    assert case.config.L2 == 2 and all(getattr(case.config, k) == v for k, v in FINDINGS_FIXED.items())
    assert case.violations and case.violations[0].startswith("14 Running: EvictDevice")
    assert case.steps[-1].name == "EvictDevice"


def test_the_simulator_s_check_catches_the_assert_at_realistic_sizes_and_not_with_the_fix():
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.stops import SimInvariantError

    base = dict(config="reference-write-back-default", workload="multi-turn", seed=1, requests=300, tiers="l1,l2",
                l1_pages=32, l2_pages=64, check=True)
    sets = tuple(FINDINGS_FIXED.items())
    with pytest.raises(SimInvariantError, match="14 Running: EvictDevice"):
        simulate(SimOptions(**base, settings=sets))
    simulate(SimOptions(**base, settings=sets + (("evict_write_back", "sync_fixed"),)))


FIXED_CONSTS = {"CommitEntry": '"fixed"', "OwnDiskDurable": '"fixed"', "UnbackedEvict": '"fixed"',
                "DurableSplit": '"fixed"', "WriteBackEvict": '"deferred_fixed"'}


@pytest.mark.tlc
def test_tlc_finds_finding_6_on_the_profile_with_a_two_page_host_pool(tmp_path):
    from kvsm.log import read_log
    from kvsm.tla.check import check

    cfg = write_back_profile_model(tmp_path, "MC_wb_evict_l2_2", {**FIXED_CONSTS, "L2": "2"})
    res = check(str(cfg), log_path=tmp_path / "v.jsonl")
    v = res.tlc.violation
    assert v is not None and v.property == "Running"
    steps = [t for _, _, t, _ in read_log(str(tmp_path / "v.jsonl"))[1]]
    assert len(steps) == 12 and steps[-1].name == "EvictDevice"


@pytest.mark.exhaustive
@pytest.mark.parametrize("consts", [{"L2": "2", "EvictWriteBack": '"sync_fixed"'}, {}], ids=["fix", "four_host_pages"])
def test_tlc_exhausts_the_fix_and_the_profile_s_own_host_pool_clean(tmp_path, consts):
    from kvsm.tla.check import check

    cfg = write_back_profile_model(tmp_path, "MC_wb_evict_clean", {**FIXED_CONSTS, **consts})
    res = check(str(cfg), log_path=tmp_path / "v.jsonl")
    assert res.tlc.violation is None
