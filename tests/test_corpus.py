"""The regression corpus (traces/): the case format, `kvsm corpus verify` (every case
replays with every invariant checked, its outputs are the renderer's, a bug case fails
on its bug), `kvsm corpus add` (shrinking), and the conversion between cases and logs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from .helpers import append_steps
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import load_config
from kvsm.corpus import CaseError, case_to_log, format_case, log_to_case, parse_case, parse_step, read_case, step_text, verify_case
from kvsm.corpus.shrink import first_failure, shrink
from kvsm.log import read_log
from kvsm.replay import replay
from kvsm.transitions import REGISTRY, Transition

runner = CliRunner()
TRACES = Path(__file__).resolve().parent.parent / "traces"
CASES = sorted(TRACES.glob("*.txt"))


def _case(body: str, header: str = "case x\nshows a test\nconfig small\n") -> str:
    return header + "\n" + body


# ---- the format -------------------------------------------------------------------------------------


SAMPLES = {
    "Arrive": "Arrive rid=0 tokens=[1,2] out_pages=1",
    "Split": "Split node=3 at=1",
    "WriteDone": "WriteDone r=1",
    "SpillDone": "SpillDone r=0 ok=false",
    "Reserve": "Reserve node=3 fits=true",
    "Prepare": "Prepare rid=3 fits=false",
    "ReloadDone": "ReloadDone r=1 ok=true",
    "Commit": "Commit",
}


def test_every_transition_has_a_step_syntax_that_reads_back():
    for name, spec in REGISTRY.items():
        text = SAMPLES.get(name)
        if text is None:
            args = " ".join(f"{k}=3" for k in spec.args)
            text = " ".join(x for x in (name, "r=1" if spec.per_rank else "", args) if x)
        t = parse_step(text)
        assert step_text(t) == text and t.name == name


@pytest.mark.parametrize("text, reason", [
    ("Evcit node=1", "unknown transition or directive 'Evcit'"),
    ("Insert", "Insert needs argument 'rid'"),
    ("Insert rid=x", "Insert argument 'rid' must be an integer, got 'x'"),
    ("Insert node=1", "Insert has no argument 'node' (it takes rid)"),
    ("WriteDone", "WriteDone needs its rank (r=N)"),
    ("Commit r=0", "Commit is not a per-rank transition but has r=0"),
    ("SpillDone r=0 ok=yes", "SpillDone argument 'ok' must be true or false, got 'yes'"),
    ("Arrive rid=0 tokens=1,2 out_pages=0", "must be a list of integers like [1,2]"),
])
def test_a_bad_step_is_refused_with_its_line_and_reason(text, reason):
    with pytest.raises(CaseError) as e:
        parse_case(_case(f"Arrive rid=0 tokens=[1] out_pages=0\n{text}\n"), "t.txt")
    assert e.value.line == 6 and reason in e.value.reason


@pytest.mark.parametrize("text, line, reason", [
    ("case x\nshows s\n\nCommit\n", 1, "the header has no 'config' line"),
    ("case x\nshows s\nconfig nosuch\n", 3, "'nosuch' is not a built-in config"),
    ("case x\nshows s\nconfig\n  R = \"two\"\n", 3, "field 'R' must be an integer"),
    ("case x\nshows s\nconfig\n  bug = \"double_free\"\n", 3, "on a line 'bug NAME'"),
    ("case x\nshows s\nconfig\nbug nosuch\n", 4, "'nosuch' is not an injected defect"),
    ("case x\nshows s\nconfig\nwhat\n", 4, "unknown header field 'what'"),
    ("case x\nshows s\nconfig\n\n----\n", 5, "a ---- line must follow a show, diff or rejects directive"),
    ("case x\nshows s\nconfig\n\nshow nosuch\n", 5, "show: unknown section 'nosuch'"),
    ("case x\nshows s\nconfig\n\n# c\n  fill p0(r0)←[1]\n", 6, "an indented line here is under no step"),
])
def test_a_bad_case_is_refused_with_its_line_and_reason(text, line, reason):
    with pytest.raises(CaseError) as e:
        parse_case(text, "t.txt")
    assert e.value.line == line and reason in e.value.reason, e.value


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_case_is_written_in_its_canonical_form(path):
    text = path.read_text()
    assert format_case(parse_case(text, str(path))) == text


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_case_becomes_a_log_and_back_without_loss(path, tmp_path):
    from kvsm.corpus.run import rewritten

    case = read_case(str(path))
    log = case_to_log(case, tmp_path / "case.jsonl")
    if case.bug is None and case.knob is None:
        assert replay(log, check=True).ok
    else:
        # a defect's (or a finding's) case replays with its defect (its config's knob), to the
        # violations it names at its last step
        res = replay(log, check=True, bug=case.bug)
        assert res.first_mismatch is None and res.transitions == len(case.steps)
        assert res.violations and {v["step"] for v in res.violations} == {len(case.steps)}
    back = log_to_case(log)
    back.path = str(path)
    # the log keeps everything but the expected outputs, which the renderer writes again
    fails, outputs = verify_case(back)
    assert [f.output for f in fails] == [True] * len(fails)
    assert rewritten(back, outputs) == path.read_text()


def test_a_log_becomes_a_case_and_back_keeping_its_config_source_seed_and_digests(tmp_path):
    log = tmp_path / "walk.jsonl"
    res = runner.invoke(app, ["walk", "--config", "l3", "--steps", "80", "--seed", "3", "-o", str(log)])
    assert res.exit_code == 0, res.output
    case = log_to_case(log, name="walk")
    assert case.config_base == "l3" and case.origin == {"source": "walk", "seed": 3, "extra": {"steps": 80}}
    text = format_case(case)
    again = case_to_log(parse_case(text, "walk.txt"), tmp_path / "again.jsonl")
    a, b = log.read_text().splitlines(), again.read_text().splitlines()
    assert a[1:] == b[1:]  # every transition and digest
    ha, hb = json.loads(a[0]), json.loads(b[0])
    assert {k: v for k, v in hb.items() if k != "extra"} == {k: v for k, v in ha.items() if k != "extra"}
    assert hb["extra"].pop("case")["name"] == "walk" and hb["extra"] == ha["extra"]


def test_a_config_is_written_as_the_built_in_it_differs_least_from():
    cfg = replace(load_config("l3"), name="l3-three", max_requests=3)
    case = parse_case(_case("", header="case x\nshows s\nconfig l3\n  name = \"l3-three\"\n  max_requests = 3\n"))
    assert case.config == cfg
    log_case = format_case(case)
    assert "config l3\n  name = \"l3-three\"\n  max_requests = 3\n" in log_case


# ---- verify ---------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.txt"
    p.write_text(text)
    return p


def test_the_corpus_verifies(tmp_path):
    res = runner.invoke(app, ["corpus", "verify", str(TRACES), "--no-tlc", "--json"])
    out = json.loads(res.stdout)
    groups = out.pop("groups")
    assert out == {"cases": len(CASES), "passed": len(CASES), "failed": []}, res.output
    assert res.exit_code == 0 and len(CASES) >= 18
    # every case counted under each of its groups (or `ungrouped`), every group passing
    tagged = {p.stem: read_case(str(p)).groups or ("ungrouped",) for p in CASES}
    assert groups == {g: {"cases": n, "passed": n} for g, n in
                      {g: sum(g in gs for gs in tagged.values()) for g in {x for gs in tagged.values() for x in gs}}.items()}
    # all the use-after-free cases are found in one place
    assert {"defect-load-uaf", "defect-backup-host-uaf", "defect-load-host-release"} <= {
        n for n, gs in tagged.items() if "use-after-free" in gs}


def test_a_group_line_is_read_written_back_and_reported_per_group(tmp_path):
    src = (TRACES / "defect-backup-host-uaf.txt").read_text()
    case = read_case(str(TRACES / "defect-backup-host-uaf.txt"))
    assert case.groups == ("use-after-free",)
    bad = _write(tmp_path, "defect-backup-host-uaf", src.replace("group use-after-free", "group Use After Free"))
    res = runner.invoke(app, ["corpus", "verify", str(bad), "--no-tlc"])
    assert res.exit_code == 1 and f"{bad}:2:" in res.output and "a group is lower-case words" in res.output
    (tmp_path / "two").mkdir()
    two = _write(tmp_path / "two", "defect-backup-host-uaf", src.replace("group use-after-free", "group use-after-free, host-pool"))
    res = runner.invoke(app, ["corpus", "verify", str(two), "--no-tlc"])
    assert res.exit_code == 0, res.output
    assert "host-pool: 1 cases, 1 passed" in res.output and "use-after-free: 1 cases, 1 passed" in res.output


@pytest.mark.tlc
def test_tlc_accepts_every_case_of_the_corpus():
    res = runner.invoke(app, ["corpus", "verify", str(TRACES), "--tlc", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["passed"] == len(CASES)


def test_a_changed_output_is_named_by_file_line_and_difference_and_rewrite_restores_it(tmp_path):
    src = (TRACES / "write-back-lock.txt").read_text()
    bad = src.replace("  r0  decoding  [1,2]  at #1\n", "  r0  decoding  [1,2]  at #7\n", 1)
    p = _write(tmp_path, "write-back-lock", bad)
    line = bad.split("\n").index("  r0  decoding  [1,2]  at #7") + 1
    res = runner.invoke(app, ["corpus", "verify", str(tmp_path), "--no-tlc", "--json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert out["cases"] == 1 and out["passed"] == 0
    assert out["failed"] == [{
        "file": str(p), "line": line,
        "why": "show tree requests: expected 'r0  decoding  [1,2]  at #7', the renderer prints 'r0  decoding  [1,2]  at #1'",
    }]
    res = runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc", "--rewrite"])
    assert res.exit_code == 0 and f"rewrote {p}" in res.output
    assert p.read_text() == src


def test_rewrite_fills_in_missing_outputs(tmp_path):
    p = _write(tmp_path, "x", _case("Arrive rid=0 tokens=[1] out_pages=0\nshow requests\nrejects Insert rid=0\n"))
    res = runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc"])
    assert res.exit_code == 1 and "show requests has no expected output yet" in res.output
    assert runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc", "--rewrite"]).exit_code == 0
    assert p.read_text().endswith("show requests\n----\nrequests\n  r0  queued  [1]\n\nrejects Insert rid=0\n----\nrequest 0 is queued, not matched\n")


def test_a_step_s_effects_are_the_indented_lines_under_it_and_verify_compares_them(tmp_path):
    steps = "Arrive rid=0 tokens=[1,2] out_pages=0\nMatch rid=0\nInsert rid=0\n"
    case = parse_case(_case(steps + "  fill p0(r0)←[1] p1(r1)←[9]\n"), "x.txt")
    assert [e.expected for e in case.script] == ["", "", "fill p0(r0)←[1] p1(r1)←[9]"]
    p = _write(tmp_path, "x", _case(steps + "  fill p0(r0)←[1] p1(r1)←[9]\n"))
    res = runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc", "--json"])
    assert json.loads(res.stdout)["failed"] == [{
        "file": str(p), "line": 8,
        "why": "Insert rid=0: the case lists 'fill p0(r0)←[1] p1(r1)←[9]', the step asks 'fill p0(r0)←[1] p1(r1)←[1,2]'",
    }]
    # a step without its effect lines fails too, and --rewrite writes them under it
    p.write_text(_case(steps))
    res = runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc", "--json"])
    assert [f["why"] for f in json.loads(res.stdout)["failed"]] == ["Insert rid=0: the case lists no more effects, the step asks 'fill p0(r0)←[1] p1(r1)←[1,2]'"]
    assert runner.invoke(app, ["corpus", "verify", str(p), "--no-tlc", "--rewrite"]).exit_code == 0
    assert p.read_text().endswith("Insert rid=0\n  fill p0(r0)←[1] p1(r1)←[1,2]\n")


def test_a_step_the_model_refuses_or_a_violation_fails_the_case(tmp_path):
    _write(tmp_path, "refused", _case("Arrive rid=0 tokens=[1] out_pages=0\nInsert rid=0\n", "case refused\nshows s\nconfig small\n"))
    _write(tmp_path, "accepted", _case("Arrive rid=0 tokens=[1] out_pages=0\nrejects Match rid=0\n----\nno\n", "case accepted\nshows s\nconfig small\n"))
    _write(tmp_path, "misnamed", _case("", "case other\nshows s\nconfig small\n"))
    _write(tmp_path, "unbugged", _case("", "case unbugged\nshows s\nconfig small\nviolation 3 Locks: x\n"))
    res = runner.invoke(app, ["corpus", "verify", str(tmp_path), "--no-tlc", "--json"])
    fails = {(Path(f["file"]).stem, f["line"]): f["why"] for f in json.loads(res.stdout)["failed"]}
    assert fails == {
        ("accepted", 8): "rejects Match rid=0: expected 'no', the renderer prints '(not rejected: the model takes Match rid=0)'",
        ("misnamed", 1): "case 'other' is in a file named 'misnamed.txt' (a case's file is its name)",
        ("refused", 6): "Insert rid=0 is not taken: request 0 is queued, not matched",
        ("unbugged", 4): "a case without a bug must hold every invariant; name the injected defect that produces this violation on a 'bug' line",
    }


def test_a_case_naming_a_bug_the_model_does_not_implement_is_reported_not_crashed_on(tmp_path, monkeypatch):
    import kvsm.config

    # every defect is implemented now: take one away to stand for a model that lacks it
    monkeypatch.setattr(kvsm.config, "IMPLEMENTED_BUGS", kvsm.config.IMPLEMENTED_BUGS - {"load_uaf"})
    text = _case("Arrive rid=0 tokens=[1] out_pages=0\nMatch rid=0\nshow\n",
                 "case dbl\nshows a page freed under a load-back\nconfig small\nbug load_uaf\nviolation 5 DevicePages: x\n")
    p = _write(tmp_path, "dbl", text)
    fails, outputs = verify_case(read_case(str(p)))
    assert [(f.line, f.why) for f in fails] == [
        (4, "bug load_uaf cannot be run: config with bug load_uaf: injected defect 'load_uaf' is not implemented by this model yet"),
    ]
    assert outputs is None  # the outputs belong to the run with the bug: nothing to rewrite


def test_a_bug_case_must_pass_without_its_bug(tmp_path, monkeypatch):
    """With the bug available (here: the config accepts it), the steps must also hold
    every invariant on the model without the defect."""
    import kvsm.corpus.run as corpus_run

    right = REGISTRY["Commit"]
    monkeypatch.setitem(REGISTRY, "Commit", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=s.write_done)))
    monkeypatch.setattr(corpus_run, "config_with_bug", lambda cfg, bug: replace(cfg, bug=bug))
    steps = "Arrive rid=0 tokens=[1] out_pages=0\nMatch rid=0\nInsert rid=0\nReserve node=1 fits=true\nWriteDone r=0\nWriteDone r=1\nCommitCall r=0\nCommitCall r=1\nCommit\n"
    p = _write(tmp_path, "c", _case(steps, "case c\nshows s\nconfig small\nbug double_free\n"
                                    "violation 4 Pending: rank 0 has finished 1 of 0 writes\n"
                                    "violation 4 Pending: rank 1 has finished 1 of 0 writes\n"))
    fails, _ = verify_case(read_case(str(p)))
    # the patched Commit is wrong with and without the "bug": the buggy run is as the case
    # says, but the run without the bug violates too, which the verifier names (the steps'
    # effect lines, not written here, are outputs)
    assert [(f.line, f.why.split(":")[0]) for f in fails if not f.output] == [(16, "without bug double_free the model still violates an invariant after Commit")]


# ---- add -------------------------------------------------------------------------------------------------


def _broken_commit(monkeypatch):
    right = REGISTRY["Commit"]
    monkeypatch.setitem(REGISTRY, "Commit", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=s.write_done)))


def _long_violating_walk(tmp_path) -> Path:
    for seed in range(100):
        log = tmp_path / f"walk-{seed}.jsonl"
        assert runner.invoke(app, ["walk", "--config", "small", "--steps", "80", "--seed", str(seed), "-o", str(log)]).exit_code == 0
        _, stream = read_log(log)
        names = [t.name for _, _, t, _ in stream]
        if "Commit" in names and names.index("Commit") > 15:
            return log
    raise AssertionError("no walk of small commits after step 15")


def test_add_shrinks_a_violating_log_to_a_case_no_single_removal_keeps_failing(tmp_path, monkeypatch):
    _broken_commit(monkeypatch)
    log = _long_violating_walk(tmp_path)
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "commit-forgets", "--dir", str(tmp_path / "traces")])
    assert res.exit_code == 0, res.output
    assert "shrunk" in res.output and "to 9" in res.output
    case = read_case(str(tmp_path / "traces" / "commit-forgets.txt"))
    steps = case.steps
    # a round of the commit collective: the calls and the copies in some order, then Commit
    assert [t.name for t in steps[:4]] == ["Arrive", "Match", "Insert", "Reserve"] and steps[-1].name == "Commit"
    assert sorted(t.name for t in steps[4:-1]) == ["CommitCall", "CommitCall", "WriteDone", "WriteDone"]
    cfg = case.config
    target = first_failure(cfg, steps)
    assert target is not None and target[0] == 9
    for i in range(len(steps)):  # no single removal keeps the same failure
        got = first_failure(cfg, steps[:i] + steps[i + 1 :])
        assert got is None or got[1].key != target[1].key
    # on the broken model the case fails (it says the invariants hold); on the fixed one
    # only its rendered outputs differ (what the fix changed), which --rewrite records
    assert any("invariant violated after Commit" in f.why for f in verify_case(case)[0])
    monkeypatch.undo()
    fails = verify_case(read_case(str(tmp_path / "traces" / "commit-forgets.txt")))[0]
    assert fails and all(f.output for f in fails)


# a walk of `small` that a campaign found failing (invariant 7 at a Commit) after 99
# steps, on the defect that counts a rank's ack twice
WALK_99 = [
    "sim", "--workload", "config-prompts", "--config", "small", "--seed", "15", "--tiers", "l1,l2", "--requests", "144",
    "--eviction", "lru", "--faults", "stall:0.05,abort:0.1,burst:0.02", "--schedule", "walk", "--set", "commit_call=atomic",
    "--set", "carry_host_hit=true", "--bug", "duplicate_ack",
]


def test_add_shrinks_a_long_walk_across_removed_requests_and_the_case_verifies(tmp_path):
    """Removing a request renumbers the requests and nodes after it, and leaves copies
    of writes that are gone: the shrinker re-resolves the first and leaves the second
    out, so the walk's 99 steps shrink to the few the failure needs (the shrinker that
    only removed what replayed unchanged left 70); and the case's violation is the one
    its own steps give (its nodes numbered anew), so `corpus verify` passes it."""
    log = tmp_path / "walk.jsonl"
    res = runner.invoke(app, WALK_99 + ["-o", str(log)])
    assert res.exit_code == 0, res.output
    d = tmp_path / "traces"
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "walk-ack", "--bug", "duplicate_ack", "--dir", str(d), "--seconds", "60"])
    assert res.exit_code == 0, res.output
    assert "shrunk 99 steps to" in res.output and "not minimal" not in res.output
    case = read_case(str(d / "walk-ack.txt"))
    assert len(case.steps) <= 15, [step_text(t) for t in case.steps]
    assert case.violations and case.violations[0].startswith("7 Content")
    fails, _ = verify_case(case)
    assert not fails, [(f.line, f.why) for f in fails]


def test_add_refuses_a_name_in_use_and_a_log_whose_digests_the_model_does_not_give(tmp_path):
    log = tmp_path / "w.jsonl"
    assert runner.invoke(app, ["walk", "--config", "small", "--steps", "12", "--seed", "1", "-o", str(log)]).exit_code == 0
    d = tmp_path / "traces"
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "walk-one", "--dir", str(d)])
    assert res.exit_code == 0, res.output
    case = read_case(str(d / "walk-one.txt"))
    n = len(log.read_text().splitlines()) - 2  # the header and the end line
    assert len(case.steps) == n > 5 and verify_case(case)[0] == []  # a passing log is kept whole
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "walk-one", "--dir", str(d)])
    assert res.exit_code == 2 and "a case named 'walk-one' exists" in res.output
    rows = log.read_text().splitlines()
    row = json.loads(rows[3])
    row["digest"] = "0" * 32
    rows[3] = json.dumps(row)
    log.write_text("\n".join(rows) + "\n")
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "tampered", "--dir", str(d)])
    assert res.exit_code == 2 and ":4: digest mismatch" in res.output and "lose this divergence" in res.output


def test_add_keeps_a_refused_step_as_a_rejects_directive(tmp_path):
    from kvsm.log import Header, LogWriter
    from kvsm.state import initial_state
    from kvsm.transitions import apply

    cfg = load_config("small")
    s = initial_state(cfg)
    log = tmp_path / "hand.jsonl"
    T = Transition.make
    with LogWriter(log, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in (T("Arrive", rid=0, tokens=[1], out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0),
                  T("Arrive", rid=1, tokens=[4], out_pages=0), T("Match", rid=1)):
            s = apply(s, t)
            w.write(t, s)
    last = log.read_text().splitlines()[-2]
    append_steps(log, last.replace('"i":6', '"i":7').replace('"Match"', '"Finish"'))  # Finish a matched request
    res = runner.invoke(app, ["corpus", "add", str(log), "--name", "early-finish", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    case = read_case(str(tmp_path / "early-finish.txt"))
    assert [step_text(t) for t in case.steps] == ["Arrive rid=0 tokens=[4] out_pages=0", "Match rid=0"]
    assert [e.head() for e in case.script if e.kind == "rejects"] == ["rejects Finish rid=0"]
    assert verify_case(case)[0] == []


@pytest.mark.tlc
def test_tlc_names_the_step_of_a_case_the_spec_does_not_allow(tmp_path, monkeypatch):
    """A model Finish that also ticks the clock: the model's invariants hold, the spec
    reaches another state at the Finish."""
    right = REGISTRY["Finish"]
    monkeypatch.setitem(REGISTRY, "Finish", replace(right, apply=lambda s, t: replace(right.apply(s, t), clock=s.clock + 1, _digest=None)))
    p = _write(tmp_path, "x", _case("Arrive rid=0 tokens=[1] out_pages=0\nMatch rid=0\nInsert rid=0\nFinish rid=0\n"))
    fails, _ = verify_case(read_case(str(p)), tlc=True)
    # (the steps' effect lines, not written here, are outputs)
    assert [(f.line, f.why) for f in fails if not f.output] == [(8, "TLC: the spec does not allow step 4, Finish(rid=0) (after 3 matched steps)")]


def test_shrinking_re_resolves_the_nodes_and_requests_later_steps_refer_to(monkeypatch):
    """A failure at a Split: removing the first request renumbers the requests and the
    nodes after it, so the Split must find its node again by the prefix it cuts."""
    right = REGISTRY["Split"]
    monkeypatch.setitem(REGISTRY, "Split", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=(1,) * s.config.R)))
    T = Transition.make
    steps = [
        T("Arrive", rid=0, tokens=[7], out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0),
        T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=0), T("Match", rid=1), T("Insert", rid=1), T("Finish", rid=1),
        T("Arrive", rid=2, tokens=[1, 9], out_pages=0), T("Split", node=2, at=1),
    ]
    cfg = replace(load_config("small"), L1=4, L2=8)
    got = shrink(cfg, steps)
    assert got is not None and got.minimal and got.failure.key == ("4 Pending",)
    assert [step_text(t) for t in got.steps] == [
        "Arrive rid=0 tokens=[1,2,3] out_pages=0", "Match rid=0", "Insert rid=0", "Finish rid=0",  # one live request at a time
        "Arrive rid=1 tokens=[1,9] out_pages=0", "Split node=1 at=1",
    ]
