"""The simulator's L3 tier: a prefix that left L1 and L2 comes back from the disks (by
hand on a five-request trace), disk faults, the accounting of every L3 measure, the
replicas' agreement on L3 progress, byte-identical logs, and option errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.replay import replay
from kvsm.sim import FaultSpecError, SimDivergence, SimError, SimOptions, simulate
from kvsm.sim import procedures
from kvsm.sim.cluster import View
from kvsm.transitions import Transition, apply

runner = CliRunner()

# the default config with small L3 limits (one spill and one reload in flight, ttl 2)
CONFIG = str(Path(__file__).parent / "data" / "sim_l3.toml")
# thrash re-reads long prefixes after both small tiers have dropped them
SMALL = SimOptions(workload="thrash", config=CONFIG, requests=120, ranks=2, l1_pages=64, l2_pages=160, seed=5, tiers="l1,l2,l3")


def _trace(tmp_path: Path, prompts: list[list[int]], gap_ms: int = 1000) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text(
        "".join(
            json.dumps({"timestamp": gap_ms * i, "input_length": 512 * len(h), "output_length": 1, "hash_ids": h}) + "\n"
            for i, h in enumerate(prompts)
        )
    )
    return p


# Two ranks, 4 device pages per lane (8 in all), 10 host pages; requests 1 s apart, so
# every backup commits and every spill is durable before the next request arrives.
PROMPTS = [
    [1, 2, 3, 4],  # A: cached, backed up, spilled (pages 0, 2 on rank 0's disk, 1, 3 on rank 1's)
    [10, 11, 12, 13],  # B: L1 and L2 now full
    [20, 21, 22, 23],  # C: evicts A from L1 (it keeps its L2 copy), then its backup evicts A from L2
    [30, 31],  # D: evicts B from L1 (B stays on L2, which is now full)
    [1, 2, 3, 4],  # A again: only the disks have it
]


def _hand_run(tmp_path: Path, **kw) -> tuple:
    log = tmp_path / "hand.jsonl"
    r = simulate(SimOptions(workload=str(_trace(tmp_path, PROMPTS)), config=CONFIG, ranks=2, l1_pages=4, l2_pages=10, tiers="l1,l2,l3", **kw), log)
    return r, log


def test_a_prefix_that_left_l1_and_l2_is_reloaded_from_the_disks(tmp_path):
    r, log = _hand_run(tmp_path)
    s = r.summary
    # A's second arrival misses the tree at the root and is marked; the collective of the
    # same tick agrees that both disks hold all 4 pages, evicts B from L2 to fit them and
    # holds the request; both ranks read in the next tick, the reload is admitted, and
    # the request matches all but its last page (which a match never covers), splitting
    # the reloaded node after 3 pages, and loads those 3 back from L2 (evicting C, the
    # older of the two nodes that each free one page per lane). The split's new upper
    # object is queued and spilled again (its pages are on the disks already: a split
    # part starts not durable, as in the reference)
    assert r.request_hits == [(0, 0, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0), (4, 0, 0, 3)]
    assert (s["pages_hit_l3"], s["hit_rate_blocks"]) == (3, round(3 / 18, 6))
    assert s["pages_moved"] == {"l1_to_l2": 14, "l2_to_l1": 3, "l2_to_l3": 14 + 3, "l3_to_l2": 4}
    assert s["evictions"] == {"l1": 4 + 4 + 4, "l2": 4 + 4}  # A and B from each tier, C for the load-back
    assert (s["spills_submitted"], s["spills_durable"], s["spills_failed"], s["spills_stale"]) == (5, 5, 0, 0)
    assert (s["reloads_reserved"], s["reloads_admitted"], s["reloads_aborted"], s["reloads_expired"]) == (1, 1, 0, 0)
    assert s["requests_held"] == 1 and s["reload_wait_ticks"] == {"mean": 1.0, "max": 1}
    by = s["transitions_by_name"]
    # every request misses at the root, so each is marked once; only A's second finds pages
    assert by["ReloadMark"] == by["ReloadReserve"] == 5
    assert (by["ReloadDone"], by["ReloadAdmit"], by["ReloadExpire"]) == (2, 1, 1)
    assert by["SpillGathered"] == by["SpillDone"] == 5 * 2
    res = replay(log, check=True)  # invariants 7-9 cover L3
    assert res.ok, (res.first_mismatch, res.violations[:1])
    assert res.final_digest == s["final_digest"]


def test_without_the_tier_the_same_trace_recomputes_the_prefix(tmp_path):
    r = simulate(SimOptions(workload=str(_trace(tmp_path, PROMPTS)), ranks=2, l1_pages=4, l2_pages=10, tiers="l1,l2"))
    assert r.request_hits[-1] == (4, 0, 0, 0)
    assert r.final_state.config.L3 == 0 and "ReloadMark" not in r.summary["transitions_by_name"]


def test_a_reload_that_outlives_its_ttl_releases_the_request(tmp_path, monkeypatch):
    # disks 50 times slower: a 2-page read per rank takes about 100 ms = 5 ticks, past
    # the config's ttl of 2 (reserved in tick t, ttl 1 after that tick's ReloadExpire,
    # released by the next one)
    timing = replace(SimOptions().timing, disk_read_ms_per_page=50.0)
    r, log = _hand_run(tmp_path, timing=timing)
    s = r.summary
    assert r.request_hits[-1] == (4, 0, 0, 0)  # released to recompute
    assert (s["reloads_expired"], s["reloads_admitted"], s["reloads_aborted"]) == (1, 0, 1)
    assert s["reload_wait_ticks"] == {"mean": 1.0, "max": 1}
    assert s["pages_moved"]["l3_to_l2"] == 4  # the reads still finished, into a reservation then freed
    assert replay(log, check=True).ok


def test_disk_faults_fail_spills_and_reloads_and_the_log_still_replays(tmp_path):
    log = tmp_path / "disk.jsonl"
    s = simulate(replace(SMALL, faults="disk:0.02"), log).summary
    assert s["faults_injected"]["disk"] > 0
    assert s["spills_failed"] > 0 and s["reloads_aborted"] > 0
    assert s["spills_durable"] > 0 and s["pages_hit_l3"] > 0  # disks come back
    res = replay(log, check=True)
    assert res.ok, (res.first_mismatch, res.violations[:1])
    assert res.transitions == s["transitions"] and res.final_digest == s["final_digest"]


def test_every_l3_operation_settles_and_every_page_is_counted_once():
    r = simulate(replace(SMALL, ranks=3, faults="disk:0.02,slow:0.2,abort:0.1,stall:0.02"))
    s = r.summary
    assert s["requests"] == 120
    assert s["requests_finished"] + s["requests_aborted"] + s["requests_uncached"] == 120
    assert s["pages_total"] == s["pages_hit_l1"] + s["pages_hit_l2"] + s["pages_hit_l3"] + s["pages_recomputed"]
    assert s["spills_submitted"] == s["spills_durable"] + s["spills_failed"] + s["spills_stale"]
    assert s["reloads_reserved"] == s["reloads_admitted"] + s["reloads_aborted"]
    assert s["pages_hit_l3"] <= s["pages_moved"]["l3_to_l2"]
    st = r.final_state
    assert st.spills == st.reloads == st.spill_queue == () and not st.reload_candidates
    assert sum(len(x) for x in [*st.spill_done, *st.reload_done]) == sum(st.spill_gathered) == 0
    # what the summary counts is what the transitions did
    by = s["transitions_by_name"]
    assert by["ReloadAdmit"] == s["reloads_admitted"] + s["reloads_aborted"]
    assert by["DiskFail"] == s["faults_injected"]["disk"] and by["DiskRecover"] <= by["DiskFail"]


def test_same_seed_same_log_with_l3_and_disk_faults(tmp_path):
    opts = replace(SMALL, requests=80, faults="disk:0.02,slow:0.2,abort:0.1,burst:0.05")
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    simulate(opts, a)
    simulate(opts, b)
    simulate(replace(opts, seed=6), c)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    assert any('"DiskFail"' in line for line in a.read_text().splitlines())


def test_same_seed_same_l3_log_in_another_process(tmp_path):
    args = ["--workload", "thrash", "--config", CONFIG, "--requests", "60", "--ranks", "3", "--l1-pages", "64", "--l2-pages", "160"]
    args += ["--tiers", "l1,l2,l3", "--l3-pages", "200", "--seed", "2", "--faults", "disk:0.02,slow:0.1"]
    logs = []
    for hash_seed in ("1", "2"):
        log = tmp_path / f"p{hash_seed}.jsonl"
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "kvsm.cli", "sim", *args, "-o", str(log), "--json"], env=env, check=True, capture_output=True)
        logs.append(log.read_bytes())
    assert logs[0] == logs[1]


def test_a_small_disk_fills_and_fails_the_writes_that_do_not_fit():
    r = simulate(replace(SMALL, l3_pages=40))
    s = r.summary
    assert s["config"]["L3"] == 40
    assert s["spills_failed"] > 0 and s["spills_durable"] > 0
    held = [sum(1 for rank, _ in r.final_state.l3.keys() if rank == q) for q in range(2)]
    # no object is larger than a thrash prefix (8 pages here, at most 4 per rank), and a
    # write fails only when its rank's new pages do not fit: every disk ends nearly full
    assert max(held) <= 40 and min(held) > 40 - 4


class _SkipsReserving:
    """A rank's view whose `ReloadReserve`s are skipped: that rank decides differently."""

    def __init__(self, v: View) -> None:
        self._v = v

    @property
    def state(self):
        return self._v.state

    def apply(self, t: Transition):
        return self._v.state if t.name == "ReloadReserve" else self._v.apply(t)


