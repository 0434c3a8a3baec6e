"""Local conform (`kvsm.tla.local`, `kvsm.campaign.successors`, `kvsm validate
--successors`): TLC's successors of the states a walk run passes through against the
model's. A correct model's walk agrees; a planted guard mutation (a transition enabled
one step late, which no log of the model shows: every step it takes is the spec's) and
a planted wrong next state are each noticed as `spec:successors@ACTION` at a sampled
state, and a campaign fails the run with that signature and shrinks it into a case
whose last state shows it again."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvsm.campaign.driver import run_campaign
from kvsm.campaign.execute import connect
from kvsm.campaign.run import Budget
from kvsm.campaign.spec import command, derive, make_space
from kvsm.campaign.successors import successors_failure, successors_runs
from kvsm.campaign.validation import tlc_missing
from kvsm.campaign.worker import run_task
from kvsm.cli import app
from kvsm.tla.local import SAMPLE, log_states, spread_sample
from kvsm.transitions import REGISTRY

from .helpers import late_write_done, skewing_match

needs_tlc = pytest.mark.skipif(tlc_missing() is not None, reason=f"TLC cannot run here: {tlc_missing()}")

# run 7 of this space is a walk of `small` (write-through backups, two ranks), 48 requests
SPACE = make_space(["small"], ["l1,l2"], ["none"], requests=(2, 3))
SEED = 7
LIMIT = 48  # states compared (of about 640): enough for these mutations, and quicker


def _walk_log() -> dict:
    spec = derive(SPACE, SEED)
    assert spec.schedule == "walk" and spec.workload == "config-prompts"
    rec = run_task(spec.to_json(), Budget(60, 100_000, 0, "10%").to_json())
    assert rec["status"] == "ok" and rec["log_for"] == ["successors"]
    return rec


@pytest.fixture(scope="module")
def correct_log() -> dict:
    return _walk_log()


def test_a_walk_runs_log_goes_to_local_conform_and_the_sample_is_the_seeds(tmp_path, correct_log):
    rec = correct_log
    # every walk run's log is kept for local conform under any mode but none
    spec = derive(SPACE, SEED)
    assert "log" not in run_task(spec.to_json(), Budget(60, 100_000, 0, "none").to_json())
    p = tmp_path / "run.jsonl"
    p.write_text(rec["log"])
    a, b = log_states(p), log_states(p)
    whole = log_states(p, limit=None)
    assert a.steps == b.steps and len(a.steps) <= SAMPLE < rec["transitions"]
    # distinct states of the log, in its order, each the model's state after its step
    digests = [s.digest() for s in a.states]
    assert a.steps == sorted(a.steps) and len(set(digests)) == len(digests) and set(digests) <= {s.digest() for s in whole.states}
    assert whole.steps[0] == 0 and len(whole.states) == len({s.digest() for s in whole.states}) > len(a.states)
    # the walk's config-prompts workload: Arrive is compared with the config's prompts
    assert a.config.prompts and not json.loads(rec["log"].split("\n", 1)[0])["config"]["prompts"]


def test_the_sample_gives_every_transition_taken_its_share_of_the_states_it_leaves_from():
    """A rare transition's states (those the log takes it from) are all sampled when
    they are fewer than an equal share; a uniform sample would take about 1 of these 10
    (128 of 1,001 states). The sample has `limit` states, is the generator's alone, and a frequent
    transition gives the rest."""
    import random

    names = ["WriteDone"] * 900 + ["ReloadReserve"] * 10 + ["Commit"] * 89
    random.Random(0).shuffle(names)
    got = spread_sample(names, 128, random.Random("kvsm-local:3"))
    assert len(got) == 128 and got == spread_sample(names, 128, random.Random("kvsm-local:3"))
    by = lambda n: {i for i, x in enumerate(names) if x == n}  # noqa: E731
    commits, writes = len(got & by("Commit")), len(got & by("WriteDone"))
    assert by("ReloadReserve") <= got and commits + writes == 128 - 11 and abs(commits - writes) <= 1
    assert len(names) in got  # the last state, a group of its own


@needs_tlc
def test_a_correct_models_walk_run_passes_local_conform(correct_log):
    v = successors_runs([(SEED, correct_log["log"])], limit=LIMIT)[SEED]
    assert v["ok"] and "difference" not in v and 0 < v["states"] <= LIMIT, v
    assert successors_failure(v) is None


@needs_tlc
def test_a_guard_mutation_is_noticed_as_a_successors_difference(monkeypatch):
    """Rank 1's WriteDone enabled one step late: the run is still a behaviour of the
    spec, step by step; only the spec's successors of a state show the missing step."""
    monkeypatch.setitem(REGISTRY, "WriteDone", late_write_done())
    rec = _walk_log()
    v = successors_runs([(SEED, rec["log"])], limit=LIMIT)[SEED]
    d = v["difference"]
    assert not v["ok"] and d["side"] == "spec" and d["action"] == "WriteDone", v
    assert d["to"]["write_done"] == [0, 1] and all(o["write_done"] == [1, 0] for o in d["other_side_to"])
    f = successors_failure(v, command(derive(SPACE, SEED)))
    assert f.signature == "spec:successors@WriteDone" and f.at == d["step"] and "--successors" in f.message


