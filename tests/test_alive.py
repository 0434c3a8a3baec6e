"""`kvsm run` never silent, the viewer's rank lanes named as ranks, no temporary file
left by a SIGTERM to a campaign, and every command's default output under `out/`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvsm.cli import app
from tests.test_campaign import _env, _wait_for

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


# ---- kvsm run: an elapsed-time line during every step ---------------------------------------------


def test_run_prints_elapsed_time_lines_during_its_steps_without_a_count(tmp_path, monkeypatch):
    """The GPU and TLC steps (half a minute each on the defaults) have no count of their
    own: a line with the step and its elapsed seconds comes every $KVSM_PROGRESS_SECONDS."""
    import kvsm.cli as cli

    def slow(row):
        def step(*_):
            time.sleep(0.6)
            return row
        return step

    monkeypatch.setattr(cli, "_gpu_row", slow(("gpu replay", "skipped: not in this test", "-")))
    monkeypatch.setattr(cli, "_tlc_row", slow(("TLC check small", "skipped: not in this test", "-")))
    monkeypatch.setattr(cli, "RUN_MODEL_REQUESTS", 1)
    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0.1")
    r = runner.invoke(app, ["run", "--requests", "5", "--outdir", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    err = r.stderr.splitlines()
    for step in ("gpu replay", "TLC"):
        ticks = [x for x in err if re.fullmatch(rf"kvsm: run: {step}, \d+s", x)]
        assert len(ticks) >= 3, (step, err)
    # each tick comes after its step's announcement and before the next step's
    at = {x.split("] ")[0]: i for i, x in enumerate(err) if x.startswith("kvsm: run [")}
    first_tick = next(i for i, x in enumerate(err) if x.startswith("kvsm: run: gpu replay,"))
    assert at["kvsm: run [4/6"] < first_tick < at["kvsm: run [5/6"]


def test_run_headline_is_the_sim_row_of_its_table():
    from kvsm.cli import run_headline

    text = run_headline({"requests": 300, "hit_rate_blocks": 0.0312, "transitions": 6590}, Path("out/sim-synthetic-0.jsonl"))
    assert text == "300 requests of the Mooncake synthetic trace, block hit rate 0.031, 6590 transitions -> out/sim-synthetic-0.jsonl"


# ---- the viewer's rank lanes ----------------------------------------------------------------------


def test_rank_lanes_and_device_pages_are_named_by_rank_not_like_tiers(tmp_path):
    from kvsm.corpus.run import read_run
    from kvsm.render import render
    from kvsm.render.html import data

    log = tmp_path / "w.jsonl"
    r = runner.invoke(app, ["walk", "--config", "default", "--steps", "300", "--seed", "1", "-o", str(log)])
    assert r.exit_code == 0, r.output
    run = read_run(log)
    view = run.view(len(run.steps))
    lanes = next(sec for sec in view if sec.name == "lanes")
    assert [it.label for it in lanes.items] == [f"r{k}" for k in range(run.config.R)]
    text = render(view)
    assert re.search(r"\bp\d+\(r\d+\)", text), text
    assert not re.search(r"\bl\d+\b|\(l\d+\)", text), text
    d = data(run, "x")
    labels = {item["l"] for item in d["items0"] if item["s"] == "lanes"}
    assert labels == {f"r{k}" for k in range(run.config.R)}
    story = runner.invoke(app, ["show", str(log), "--all", "--no-check"]).stdout
    assert "(r0)" in story and not re.search(r"\(l\d+\)|^\s*[~+-]? ?l\d+  used", story, re.M)


# ---- kvsm show --html: the invariants of every step, decided fast ---------------------------------


@pytest.mark.parametrize("bug", ["none", "double_free", "split_pending"])
def test_the_viewers_violations_of_every_step_are_the_from_scratch_checks(tmp_path, bug):
    """`Run.check_all` (one Checker along the run, then each state from scratch only when
    it finds something) gives every step exactly what `invariants.violations` says."""
    from kvsm.corpus.run import read_run
    from kvsm.invariants import violations

    log = tmp_path / "w.jsonl"
    r = runner.invoke(app, ["walk", "--config", "small", "--steps", "200", "--seed", "3", "-o", str(log), *(["--bug", bug] if bug != "none" else [])])
    assert r.exit_code == 0, r.output
    run = read_run(log)
    run.check_all()
    got = [run.violations(n) for n in range(len(run.steps) + 1)]
    want = [violations(run.state(n)) for n in range(len(run.steps) + 1)]
    assert got == want
    assert any(want) == (bug != "none")
    first = next((n for n, v in enumerate(want) if v), None)
    assert read_run(log).first_violation() == first


# ---- SIGTERM to a campaign ------------------------------------------------------------------------


@pytest.mark.parametrize("group", [False, True], ids=["campaign", "process-group"])
def test_sigterm_to_a_campaign_in_the_middle_of_runs_leaves_no_temporary_file(tmp_path, group):
    """Workers write each run's log in a temporary directory. SIGTERM to the campaign, or
    to its whole process group (what a service manager or a container stop sends), stops
    them mid-run; a worker killed by it never runs its own cleanup: nothing may stay in
    $TMPDIR."""
    out, tmp = tmp_path / "c", tmp_path / "tmp"
    tmp.mkdir()
    camp = subprocess.Popen(
        [sys.executable, "-m", "kvsm.cli", "campaign", "--runs", "50", "--workers", "2", "-c", "default",
         "--schedule", "random", "--requests", "300..400", "-o", str(out)],
        env={**_env(), "TMPDIR": str(tmp), "KVSM_PROGRESS_SECONDS": "0"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        # a run log being written (a run of a few hundred requests takes seconds)
        _wait_for(lambda: any(p.stat().st_size > 0 for p in tmp.rglob("*.jsonl")) or camp.poll() is not None, 180, "a run log")
        assert camp.poll() is None, camp.communicate()
        if group:
            os.killpg(camp.pid, signal.SIGTERM)
        else:
            camp.send_signal(signal.SIGTERM)
        _, stderr = camp.communicate(timeout=90)
    finally:
        if camp.poll() is None:
            os.killpg(camp.pid, signal.SIGKILL)
            camp.wait()
    assert camp.returncode == 143, stderr
    assert stderr.splitlines()[-1] == "interrupted: stopped by SIGTERM; unfinished outputs were removed"
    time.sleep(0.5)  # the workers' processes are gone with the cluster
    left = [str(p.relative_to(tmp)) for p in tmp.rglob("*")]
    assert left == [], f"left in the temporary directory: {left[:10]}"


# ---- default outputs ------------------------------------------------------------------------------


def _defaults() -> dict[tuple[str, str], object]:
    """(command, option) -> the default of every option of every command that names a
    file or a directory kvsm writes."""
    cmd = typer.main.get_command(app)
    out = {}

    def visit(c, path: str) -> None:
        if hasattr(c, "commands"):  # a group (typer's click classes need not be this click's)
            for name, sub in c.commands.items():
                visit(sub, f"{path} {name}".strip())
            return
        for p in c.params:
            if getattr(p, "param_type_name", "") == "option" and set(p.opts) & {"-o", "--output", "--outdir", "--html", "--plot", "--report", "--log"}:
                out[(path, p.opts[0])] = p.default
    visit(cmd, "")
    return out


def test_every_default_output_is_under_out(tmp_path):
    d = _defaults()
    assert d[("run", "-o")] == Path("out")
    assert d[("sweep", "-o")] == Path("out/sweep")
    assert d[("campaign", "-o")] == Path("out/campaign")
    for (command, option), default in d.items():
        if default is not None and not callable(default):
            assert Path(str(default)).parts[0] == "out", (command, option, default)
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/out/" in ignored or "out/" in ignored