def test_a_rank_that_decides_an_l3_step_differently_is_caught_at_once(tmp_path, monkeypatch):
    real = procedures.l3_drain
    monkeypatch.setattr(procedures, "l3_drain", lambda v: real(_SkipsReserving(v) if v.rank == 1 else v))
    with pytest.raises(SimDivergence) as e:
        _hand_run(tmp_path)
    assert e.value.step["rank"] == 1
    assert e.value.step["expected"] == "ReloadReserve(rid=0)" and e.value.step["got"] == "nothing"


def test_a_replica_with_a_wrong_view_of_another_ranks_disk_is_caught_at_the_l3_collective(monkeypatch):
    real = View.apply
    drifted = []

    def apply_then_drift(self: View, t: Transition):
        s = real(self, t)
        if self.rank == 1 and t.name == "SpillSubmit" and not drifted and s.disk_ok[0]:
            # rank 1's replica alone believes rank 0's disk failed
            self.state = apply(s, Transition.make("DiskFail", rank=0))
            drifted.append(t)
        return self.state

    monkeypatch.setattr(View, "apply", apply_then_drift)
    with pytest.raises(SimDivergence) as e:
        simulate(SMALL)
    assert drifted and e.value.step["rank"] == 1
    msg = str(e.value)
    # rank 0's own successful write reaches rank 1's replica at the collective, where its
    # disk is failing: the write's ok bit is rejected there
    assert "rank 1 diverged at the L3 collective" in msg and "SpillDone(r=0, ok=True)" in msg


