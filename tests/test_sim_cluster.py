"""The multi-rank simulator: rank replicas that must agree (and a deliberately diverging
one that is caught), byte-identical logs from one seed, logs that replay with every
invariant checked, faults, and write_back."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.replay import replay
from kvsm.sim import FaultSpecError, Faults, SimDivergence, SimError, SimOptions, simulate
from kvsm.sim import procedures
from kvsm.sim.cluster import View
from kvsm.transitions import Transition, apply

# small enough that every tier fills, evicts and loads back within a few dozen requests
SMALL = SimOptions(workload="thrash", requests=80, ranks=2, l1_pages=64, l2_pages=160, seed=5)


def test_same_seed_same_log_byte_for_byte(tmp_path):
    opts = replace(SMALL, faults="slow:0.2,stall:0.05,abort:0.1,burst:0.05")
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    ra = simulate(opts, a)
    simulate(opts, b)
    simulate(replace(opts, seed=6), c)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert ra.summary["transitions"] == len(a.read_text().splitlines()) - 2  # the header and the end line


def test_same_seed_same_log_in_another_process(tmp_path):
    # another interpreter with another string-hash seed: nothing may depend on either
    args = ["--workload", "thrash", "--requests", "40", "--ranks", "3", "--l1-pages", "64", "--l2-pages", "160"]
    args += ["--seed", "2", "--faults", "slow:0.2,stall:0.05,abort:0.1,burst:0.05"]
    logs = []
    for hash_seed in ("1", "2"):
        log = tmp_path / f"p{hash_seed}.jsonl"
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "kvsm.cli", "sim", *args, "-o", str(log), "--json"], env=env, check=True, capture_output=True)
        logs.append(log.read_bytes())
    assert logs[0] == logs[1]


def test_a_sim_log_replays_with_every_invariant_checked(tmp_path):
    log = tmp_path / "sim.jsonl"
    r = simulate(replace(SMALL, faults="slow:0.2,stall:0.05,abort:0.1"), log)
    s = r.summary
    # the run exercised what it should: backups, commits, rollbacks, evictions, load-backs
    assert s["backups_committed"] > 0 and s["backups_rolled_back"] > 0
    assert s["evictions"]["l1"] > 0 and s["evictions"]["l2"] > 0 and s["pages_hit_l2"] > 0
    assert s["requests_aborted"] > 0
    res = replay(log, check=True)
    assert res.ok, (res.first_mismatch, res.violations[:1])
    assert res.transitions == s["transitions"] and res.final_digest == s["final_digest"]


def test_every_request_ends_and_every_backup_settles():
    s = simulate(replace(SMALL, ranks=3, faults="stall:0.05,abort:0.1,burst:0.1")).summary
    assert s["requests"] == 80
    assert s["requests_finished"] + s["requests_aborted"] + s["requests_uncached"] == 80
    assert s["backups_reserved"] == s["backups_committed"] + s["backups_rolled_back"]
    assert s["pages_total"] == s["pages_hit_l1"] + s["pages_hit_l2"] + s["pages_recomputed"]
    assert s["faults_injected"]["burst"] > 0 and s["faults_injected"]["stall"] > 0


def test_a_rank_that_decides_differently_is_caught_at_once(monkeypatch):
    real = procedures.insert

    def rank1_skips_a_backup(v: View, rid: int, backup: bool):
        return real(v, rid, backup and not (v.rank == 1 and rid == 7))

    monkeypatch.setattr(procedures, "insert", rank1_skips_a_backup)
    with pytest.raises(SimDivergence) as e:
        simulate(SMALL)
    assert e.value.step["rank"] == 1
    assert e.value.step["expected"].startswith("Reserve(") and e.value.step["got"] == "nothing"
    assert "rank 1 diverged" in str(e.value) and f"#{e.value.step['transition']}" in str(e.value)


def test_a_replica_that_drifts_silently_is_caught_at_the_next_sync_point(monkeypatch):
    real = View.apply
    drifted = []

    def apply_then_drift(self: View, t: Transition):
        s = real(self, t)
        if self.rank == 1 and t.name == "Finish" and not drifted and s.dev_index:
            # rank 1 alone evicts a device victim, outside any procedure
            victim = s.dev_index.first()[2]
            self.state = apply(s, Transition.make("EvictDevice", node=victim))
            drifted.append(t)
        return self.state

    monkeypatch.setattr(View, "apply", apply_then_drift)
    with pytest.raises(SimDivergence) as e:
        simulate(replace(SMALL, tiers="l1", l2_pages=None))
    assert drifted
    msg = str(e.value)
    assert "rank 1 diverged by sync point" in msg and "replicated digest" in msg
    assert e.value.step["sync_point"] > e.value.step["agreed_sync_point"]


def test_one_rank_has_no_replica_to_compare():
    r = simulate(replace(SMALL, ranks=1, requests=20))
    assert r.summary["sync_points"] > 0


def test_write_back_writes_leaves_back_before_evicting_them(tmp_path):
    cfg = tmp_path / "wb.toml"
    cfg.write_text('R = 2\nP = 16\nL1 = 64\nL2 = 160\npolicy = "write_back"\nload_back_threshold = 16\n')
    log = tmp_path / "wb.jsonl"
    s = simulate(replace(SMALL, config=str(cfg), l1_pages=None, l2_pages=None), log).summary
    assert s["config"]["policy"] == "write_back"
    assert s["write_back_waits"] > 0 and s["backups_committed"] > 0 and s["evictions"]["l1"] > 0
    assert replay(log, check=True).ok


def test_fault_grammar():
    assert Faults.parse("slow:0.1,stall:0.01,abort:0.05,burst:0.02") == Faults(0.1, 0.01, 0.05, 0.02)
    assert Faults.parse("disk:0.001") == Faults(disk=0.001) and str(Faults(disk=0.001)) == "disk:0.001"
    assert Faults.parse("none") == Faults.parse("") == Faults()
    assert str(Faults.parse("abort:0.5")) == "abort:0.5"
    for bad, why in [
        ("slow", "is not KIND:PROB"),
        ("net:0.1", "unknown fault 'net'"),
        ("slow:0.1,slow:0.2", "given twice"),
        ("slow:x", "is not a number"),
        ("abort:1.5", "outside [0, 1]"),
        ("slow:0.1 ", "no spaces allowed"),
        ("slow: 0.1,abort:0.2", "no spaces allowed"),
        ("stall:nan", "outside [0, 1]"),
    ]:
        with pytest.raises(FaultSpecError, match=why.replace("[", r"\[").replace("]", r"\]")):
            Faults.parse(bad)


def test_options_are_checked_before_anything_runs(tmp_path):
    log = tmp_path / "never.jsonl"
    for opts, why in [
        (replace(SMALL, tiers="l2"), "--tiers must be one of"),
        (replace(SMALL, eviction="fifo"), "--eviction must be one of"),
        (replace(SMALL, ranks=0), "--ranks must be >= 1"),
        (replace(SMALL, schedule="fast"), "--schedule must be one of"),
    ]:
        with pytest.raises(SimError, match=why):
            simulate(opts, log)
    assert not log.exists() and not list(Path(tmp_path).iterdir())


def test_the_sim_config_is_unbounded_and_overridden():
    cfg = simulate(replace(SMALL, requests=5)).final_state.config
    assert (cfg.max_requests, cfg.max_live, cfg.prompts) == (0, 0, ())
    assert (cfg.R, cfg.L1, cfg.L2, cfg.P) == (2, 64, 160, 512)


def test_write_back_needs_the_host_tier(tmp_path):
    cfg = tmp_path / "wb.toml"
    cfg.write_text('policy = "write_back"\n')
    with pytest.raises(SimError, match="write_back, which needs --tiers l1,l2"):
        simulate(replace(SMALL, config=str(cfg), tiers="l1", l2_pages=None))
