"""kvsm campaign --validate: the option and its errors, the runs it selects (by seed
alone), a run whose log TLC rejects becoming a `spec:` failure shrunk into a case that
TLC rejects the same way, a failed run's log judged beside its own signature, and the
summary's counts, "no Java" included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvsm.transitions.evict as evict_module
from kvsm.campaign import validation
from kvsm.campaign.driver import run_campaign
from kvsm.campaign.execute import connect
from kvsm.campaign.run import Budget
from kvsm.campaign.spec import derive, make_space
from kvsm.campaign.summary import render, summarize
from kvsm.campaign.validation import ValidateOptionError, parse_mode, selected, share, tlc_missing
from kvsm.campaign.worker import run_task
from kvsm.cli import app
from kvsm.tla.validate import validate
from kvsm.transitions import REGISTRY

from .helpers import overlocking_insert

needs_tlc = pytest.mark.skipif(tlc_missing() is not None, reason=f"TLC cannot run here: {tlc_missing()}")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# ---- the option ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, mode", [("all", "all"), ("FAILED", "failed"), ("none", "none"), ("25%", "25%"),
                                         ("25", "25%"), ("12.5%", "12.5%"), ("0", "0%"), ("100%", "100%")])
def test_validate_values_are_read_as_the_campaign_records_them(text, mode):
    assert parse_mode(text) == mode


@pytest.mark.parametrize("text", ["some", "150%", "-5", "25%%", "", "1e2"])
def test_a_bad_validate_value_is_refused_naming_the_option(text):
    with pytest.raises(ValidateOptionError, match="--validate"):
        parse_mode(text)
    r = CliRunner().invoke(app, ["campaign", "--runs", "1", "--validate", text, "-o", "/nonexistent/never-written"])
    assert r.exit_code == 2 and "--validate" in r.output, r.output


def test_an_explicit_validate_without_java_is_an_error_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(validation, "tlc_missing", lambda: "no Java")
    r = CliRunner().invoke(app, ["campaign", "--runs", "1", "--validate", "all", "-o", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--validate all: TLC cannot run here: no Java" in r.output, r.output
    assert not (tmp_path / "c").exists()


def test_without_java_the_default_validates_nothing_and_the_summary_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "java").exists()))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert tlc_missing() == "no Java"
    args = ["campaign", "--runs", "2", "-c", "small", "--schedule", "random", "--requests", "2..4", "--workers", "1"]
    r = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "j"), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["validation"]
    assert v == {"mode": "none", "validated": 0, "rejected": 0, "errors": 0, "seconds": 0.0, "unavailable": "no Java",
                 "successors": {"runs": 0, "states": 0, "differ": 0, "errors": 0}}
    assert all("validation" not in rec and "log" not in rec for rec in _lines(tmp_path / "j" / "results.jsonl"))
    text = render(summarize([], 1, 1.0, None, v), tmp_path)
    from rich.console import Console

    c = Console(width=200, record=True)
    c.print(text)
    assert "0 (no Java)" in c.export_text()


# ---- which runs ------------------------------------------------------------------------------


def test_the_runs_validated_are_chosen_by_seed_alone_and_spread_evenly():
    for mode in ("10%", "25%", "50%"):
        p = float(mode[:-1]) / 100
        for start in (0, 40, 1000, 123_456):
            chosen = [s for s in range(start, start + 40) if selected(mode, s, False)]
            assert abs(len(chosen) - 40 * p) <= 2, (mode, start, len(chosen))
            # the same in any order, and again: nothing but the seed decides
            assert chosen == sorted(s for s in reversed(range(start, start + 40)) if selected(mode, s, False))
    assert all(0 <= share(s) < 1 for s in range(1000))
    assert [selected("all", s, False) for s in range(5)] == [True] * 5
    assert [selected("failed", s, f) for s, f in ((0, True), (1, False))] == [True, False]
    assert not any(selected("none", s, True) for s in range(50))
    assert not any(selected("0%", s, False) for s in range(1, 50))


def test_a_worker_sends_back_the_log_of_a_selected_run_only():
    space = make_space(["small"], ["l1"], ["none"], requests=(2, 4), schedule="random")
    budget = Budget(60, 10_000, 0, "50%").to_json()
    for seed in range(6):
        rec = run_task(derive(space, seed).to_json(), budget)
        assert rec["status"] == "ok"
        assert ("log" in rec) == selected("50%", seed, False), seed
        if "log" in rec:
            assert rec["log"].count("\n") == rec["transitions"] + 2  # header, transitions, end line


def test_a_walk_runs_worker_sends_the_states_local_conform_compares_as_a_replay_gives_them(tmp_path):
    from kvsm.tla.local import log_states

    space = make_space(["small"], ["l1,l2"], ["none"], requests=(2, 3))
    spec = derive(space, 8)
    assert spec.schedule == "walk"
    rec = run_task(spec.to_json(), Budget(60, 100_000, 0, "10%").to_json())
    assert rec["log_for"] == ["successors"]
    p = tmp_path / "run.jsonl"
    p.write_text(rec["log"])
    ls, again = rec["local_states"], log_states(p)
    assert ls.steps == again.steps and [s.digest() for s in ls.states] == [s.digest() for s in again.states]
    assert ls.arrivals == again.arrivals and ls.length == again.length == rec["transitions"]


def test_a_full_batch_waits_for_the_last_runs_when_fewer_than_a_batch_are_left(monkeypatch):
    flushed = []
    monkeypatch.setattr(validation.Validator, "flush", lambda self: flushed.append(len(self.pending)) or [])
    v = validation.Validator(1)
    n = validation.BATCH_LOGS
    for i in range(n):  # full with a batch's worth still to come: validated now
        v.add({"seed": i, "transitions": 1}, left=2 * n - 1 - i)
    assert flushed == [n]
    v.pending.clear()
    for i in range(n):  # full with fewer left: the campaign's last flush takes them
        v.add({"seed": n + i, "transitions": 1}, left=n - 1 - i)
    assert flushed == [n] and len(v.pending) == n


# ---- rejections --------------------------------------------------------------------------------


def _second_victim(index, cfg, view):
    """A planted policy mutation no invariant sees: eviction takes the last victim of the
    order instead of the first (device and host alike)."""
    return (list(index)[-1] if len(index) > 1 else index.first())[2]


@needs_tlc
def test_a_log_tlc_rejects_fails_with_the_spec_signature_and_shrinks_to_a_case_tlc_rejects_the_same_way(tmp_path, monkeypatch):
    """In-process workers (threads), so that the mutation is theirs and TLC's model's."""
    monkeypatch.setattr(evict_module, "first_victim", _second_victim)
    space = make_space(["small"], ["l1,l2"], ["none"], requests=(40, 60), schedule="walk")
    session = connect(workers=1, processes=False)
    try:
        s = run_campaign(space, [3], Budget(60, 100_000, 4, "all"), tmp_path, session, validation={"mode": "all"})
    finally:
        session.close()
    (rec,) = _lines(tmp_path / "results.jsonl")
    f = rec["failure"]
    # every invariant held: only the spec sees the wrong victim
    assert rec["status"] == "failed" and f["detector"] == "spec" and f["signature"] == "spec:not taken@EvictHost"
    assert f["at"] == rec["validation"]["rejected"]["step"] and "TLC: step" in f["message"]
    # (local conform sees the wrong victim too, at a sampled state; the run keeps TLC's first rejection)
    loc = s["validation"].pop("successors")
    assert loc["runs"] == 1 and loc["errors"] == 0 and rec["successors"]["states"] == loc["states"] > 0
    assert s["validation"] | {"seconds": 0} == {"mode": "all", "validated": 1, "rejected": 1, "errors": 0, "seconds": 0, "unavailable": None}
    assert [g["signature"] for g in s["failures"]] == [f["signature"]] and s["failures"][0]["case"] == rec["case"]
    case = tmp_path / rec["case"]
    side = json.loads((case / "case.json").read_text())
    assert side["signature"] == f["signature"] and side["shrunk"]["replays"] > 0
    assert rec["case_size"]["transitions"] <= f["at"] < rec["transitions"]
    # the case is a log TLC rejects on its last step, the same way
    res = validate(case / "case.jsonl", workers=1)
    assert res.first_rejected is not None and res.first_rejected["step"] == rec["case_size"]["transitions"]
    assert validation.spec_failure(validation.verdict(res)).signature == f["signature"]


@needs_tlc
def test_validate_failed_judges_a_failing_runs_log_and_keeps_its_signature(tmp_path, monkeypatch):
    monkeypatch.setitem(REGISTRY, "Insert", overlocking_insert())
    space = make_space(["small"], ["l1"], ["none"], requests=(4, 6), schedule="random")
    session = connect(workers=1, processes=False)
    try:
        s = run_campaign(space, [0, 1], Budget(60, 100_000, 0, "failed"), tmp_path, session, validation={"mode": "failed"})
    finally:
        session.close()
    recs = _lines(tmp_path / "results.jsonl")
    failed = [r for r in recs if r["status"] == "failed"]
    assert failed and all(r["failure"]["signature"] == "invariant:3 Locks@Insert" for r in failed)
    for r in recs:
        assert ("validation" in r) == (r["status"] == "failed")
    for r in failed:
        # TLC refuses the same Insert: the model's state after it differs in the locks
        rej = r["validation"]["rejected"]
        assert rej["name"] == "Insert" and rej["step"] == r["failure"]["at"], rej
    assert s["validation"]["validated"] == s["validation"]["rejected"] == len(failed)
