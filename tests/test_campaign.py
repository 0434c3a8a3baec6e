"""kvsm campaign: runs derived from their numbers, a campaign on a LocalCluster and on a
scheduler with two worker processes on loopback (one killed mid-campaign), --resume
after the campaign itself is killed, results stored as whole lines, budgets, every
failure shrunk into a case that fails the same way, and with no defect nothing found."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.campaign.coverage import SCENARIOS, reason_key
from kvsm.campaign.driver import run_campaign
from kvsm.campaign.execute import connect
from kvsm.campaign.run import Budget, execute
from kvsm.campaign.shrink import ddmin
from kvsm.campaign.spec import SpaceError, command, derive, make_space, seeds_of
from kvsm.campaign.store import Results, StoreError
from kvsm.config import BUGS, ConfigError, load_config
from kvsm.log import read_log
from kvsm.replay import replay
from kvsm.sim.faults import KINDS
from kvsm.transitions import REGISTRY

from .helpers import overlocking_insert, run_case_command

ROOT = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = {"runs", "transitions", "failures", "coverage", "validation", "workers", "seconds"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _kvsm(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvsm.cli", *args], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ---- runs ------------------------------------------------------------------------------------


def test_a_run_is_named_by_its_number_and_its_command_reproduces_it(tmp_path):
    space = make_space()
    a, b = derive(space, 17), derive(space, 17)
    assert a == b
    assert len({derive(space, s) for s in range(30)}) == 30
    assert len({derive(space, s).config for s in range(30)}) == len(space.configs)
    spec = replace(derive(space, 5), requests=10)
    out = execute(spec, Budget())
    assert out.status == "ok", out.failure
    args = command(spec).split()[1:]
    assert args[0] == "sim" and "--check" in args
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["transitions"] == len(out.transitions)


def test_campaign_choices_are_checked_before_any_run():
    with pytest.raises(SpaceError, match="--tiers 'l2'"):
        make_space(tiers=["l2"])
    with pytest.raises(SpaceError, match="unknown fault 'fire'"):
        make_space(faults=["fire:0.1"])
    with pytest.raises(SpaceError, match="no such file"):
        make_space(configs=["nowhere.toml"])
    with pytest.raises(SpaceError, match="--seeds '5..2'"):
        seeds_of(None, "5..2")
    assert list(seeds_of(None, "3..5")) == [3, 4, 5] and list(seeds_of(4, None)) == [0, 1, 2, 3]
    for bug in BUGS[1:]:
        try:  # a defect the model refuses is refused with the config's own message
            make_space(bug=bug)
        except SpaceError as e:
            assert f"injected defect '{bug}'" in str(e)


def test_the_results_store_keeps_whole_lines_and_resume_cuts_a_fragment(tmp_path):
    r = Results(tmp_path)
    r.open({"a": 1}, resume=False)
    r.append({"seed": 0, "status": "ok"})
    r.append({"seed": 1, "status": "ok"})
    r.close()
    with open(r.path, "ab") as f:
        f.write(b'{"seed": 2, "sta')  # a line a kill cut short
    assert r.done() == {0, 1}
    with pytest.raises(StoreError, match="has results already"):
        Results(tmp_path).open({"a": 1}, resume=False)
    with pytest.raises(StoreError, match=r"another a \(2; the campaign had 1\)"):
        Results(tmp_path).open({"a": 2}, resume=True)
    r2 = Results(tmp_path)
    r2.open({"a": 1}, resume=True)
    r2.append({"seed": 2, "status": "ok"})
    r2.close()
    assert r.path.read_bytes().count(b"\n") == 3 and r2.done() == {0, 1, 2}


def test_ddmin_finds_a_one_minimal_failing_subsequence():
    items = list(range(40))
    got, minimal = ddmin(items, lambda xs: 3 in xs and 17 in xs and 31 in xs, time.perf_counter() + 10)
    assert got == [3, 17, 31] and minimal


def test_ddmin_with_groups_and_a_fails_that_returns_what_it_needed():
    """Groups are tried after the coarse chunks; a `fails` that answers with the part of
    the candidate it needed has the rest dropped at once."""
    items = list(range(100))
    calls = []

    def fails(xs):
        calls.append(len(xs))
        if not (5 in xs and 60 in xs and 61 in xs):
            return False
        return [x for x in xs if x % 5 == 0 or x == 61]  # the multiples of 5 are free riders

    got, minimal = ddmin(items, fails, time.perf_counter() + 10, groups=lambda xs: [[i for i, x in enumerate(xs) if x in (60, 61)]])
    assert got == [5, 60, 61] and minimal
    assert len(calls) < 40


def test_a_walk_runs_log_shrinks_across_removed_requests_to_a_local_minimum(tmp_path):
    """A walk's log (its workload cannot shrink): a campaign's failing walk of 99 steps
    shrinks to the few the failure needs; removing a request renumbers what follows it,
    which the log's shrinker re-resolves (the shrinker that only removed what replayed
    unchanged stopped at 81 steps, a local minimum of its own)."""
    from kvsm.campaign.shrink import shrink
    from kvsm.campaign.spec import RunSpec

    spec = RunSpec(seed=15, config="small", tiers="l1,l2", faults="stall:0.05,abort:0.1,burst:0.02", workload="config-prompts",
                   requests=144, eviction="lru", bug="duplicate_ack", schedule="walk",
                   settings=(("commit_call", "atomic"), ("carry_host_hit", True)))
    budget = Budget(shrink_seconds=60)
    out = execute(spec, budget)
    assert out.failure is not None and out.failure.signature == "invariant:7 Content@Commit" and len(out.transitions) == 99
    files = shrink(spec, budget, out)
    side = json.loads(files["case.json"])
    assert side["shrunk"]["log_local_minimum"] and side["shrunk"]["transitions"] <= 15, side["shrunk"]
    (tmp_path / "case.jsonl").write_text(files["case.jsonl"])
    r = replay(str(tmp_path / "case.jsonl"), check=True, bug="duplicate_ack")
    assert not r.ok and r.violations[0]["violation"].startswith("7 Content")
    # the case's log is a whole log (its end line too): `kvsm corpus add` reads it
    assert read_log(str(tmp_path / "case.jsonl"))[1] is not None and len(list(read_log(str(tmp_path / "case.jsonl"))[1])) == side["shrunk"]["transitions"]
    res = CliRunner().invoke(app, ["corpus", "add", str(tmp_path / "case.jsonl"), "--name", "walk", "--bug", "duplicate_ack", "--dir", str(tmp_path / "traces")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["corpus", "verify", str(tmp_path / "traces")])
    assert res.exit_code == 0, res.output


def test_rejection_reasons_count_once_whatever_they_name():
    assert reason_key("node 12 has a pending backup and cannot be split") == reason_key("node 7 has a pending backup and cannot be split")
    assert reason_key("device lane 1 has 0 free pages, 3 needed") == "device lane N has N free pages, N needed"


# ---- campaigns ----------------------------------------------------------------------------


def test_a_campaign_on_a_local_cluster(tmp_path):
    """Two local worker processes; the summary has exactly the keys of the issue."""
    out = tmp_path / "c"
    res = CliRunner().invoke(app, ["campaign", "--runs", "12", "--workers", "2", "-o", str(out), "--requests", "4..12",
                                   "--json", "--plot", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert set(s) == SUMMARY_KEYS
    assert s["runs"] == 12 and s["failures"] == [] and s["workers"] == 2
    assert s["transitions"] == sum(r["transitions"] for r in _lines(out / "results.jsonl")) > 0
    assert sorted(r["seed"] for r in _lines(out / "results.jsonl")) == list(range(12))
    assert all(r["status"] == "ok" and r["command"].startswith("kvsm sim ") for r in _lines(out / "results.jsonl"))
    cov = s["coverage"]
    assert cov["runs"]["ok"] == 12
    assert sum(cov["transitions"].values()) == s["transitions"]
    assert all(v["full"] > 0 and v["step"] > 0 for k, v in cov["invariants"].items() if not k.startswith("11 "))
    assert any(k.startswith("rejected: ") for g in cov["guards"].values() for k in g)
    assert set(cov["scenarios"]) == {name for name, _, _ in SCENARIOS}
    assert (tmp_path / "plots" / "coverage.png").stat().st_size > 0 and (tmp_path / "plots" / "failures.png").exists()
    # the default validation: local conform of every walk run, TLC following the other
    # runs 10% selects to their ends
    v = s["validation"]
    if v["unavailable"] is None:
        recs = _lines(out / "results.jsonl")
        assert v["mode"] == "10%" and v["validated"] == sum("validation" in r for r in recs)
        assert not any("validation" in r for r in recs if r["spec"]["schedule"] == "walk")
        loc = v["successors"]
        assert loc["runs"] == sum("successors" in r for r in recs) == sum(r["spec"]["schedule"] == "walk" for r in recs) >= 1
        assert v["rejected"] == v["errors"] == loc["differ"] == loc["errors"] == 0


def test_with_no_defect_200_runs_over_the_shipped_configs_and_every_fault_kind_find_nothing(tmp_path):
    out = tmp_path / "c"
    # (TLC's side of a clean campaign: test_a_campaign_on_a_local_cluster)
    res = CliRunner().invoke(app, ["campaign", "--runs", "200", "--workers", "2", "-o", str(out), "--requests", "3..16", "--bug", "none",
                                   "--validate", "none", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["runs"] == 200 and s["failures"] == [], s["failures"]
    cov = s["coverage"]
    assert cov["runs"]["ok"] == 200
    assert set(cov["spec"]["config"]) == {"small", "default", "l3"}
    assert set(cov["spec"]["tiers"]) == {"l1", "l1,l2", "l1,l2,l3"}
    assert all(cov["faults"][k] > 0 for k in KINDS), cov["faults"]
    # short runs: the spill scenarios of the spec's list, not yet the reloads (docs/campaign.md)
    reached = {k for k, v in cov["scenarios"].items() if v}
    assert {"SpillAck makes a node durable, each page on its owner's disk", "SpillDone fails (ok = false) on one rank"} <= reached, reached


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_campaign_on_a_scheduler_and_two_worker_processes_survives_a_killed_worker(tmp_path):
    """The real distributed path on loopback: `dask scheduler` and two `dask worker`
    processes; one worker is killed while it runs; every result is still present and
    the run it was running is recorded as retried on the other worker."""
    sched_file = tmp_path / "scheduler.json"
    procs = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                                       "--no-dashboard", "--scheduler-file", str(sched_file)], env=_env(),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for(sched_file.exists, 60, "the scheduler")
        _wait_for(lambda: "address" in sched_file.read_text(), 10, "the scheduler's address")
        address = json.loads(sched_file.read_text())["address"]
        ports = [_free_port(), _free_port()]
        workers = {}
        for port in ports:
            p = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny",
                                  "--host", "127.0.0.1", "--worker-port", str(port), "--no-dashboard"], env=_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            workers[f"tcp://127.0.0.1:{port}"] = p
        out = tmp_path / "c"
        runs = 24
        camp = _kvsm("campaign", "--runs", str(runs), "--scheduler", address, "-o", str(out), "--requests", "24..48",
                     "-c", "default", "--tiers", "l1,l2", "--json")
        procs.append(camp)
        victim = next(iter(workers))
        # kill the victim while it runs a run: a little after it has finished one
        _wait_for(lambda: any(r.get("worker") == victim for r in _lines(out / "results.jsonl")) or camp.poll() is not None, 120,
                  "a result from the victim")
        assert camp.poll() is None, camp.communicate()
        time.sleep(0.3)
        workers[victim].send_signal(signal.SIGKILL)
        stdout, stderr = camp.communicate(timeout=300)
        assert camp.returncode == 0, stderr
        s = json.loads(stdout)
        recs = _lines(out / "results.jsonl")
        assert sorted(r["seed"] for r in recs) == list(range(runs)) and s["runs"] == runs
        assert all(r["status"] == "ok" for r in recs)
        assert victim in s["coverage"]["runs"]["workers_lost"]
        retried = [r for r in recs if r["attempts"] > 1]
        assert retried and all(victim in r["workers"] and r["worker"] != victim for r in retried), retried
        assert s["coverage"]["runs"]["retried"] == len(retried)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_resume_after_the_campaign_is_killed_runs_only_the_missing_seeds(tmp_path):
    out = tmp_path / "c"
    runs = 30
    args = ["campaign", "--runs", str(runs), "--workers", "2", "-o", str(out), "--requests", "16..40", "-c", "default,small"]
    camp = _kvsm(*args, start_new_session=True)  # its own process group: its local cluster dies with it
    try:
        _wait_for(lambda: len(_lines(out / "results.jsonl")) >= 5 or camp.poll() is not None, 180, "five results")
        assert camp.poll() is None, camp.communicate()
    finally:
        os.killpg(camp.pid, signal.SIGKILL)
        camp.wait()
    before = (out / "results.jsonl").read_bytes()
    done = {r["seed"] for r in _lines(out / "results.jsonl")}
    assert 5 <= len(done) < runs
    with open(out / "results.jsonl", "ab") as f:
        f.write(b'{"seed": 29, "status": "o')  # as if the kill had cut a line
    res = CliRunner().invoke(app, [*args, "--resume", "--json"])
    assert res.exit_code == 0, res.output
    after = (out / "results.jsonl").read_bytes()
    assert after.startswith(before)
    recs = _lines(out / "results.jsonl")
    assert sorted(r["seed"] for r in recs) == list(range(runs))
    assert {r["seed"] for r in recs[len(done):]} == set(range(runs)) - done
    assert json.loads(res.stdout)["runs"] == runs


def test_a_run_over_its_budget_is_recorded_as_such(tmp_path):
    out = tmp_path / "c"
    res = CliRunner().invoke(app, ["campaign", "--runs", "4", "--workers", "1", "-o", str(out), "--requests", "10..20",
                                   "--run-transitions", "15", "--json"])
    assert res.exit_code == 0, res.output
    recs = _lines(out / "results.jsonl")
    assert len(recs) == 4 and all(r["status"] == "budget" and "more than 15 transitions" in r["budget"] for r in recs)
    assert json.loads(res.stdout)["coverage"]["runs"]["budget"] == 4


# ---- failures ---------------------------------------------------------------------------------


def test_a_planted_defect_is_found_grouped_and_shrunk_into_a_case_that_fails_the_same_way(tmp_path, monkeypatch):
    """In-process workers (threads) so that the planted defect is theirs too."""
    monkeypatch.setitem(REGISTRY, "Insert", overlocking_insert())
    space = make_space(["small", "default"], ["l1,l2"], ["none", "abort:0.1"], requests=(6, 20))
    session = connect(workers=2, processes=False)
    try:
        s = run_campaign(space, range(6), Budget(60, 100_000, 30), tmp_path, session)
    finally:
        session.close()
    assert set(s) == SUMMARY_KEYS
    (group,) = s["failures"]
    assert group["signature"] == "invariant:3 Locks@Insert" and len(group["runs"]) >= 3
    recs = {r["seed"]: r for r in _lines(tmp_path / "results.jsonl")}
    for seed in group["runs"]:
        case = tmp_path / recs[seed]["case"]
        side = json.loads((case / "case.json").read_text())
        assert side["signature"] == group["signature"] and side["seed"] == seed
        walk = recs[seed]["spec"]["schedule"] == "walk"
        # a walk run shrinks its log only (on fewer requests it would be another walk)
        assert side["shrunk"]["workload_shrunk"] != walk and side["shrunk"]["log_local_minimum"]
        assert side["shrunk"]["workload_local_minimum"] or walk
        assert side["shrunk"]["requests"] <= recs[seed]["spec"]["requests"]
        assert side["shrunk"]["transitions"] < recs[seed]["transitions"] or recs[seed]["transitions"] <= 3
        # the shrunk log fails the same way, on its last transition (the line before its
        # end line)
        res = replay(case / "case.jsonl", check=True)
        text = (case / "case.jsonl").read_text()
        assert text.splitlines()[-1].startswith('{"end":true')
        assert [v["line"] for v in res.violations] == [text.count("\n") - 1] * len(res.violations)
        assert res.violations[0]["transition"].startswith("Insert") and res.violations[0]["violation"].startswith("3 Locks")
        # and so does the simulator on the shrunk workload, with the command the case gives
        r = run_case_command(case, side["command"])
        assert r.exit_code == 1 and "3 Locks" in r.output, r.output
    smallest = min(group["runs"], key=lambda k: (recs[k]["case_size"]["transitions"], k))
    assert group["case"] == recs[smallest]["case"]


def _implemented_defect() -> str | None:
    base = load_config("small")
    # duplicate_ack first: short runs of every config reach it (a rank's ack counted twice)
    for bug in sorted(BUGS[1:], key=lambda b: b != "duplicate_ack"):
        try:
            type(base).from_json({**base.to_json(), "bug": bug})
        except ConfigError:
            continue
        return bug
    return None


@pytest.mark.slow
def test_a_campaign_with_an_injected_defect_finds_it_and_writes_a_shrunk_case(tmp_path):
    bug = _implemented_defect()
    if bug is None:
        pytest.skip("no injected defect is implemented yet")
    out = tmp_path / "c"
    # the default shrink budget: half the runs walk, and a walk's log of thousands of
    # steps shrinks to a local minimum in about a second (docs/campaign.md)
    res = CliRunner().invoke(app, ["campaign", "--runs", "40", "--workers", "2", "-o", str(out), "--bug", bug, "--json"])
    assert res.exit_code == 1, res.output
    s = json.loads(res.stdout)
    assert s["failures"], f"--bug {bug}: 40 runs found nothing"
    for g in s["failures"]:
        case = out / g["case"]
        side = json.loads((case / "case.json").read_text())
        if side["shrunk"]["log_shrunk"]:
            assert side["shrunk"]["log_local_minimum"], side["shrunk"]
        cwd = os.getcwd()
        os.chdir(case)
        try:
            if side["detector"] == "spec":  # the defect's log, which the correct spec refuses
                r = CliRunner().invoke(app, ["validate", "case.jsonl"])
                assert r.exit_code == 1, r.output
                continue
            if side["replay"]:
                r = replay("case.jsonl", check=True, bug=bug)
                assert not r.ok and r.violations and r.violations[0]["violation"].startswith(side["what"])
            r = CliRunner().invoke(app, side["command"].split()[1:])
            assert r.exit_code == 1, r.output
        finally:
            os.chdir(cwd)


def test_ctrl_c_stops_a_campaign_in_a_few_lines_and_leaves_no_dask_files(tmp_path):
    out, tmp = tmp_path / "c", tmp_path / "tmp"
    tmp.mkdir()
    camp = subprocess.Popen(
        [sys.executable, "-m", "kvsm.cli", "campaign", "--runs", "400", "--workers", "2", "-o", str(out), "-c", "small"],
        env={**_env(), "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        _wait_for(lambda: len(_lines(out / "results.jsonl")) >= 3 or camp.poll() is not None, 180, "three results")
        assert camp.poll() is None, camp.communicate()
        os.killpg(camp.pid, signal.SIGINT)  # what Ctrl-C at a terminal does: the whole group
        _, stderr = camp.communicate(timeout=60)
    finally:
        if camp.poll() is None:
            os.killpg(camp.pid, signal.SIGKILL)
            camp.wait()
    assert camp.returncode == 130, stderr
    # the campaign's own lines only (its start, progress, what it kept): no worker's traceback
    assert [x for x in stderr.splitlines() if not x.startswith(("kvsm: ", "interrupted: "))] == [], stderr
    assert stderr.splitlines()[-1] == "interrupted: stopped by SIGINT; unfinished outputs were removed"
    assert "--resume continues" in stderr
    assert list(tmp.iterdir()) == [], "the local cluster left files in the temporary directory"


def test_a_scheduler_that_does_not_answer_is_announced_and_reported(tmp_path):
    out = tmp_path / "c"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvsm.cli", "campaign", "--runs", "1", "--scheduler", "tcp://127.0.0.1:1", "-o", str(out)],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    first, *rest = r.stderr.splitlines()
    assert first.startswith("kvsm: campaign: connecting to the Dask scheduler tcp://127.0.0.1:1 (at most 10 s)")
    assert len(rest) == 1 and rest[0].startswith("error: cannot reach a Dask cluster: "), r.stderr
    assert time.monotonic() - t0 < 40
    assert not out.exists(), "a campaign that never ran left files"