@needs_tlc
def test_a_wrong_next_state_is_noticed_as_a_successors_difference(monkeypatch):
    monkeypatch.setitem(REGISTRY, "Match", skewing_match())
    rec = _walk_log()
    v = successors_runs([(SEED, rec["log"])], limit=LIMIT)[SEED]
    d = v["difference"]
    assert not v["ok"] and d["action"] == "Match" and d["side"] == "model", v
    # the model's Match moves the clock one tick further than the spec's from the same state
    assert "clock" in d["to"] and d["other_side_to"] and all(o.get("clock") != d["to"]["clock"] for o in d["other_side_to"])
    assert successors_failure(v).signature == "spec:successors@Match"


@needs_tlc
def test_a_campaign_fails_the_walk_run_and_shrinks_it_to_a_case_whose_last_state_differs(tmp_path, monkeypatch):
    """The default mode (10%) does not select run 7 for TLC to follow; local conform
    sees it. In-process workers, so that the mutation is theirs too."""
    monkeypatch.setitem(REGISTRY, "WriteDone", late_write_done())
    session = connect(workers=1, processes=False)
    try:
        s = run_campaign(SPACE, [SEED], Budget(60, 100_000, 6, "10%"), tmp_path, session, validation={"mode": "10%"})
    finally:
        session.close()
    (rec,) = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    f = rec["failure"]
    assert rec["status"] == "failed" and f["signature"] == "spec:successors@WriteDone" and "validation" not in rec
    assert f["at"] == rec["successors"]["difference"]["step"]
    assert s["validation"]["successors"] == {"runs": 1, "states": rec["successors"]["states"], "differ": 1, "errors": 0}
    assert [g["signature"] for g in s["failures"]] == [f["signature"]]
    case = tmp_path / rec["case"]
    side = json.loads((case / "case.json").read_text())
    assert side["validate"] == "kvsm validate --successors --last case.jsonl" and side["shrunk"]["replays"] > 0
    assert rec["case_size"]["transitions"] <= f["at"]
    # the case's last state shows the same difference
    v = successors_runs([(SEED, (case / "case.jsonl").read_text())], last=True)[SEED]
    assert successors_failure(v).signature == f["signature"]
    assert v["difference"]["step"] == rec["case_size"]["transitions"]


# ---- the command -----------------------------------------------------------------------------


@needs_tlc
def test_validate_successors_on_a_correct_walk_log_exits_0(tmp_path, correct_log):
    p = tmp_path / "run.jsonl"
    p.write_text(correct_log["log"])
    r = CliRunner().invoke(app, ["validate", "--successors", "--states", "20", "--json", str(p)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] and out["differences"] == [] and 0 < out["states"] <= 20 and out["spec_edges"] == out["model_edges"] > 0


@pytest.mark.parametrize("args, needle", [
    (["--successors", "{missing}"], "cannot open"),
    (["--successors", "{bad}"], "not a kvsm log"),
    (["--states", "5", "{bad}"], "--states goes with --successors"),
    (["--successors", "--bug", "double_free", "{bad}"], "--bug does not apply"),
    (["--successors", "--states", "0", "{bad}"], "--states"),
])
def test_validate_successors_refuses_bad_input_naming_it(tmp_path, args, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    paths = {"missing": str(tmp_path / "missing.jsonl"), "bad": str(bad)}
    r = CliRunner().invoke(app, ["validate", *[a.format(**paths) for a in args]])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output


@needs_tlc
def test_runs_of_one_model_with_other_knobs_share_a_tlc_process_each_with_its_own_constants():
    """Runs 0 (write-back, slru), 8 (write-through, lru) and 4 (a device a page per lane
    wider) of this space: one TLC process, each run's states written with its own
    device's pages and expanded under its own constants (a copy of the spec per set);
    under another run's, the correct model would differ."""
    logs = []
    for seed in (0, 8, 4):
        spec = derive(SPACE, seed)
        assert spec.schedule == "walk" and (spec.l1_pages is None) == (seed != 4)
        logs.append((seed, run_task(spec.to_json(), Budget(60, 100_000, 0, "10%").to_json())["log"]))
    assert dict(derive(SPACE, 0).settings)["policy"] == "write_back" and "policy" not in dict(derive(SPACE, 8).settings)
    got = successors_runs(logs, limit=24)
    assert all(v["ok"] for v in got.values()), got
    assert got[0]["seconds"] == got[8]["seconds"] == got[4]["seconds"]  # (the seconds of their shared process)
