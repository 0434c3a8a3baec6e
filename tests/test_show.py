"""`kvsm show` (a state, a story, the HTML viewer in a real browser) and the story that
`kvsm sim` prints when a run stops."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.render.html import data
from kvsm.corpus.run import read_run
from kvsm.transitions import REGISTRY

runner = CliRunner()
TRACES = Path(__file__).resolve().parent.parent / "traces"
ANCHOR = TRACES / "reload-anchor-changed.txt"


def _broken_commit(monkeypatch):
    """A Commit that forgets to take the committed writes off the ranks' counts."""
    right = REGISTRY["Commit"]
    monkeypatch.setitem(REGISTRY, "Commit", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=s.write_done)))


def _violating_walk(tmp_path) -> tuple[Path, int]:
    for seed in range(50):
        log = tmp_path / f"walk-{seed}.jsonl"
        assert runner.invoke(app, ["walk", "--config", "small", "--steps", "60", "--seed", str(seed), "-o", str(log)]).exit_code == 0
        first = read_run(log).first_violation()
        if first is not None and first > 8:
            return log, first
    raise AssertionError("no walk of small commits within 60 steps")


def test_show_prints_the_state_after_a_step_of_a_log_or_a_case(tmp_path):
    res = runner.invoke(app, ["show", str(ANCHOR), "--at", "17", "--sections", "tree"])
    assert res.exit_code == 0, res.output
    assert res.output == (
        "state after step 17  Insert rid=1\n"
        "tree\n"
        "  #0  root\n"
        "  └─ #2  [1]  L1 p0(r0)  L2 h0  lock 1  hits 2  touched 4\n"
        "     ├─ #1  [2]  L2 h1  hits 1  touched 2\n"
        "     └─ #3  [3]  L1 p1(r1)  lock 1  hits 1  touched 5\n"
    )
    log = tmp_path / "w.jsonl"
    assert runner.invoke(app, ["walk", "--config", "l3", "--steps", "40", "--seed", "2", "-o", str(log)]).exit_code == 0
    n = len(log.read_text().splitlines()) - 2  # the header and the end line
    res = runner.invoke(app, ["show", str(log)])
    assert res.exit_code == 0 and res.output.startswith(f"state after step {n}  ") and "\ndisks" in res.output and "\nspill queue" in res.output