def test_the_cli_runs_l3_and_the_log_replays_with_kvsm_replay_check(tmp_path):
    log = tmp_path / "l3.jsonl"
    args = ["sim", "--workload", "thrash", "--config", CONFIG, "--requests", "120", "--seed", "5", "--ranks", "2", "--l1-pages", "64", "--l2-pages", "160"]
    r = runner.invoke(app, [*args, "--tiers", "l1,l2,l3", "--l3-pages", "500", "--faults", "disk:0.01", "-o", str(log), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["tiers"] == "l1,l2,l3" and s["config"]["L3"] == 500 and s["pages_hit_l3"] > 0
    assert set(s["reload_wait_ticks"]) == {"mean", "max"}
    header = json.loads(log.read_text().splitlines()[0])
    assert header["config"]["L3"] == 500 and header["config"]["max_disk_faults"] == 0
    assert header["extra"]["faults"] == "disk:0.01" and "disk_read_ms_per_page" in header["extra"]["timing"]
    r = runner.invoke(app, ["replay", str(log), "--check"])
    assert r.exit_code == 0, r.output
    assert "every invariant held" in r.output
    r = runner.invoke(app, [*args, "--tiers", "l1,l2,l3", "--plot", str(tmp_path / "p")])
    assert r.exit_code == 0 and "hit L3" in r.stdout


def test_l3_options_are_checked_before_anything_runs(tmp_path):
    log = tmp_path / "never.jsonl"
    for opts, why in [
        (replace(SMALL, tiers="l1,l3"), "L3 needs L2"),
        (replace(SMALL, tiers="l1,l2", l3_pages=10), "--l3-pages needs --tiers l1,l2,l3"),
        (replace(SMALL, tiers="l1,l2", faults="disk:0.1"), "disk:0.1 needs --tiers l1,l2,l3"),
        (replace(SMALL, schedule="serial"), "needs the timed schedule"),
        (replace(SMALL, l3_pages=-1), "--l3-pages must be >= 0"),
    ]:
        with pytest.raises(SimError, match=why):
            simulate(opts, log)
    with pytest.raises(FaultSpecError, match="outside"):
        simulate(replace(SMALL, faults="disk:2"), log)
    assert not log.exists() and not list(Path(tmp_path).iterdir())


def test_an_idle_gap_costs_one_disk_draw_per_disk_whatever_the_ranks(tmp_path):
    """Two requests 10^7 ms apart under a disk failure rate of 0.5 per tick. The gap is
    one draw per working disk at the second arrival (each iteration with work draws
    once): a tick that only brings a disk back draws nothing for the others (it used to, and with two or more ranks the disks then
    failed and recovered in turn over every tick of the gap: 18,144 transitions)."""
    trace = _trace(tmp_path, [[1], [2]], gap_ms=10_000_000)
    counts = {}
    for R in (1, 2, 4):
        log = tmp_path / f"gap{R}.jsonl"
        s = simulate(SimOptions(workload=str(trace), config=CONFIG, ranks=R, tiers="l1,l2,l3", faults="disk:0.5"), log).summary
        by = s["transitions_by_name"]
        assert 0 < by.get("DiskFail", 0) <= 10 * R, (R, by)  # a few per working iteration, not per tick
        assert by.get("DiskRecover", 0) <= by["DiskFail"]
        counts[R] = s["transitions"]
        assert replay(log, check=True).ok
    assert max(counts.values()) < 100, counts
