"""`kvsm sim --schedule walk`: the model's own random walk over a workload's arrivals, and
`--workload config-prompts` (docs/sim.md, The walk schedule)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import load_config
from kvsm.replay import replay
from kvsm.sim import SimOptions, load_workload, simulate
from kvsm.sim.stops import SimInvariantError
from kvsm.sim.trace import WorkloadError
from kvsm.sim.walker import STEPS_PER_REQUEST


def _walk(tmp_path=None, name="w", **kw):
    opts = dict(workload="config-prompts", config="l3", tiers="l1,l2,l3", requests=60, seed=1, schedule="walk")
    opts.update(kw)
    log = tmp_path / f"{name}.jsonl" if tmp_path is not None else None
    return simulate(SimOptions(**opts), log=log), log


def test_config_prompts_draws_every_request_from_the_configs_own_prompts():
    cfg = load_config("small")
    w = load_workload("config-prompts", 200, 3, config=cfg)
    shapes = {(p.pages, p.out_pages) for p in cfg.prompts}
    assert len(w.requests) == 200 and w.block_tokens == cfg.P
    assert {(r.hash_ids, w.out_pages(r)) for r in w.requests} == shapes  # every prompt, nothing else
    assert [r.timestamp for r in w.requests] == sorted(r.timestamp for r in w.requests)
    assert load_workload("config-prompts", 200, 3, config=cfg) == w
    with pytest.raises(WorkloadError, match="no config given"):
        load_workload("config-prompts", 5)


def test_a_walk_is_its_seed_byte_for_byte_and_its_log_replays(tmp_path):
    a, la = _walk(tmp_path, "a")
    b, lb = _walk(tmp_path, "b")
    c, lc = _walk(tmp_path, "c", seed=2)
    assert la.read_bytes() == lb.read_bytes()
    assert la.read_bytes() != lc.read_bytes()
    r = replay(la, check=True)
    assert r.ok and r.transitions == a.summary["transitions"] and r.final_digest == a.summary["final_digest"]
    assert a.summary["schedule"] == "walk" and a.summary["replicas"] == "off"


def test_a_walk_takes_every_request_to_its_end_and_steps_off_the_reference_loops_order():
    r, _ = _walk(requests=60)
    s, by = r.final_state, r.summary["transitions_by_name"]
    # every request arrived and none is alive: the walk ended there, not at its step budget
    assert s.next_rid == 60 and not s.requests
    assert r.summary["transitions"] < STEPS_PER_REQUEST * 60
    assert by["Arrive"] == 60 and by["Finish"] + by.get("Abort", 0) == 60
    assert r.summary["requests"] == 60  # each counted once its forward pass was over
    # steps the reference's loop takes only when it needs room, or at its own times: idle
    # victims evicted, spills and reloads
    for name in ("EvictDevice", "EvictHost", "SpillSubmit", "SpillDone", "ReloadReserve", "ReloadAdmit"):
        assert by.get(name, 0) > 0, name


def test_a_walk_takes_aborts_and_disk_faults_only_when_the_fault_mix_draws_them():
    quiet, _ = _walk(requests=80)
    assert "Abort" not in quiet.summary["transitions_by_name"] and "DiskFail" not in quiet.summary["transitions_by_name"]
    loud, _ = _walk(requests=80, faults="abort:0.1,disk:0.01,slow:0.5")
    by = loud.summary["transitions_by_name"]
    assert by.get("Abort", 0) > 0 and by.get("DiskFail", 0) > 0
    assert loud.summary["requests_aborted"] == by["Abort"]


def test_a_walk_of_the_l3_model_catches_the_stale_anchor_the_timed_schedule_misses():
    # the l3 model walked past TLC's bound of two requests: a reload attached under an
    # anchor that left the tree while the reload was in flight (invariant 1)
    with pytest.raises(SimInvariantError) as e:
        _walk(requests=300, seed=3, bug="reload_stale_anchor", check=True)
    assert "1 Tree" in str(e.value)
    timed = simulate(SimOptions(workload="config-prompts", config="l3", tiers="l1,l2,l3", requests=300, seed=3,
                                bug="reload_stale_anchor", check=True))
    assert timed.summary["requests"] == 300


def test_the_walk_schedule_from_the_command_line(tmp_path):
    out = tmp_path / "w.jsonl"
    res = CliRunner().invoke(app, ["sim", "--workload", "config-prompts", "--config", "small", "--requests", "20",
                                   "--schedule", "walk", "--check", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert '"schedule": "walk"' in res.output and out.exists()
    bad = CliRunner().invoke(app, ["sim", "--schedule", "walker", "--requests", "2"])
    assert bad.exit_code != 0 and "walk" in bad.output


def test_a_walk_without_aborts_aborts_a_request_nothing_else_can_move_and_goes_on(tmp_path):
    # write-back with tiny pools: an insert finds no victim whose write-back has room, and
    # no other step is enabled; without the fallback the walk ended at its third request
    r, log = _walk(tmp_path, config="tests/data/write_back_sync.toml", tiers="l1,l2", requests=80, seed=0)
    s = r.summary
    assert s["requests"] == 80 and not r.final_state.requests  # every request arrived and ended
    assert s["requests_aborted"] > 0 and s["transitions_by_name"]["Abort"] == s["requests_aborted"]
    assert s["faults_injected"] == {}  # no fault was asked for: these aborts are none
    assert replay(log, check=True).ok
    # asked for, aborts are faults (at the config's weight) and the fallback is not needed
    f, _ = _walk(config="tests/data/write_back_sync.toml", tiers="l1,l2", requests=80, seed=0, faults="abort:0.05")
    assert f.summary["faults_injected"].get("abort") == f.summary["requests_aborted"] > 0