def test_show_diff_prints_only_what_step_n_changed():
    res = runner.invoke(app, ["show", str(ANCHOR), "--at", "44", "--diff"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("step 44  ReloadAdmit\nhost\n  ~ used 1/2 → 0/2  free h0 → h0..1\nreloads\n  - [1,3]")


def test_show_all_tells_every_step_as_a_story():
    res = runner.invoke(app, ["show", str(ANCHOR), "--all"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{ANCHOR}: config l3-three: R=2 P=1 L1=1/lane L2=2 L3=2/rank write_through slru, 44 steps"
    assert [x for x in lines if x.startswith("step ")][:2] == ["step 1  Arrive rid=0 tokens=[1,2] out_pages=0", "step 2  Match rid=0"]
    assert "initial state" in lines and "state after step 44" in lines


def test_show_marks_a_violation_at_its_step(tmp_path, monkeypatch):
    _broken_commit(monkeypatch)
    log, first = _violating_walk(tmp_path)
    res = runner.invoke(app, ["show", str(log), "--at", str(first), "--sections", "writes"])
    assert res.exit_code == 0
    assert res.output.endswith("violation 4 Pending: rank 0 has finished 1 of 0 writes\nviolation 4 Pending: rank 1 has finished 1 of 0 writes\n")
    res = runner.invoke(app, ["show", str(log), "--all", "--diff"])
    assert f"step {first}  Commit\n" in res.output and "  violation 4 Pending" in res.output


@pytest.mark.parametrize("args, message", [
    (["--at", "99"], "step 99 is beyond the 44 steps"),
    (["--at", "3", "--all"], "--at and --all are alternatives"),
    (["--at", "0", "--diff"], "--diff needs a step N >= 1"),
    (["--sections", "tree,nosuch"], "unknown section 'nosuch'"),
    (["--sections", "tree,,lanes"], "--sections 'tree,,lanes': an empty value in the list"),
])
def test_show_refuses_what_it_cannot_show(args, message):
    res = runner.invoke(app, ["show", str(ANCHOR), *args])
    assert res.exit_code == 2 and message in res.output


def test_show_names_the_line_of_a_log_it_cannot_read(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kvsm_log": 1}\n')
    res = runner.invoke(app, ["show", str(bad)])
    assert res.exit_code == 2 and f"{bad}:1: header lacks field 'config'" in res.output


def test_the_viewer_holds_each_step_s_changes_and_violations(tmp_path, monkeypatch):
    d = data(read_run(ANCHOR), "anchor")
    assert len(d["steps"]) == 45 and len(d["patches"]) == 44
    assert d["steps"][17]["t"] == "Insert rid=1" and d["steps"][17]["line"] == 36
    # step 16 (Match rid=1) splits #1: it adds #2 and changes #1, removes nothing
    p = d["patches"][15]
    assert {it["k"] for it in p["set"]} >= {"node 2", "node 1"} and p["del"] == []
    _broken_commit(monkeypatch)
    log, first = _violating_walk(tmp_path)
    d = data(read_run(log), "walk")
    assert [i for i, s in enumerate(d["steps"]) if s["v"]][0] == first


def test_the_viewer_is_one_file_that_loads_nothing_from_elsewhere(tmp_path):
    out = tmp_path / "v.html"
    res = runner.invoke(app, ["show", str(ANCHOR), "--html", str(out)])
    assert res.exit_code == 0 and f"open {out}#step=44" in res.output
    text = out.read_text()
    assert "<script src" not in text and "<link" not in text and "http://" not in text and "https://" not in text
    assert "@import" not in text and "url(" not in text


# ---- in a real browser ------------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browse(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (apt-get install chromium)")
def test_the_viewer_opens_at_the_step_in_its_url_and_highlights_what_changed(tmp_path):
    out = tmp_path / "anchor.html"
    assert runner.invoke(app, ["show", str(ANCHOR), "--html", str(out)]).exit_code == 0
    dom = _browse("--dump-dom", f"file://{out}#step=16").stdout
    assert "step 16: Match rid=1   (line 35)" in dom and "step 16 / 44" in dom
    # the split: #2 is new (green), #1 changed (yellow) with its changed fields marked
    assert 'class="node added" data-key="node 2"' in dom
    assert 'class="node changed" data-key="node 1"' in dom and 'class="f fchanged"' in dom
    assert 'id="violation" style="display: none;"' in dom
    shot = tmp_path / "anchor.png"
    _browse(f"--screenshot={shot}", "--window-size=1400,1000", f"file://{out}#step=16")
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")) == (1400, 1000)


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (apt-get install chromium)")
def test_the_viewer_shows_a_violation_at_its_step(tmp_path, monkeypatch):
    _broken_commit(monkeypatch)
    log, first = _violating_walk(tmp_path)
    out = tmp_path / "walk.html"
    assert runner.invoke(app, ["show", str(log), "--html", str(out)]).exit_code == 0
    dom = _browse("--dump-dom", f"file://{out}#step={first}").stdout
    assert f"step {first}: Commit" in dom
    assert 'id="violation" style="display: block;">violation 4 Pending: rank 0 has finished 1 of 0 writes' in dom
    assert f'href="#step={first}"' in dom  # the list of the steps with a violation
    before = _browse("--dump-dom", f"file://{out}#step={first - 1}").stdout
    assert 'id="violation" style="display: none;"' in before


# ---- the story of a stopped simulator run ---------------------------------------------------------------------


def test_a_stopped_sim_run_prints_the_story_of_its_last_steps(tmp_path, monkeypatch):
    _broken_commit(monkeypatch)
    out = tmp_path / "run.jsonl"
    res = runner.invoke(app, ["sim", "--requests", "12", "--ranks", "2", "--check", "-o", str(out)])
    assert res.exit_code == 1
    failed = tmp_path / "run.failed.jsonl"
    assert not out.exists() and failed.exists()  # the run leaves no log; the failure log is kept
    text = res.output
    assert "run stopped: after log transition #" in text
    assert f"{failed}: config default: R=2" in text and "the last 6 steps up to step" in text
    assert "Commit\n" in text and "violation 4 Pending: rank 0 has finished 1 of 0 writes" in text
    assert f"the whole story: kvsm show {failed} --all" in text
    header = json.loads(failed.read_text().splitlines()[0])
    assert header["source"] == "sim" and header["seed"] == 0
    # the command it gives for a corpus case works, NAME named
    hint = next(x for x in text.splitlines() if x.startswith("shrink it to a corpus case: "))
    cmd = hint.removeprefix("shrink it to a corpus case: ").replace("NAME", "stopped") + f" --dir {tmp_path / 'traces'}"
    res = runner.invoke(app, cmd.split()[1:])
    assert res.exit_code == 0 and "shrunk" in res.output and (tmp_path / "traces" / "stopped.txt").exists(), res.output


# ---- TLC's counterexamples ----------------------------------------------------------------------------------------


@pytest.mark.tlc
def test_a_tlc_counterexample_is_told_as_a_story(tmp_path):
    """A deliberately false invariant of the ci model (no backup is ever committed): its
    counterexample is a log that `kvsm show` and `tail_story` tell step by step."""
    from kvsm.render.story import tail_story

    spec = Path(__file__).resolve().parent.parent / "spec"
    body = (spec / "MC_ci.tla").read_text().replace("MODULE MC_ci ", "MODULE MC_commit ")
    end = body.rindex("====")
    body = body[: body.rindex("\n", 0, end)] + "\nNothingCommitted == \\A n \\in DOMAIN nodes : nodes[n].host = NoObject\n====\n"
    (tmp_path / "MC_commit.tla").write_text(body)
    consts = (spec / "MC_ci.cfg").read_text().split("SPECIFICATION")[0]
    cfg = tmp_path / "MC_commit.cfg"
    cfg.write_text(consts + "INIT Init\nNEXT Next\nINVARIANT NothingCommitted\n")
    log = tmp_path / "cex.jsonl"
    assert runner.invoke(app, ["check", "--config", str(cfg), "--log", str(log)]).exit_code == 1
    text = tail_story(log, last=2)
    assert "TLC counterexample of NothingCommitted (invariant) in model" in text
    assert "step 9  Commit\n  tree\n    ~ #1  L2 h0..1 writing → h0..1  lock 2 → 1" in text
    res = runner.invoke(app, ["show", str(log), "--html", str(tmp_path / "cex.html")])
    assert res.exit_code == 0 and "(9 steps)" in res.output


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (apt-get install chromium)")
def test_the_viewer_keeps_the_space_between_a_fields_name_and_its_value(tmp_path):
    log = tmp_path / "w.jsonl"
    assert runner.invoke(app, ["walk", "--steps", "200", "-o", str(log)]).exit_code == 0
    run = read_run(log)
    k = next(s.n for s in run.steps if s.state.writes and any(s.state.write_done))  # a write some rank has done
    out = tmp_path / "w.html"
    assert runner.invoke(app, ["show", str(log), "--html", str(out)]).exit_code == 0
    dom = _browse("--dump-dom", f"file://{out}#step={k}").stdout
    assert '<span class="n">done by</span> r' in dom, "no write's 'done by' field at this step"
    # a space inside the name's span is dropped where the span is an inline-block ("done byr0")
    assert not re.search(r'<span class="n">[^<]* </span>', dom)
