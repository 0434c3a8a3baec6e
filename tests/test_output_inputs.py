"""An output never replaces an input nor another output (kvsm/output.py, `check_distinct`),
an empty -w/-c is reported as empty, a trace shorter than -n runs whole with a note, and
a clockless run's plots draw without a matplotlib warning."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.output import OutputError, check_distinct, same_file
from kvsm.sim.workload import bundled_path

runner = CliRunner()
FAST = ["-n", "5", "--ranks", "2"]


def _files(d: Path) -> dict[str, bytes]:
    """Every file under `d` (hidden temporary ones too) and its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _short_trace(path: Path, n: int) -> Path:
    path.write_text("".join(bundled_path("synthetic").read_text().splitlines(keepends=True)[:n]))
    return path


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "w.jsonl"
    r = runner.invoke(app, ["walk", "--steps", "20", "-o", str(log)])
    assert r.exit_code == 0, r.output
    return log


# ---- the helper -----------------------------------------------------------------------------------


def test_same_file_sees_one_file_by_any_path(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text("x")
    os.link(a, tmp_path / "hard.jsonl")
    assert same_file(a, tmp_path / "hard.jsonl")
    assert same_file(a, tmp_path / "missing" / ".." / "a.jsonl")
    assert same_file(tmp_path / "new.jsonl", tmp_path / "." / "new.jsonl")  # neither exists yet
    assert not same_file(a, tmp_path / "b.jsonl")


def test_check_distinct_names_the_output_and_what_it_would_replace(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    with pytest.raises(OutputError, match=r"^--report .*/a: cannot write here: it is the input -w/--workload .*/a, which would be replaced"):
        check_distinct([("-o", tmp_path / "b"), ("--report", a)], [("-w/--workload", a), ("-c", None)])
    with pytest.raises(OutputError, match=r"^--report .*/b: cannot write here: -o .*/b writes the same file"):
        check_distinct([("-o", tmp_path / "b"), ("--report", tmp_path / "b")])
    check_distinct([("-o", tmp_path / "b"), ("--report", tmp_path / "c"), ("--plot", None)], [("-w", a)])


# ---- bug 1: kvsm show --html onto its own log -------------------------------------------------------


@pytest.mark.parametrize("how", ["same", "dot", "hard link"])
def test_show_html_refuses_to_overwrite_the_log_it_shows(tmp_path, how):
    log = _log(tmp_path)
    out = {"same": log, "dot": tmp_path / "." / log.name, "hard link": tmp_path / "hard.jsonl"}[how]
    if how == "hard link":
        os.link(log, out)
    before = _files(tmp_path)
    r = runner.invoke(app, ["show", str(log), "--html", str(out)])
    assert r.exit_code == 2, r.output
    assert f"--html {out}: cannot write here: it is the input LOG {log}, which would be replaced" in " ".join(r.stderr.split())
    assert "Traceback" not in r.output
    assert _files(tmp_path) == before


# ---- bug 2: kvsm sim's outputs onto its inputs or each other -----------------------------------------


def test_sim_refuses_a_report_onto_its_own_log(tmp_path):
    x = tmp_path / "X.jsonl"
    x.write_text("keep me\n")
    r = runner.invoke(app, ["sim", *FAST, "-o", str(x), "--report", str(x)])
    assert r.exit_code == 2, r.output
    assert f"--report {x}: cannot write here: -o/--output {x} writes the same file" in " ".join(r.stderr.split())
    assert _files(tmp_path) == {"X.jsonl": b"keep me\n"}


def test_sim_refuses_a_log_onto_its_own_trace(tmp_path):
    t = _short_trace(tmp_path / "T.jsonl", 5)
    before = _files(tmp_path)
    r = runner.invoke(app, ["sim", *FAST, "-w", str(t), "-o", str(t)])
    assert r.exit_code == 2, r.output
    assert f"-o/--output {t}: cannot write here: it is the input -w/--workload {t}" in " ".join(r.stderr.split())
    assert _files(tmp_path) == before


def test_sim_refuses_a_log_onto_the_bundled_trace(tmp_path, monkeypatch):
    import kvsm.sim.workload as workload

    copy = _short_trace(tmp_path / "synthetic_trace.jsonl", 5)  # the package's own is never at risk here
    monkeypatch.setattr(workload, "bundled_path", lambda name: copy)
    before = _files(tmp_path)
    r = runner.invoke(app, ["sim", *FAST, "-w", "synthetic", "-o", str(copy)])
    assert r.exit_code == 2 and f"it is the input -w/--workload {copy}" in r.stderr
    assert _files(tmp_path) == before


def test_sim_refuses_a_report_onto_its_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("R = 2\nL1 = 64\nL2 = 256\n")
    before = _files(tmp_path)
    r = runner.invoke(app, ["sim", *FAST, "-c", str(cfg), "--report", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"--report {cfg}: cannot write here: it is the input -c/--config {cfg}" in " ".join(r.stderr.split())
    assert _files(tmp_path) == before


@pytest.mark.parametrize("name", ["hit_rate.png", "occupancy.png", "lanes.png"])
def test_sim_refuses_a_plot_onto_its_log_or_report(tmp_path, name):
    for other in ("-o", "--report"):
        r = runner.invoke(app, ["sim", *FAST, "--plot", str(tmp_path), other, str(tmp_path / name)])
        assert r.exit_code == 2, r.output
        assert "writes the same file" in r.stderr and name in r.stderr
        assert _files(tmp_path) == {}


def test_walk_refuses_a_log_onto_its_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("R = 2\nL1 = 2\nL2 = 4\nprompts = [{pages = [1, 2]}]\n")
    r = runner.invoke(app, ["walk", "-c", str(cfg), "--steps", "5", "-o", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"-o/--output {cfg}: cannot write here: it is the input -c/--config {cfg}" in " ".join(r.stderr.split())
    assert cfg.read_text().startswith("R = 2") and len(_files(tmp_path)) == 1


def test_check_refuses_a_violation_log_onto_its_model(tmp_path):
    from kvsm.tla.location import spec_dir

    cfg = tmp_path / "MC.cfg"
    cfg.write_bytes((spec_dir() / "MC_ci.cfg").read_bytes())
    before = _files(tmp_path)
    r = runner.invoke(app, ["check", "-c", str(cfg), "--log", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"--log {cfg}: cannot write here: it is the input -c/--config {cfg}" in " ".join(r.stderr.split())
    assert _files(tmp_path) == before


def test_sim_with_distinct_outputs_still_writes_them_all(tmp_path):
    r = runner.invoke(app, ["sim", *FAST, "-o", str(tmp_path / "a.jsonl"), "--report", str(tmp_path / "a.html"), "--plot", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert set(_files(tmp_path)) == {"a.jsonl", "a.html", "hit_rate.png", "occupancy.png", "lanes.png"}


# ---- bug 3: an empty -w or -c -----------------------------------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    (["sim", "-w", ""], "error: -w/--workload is empty: give a trace file, 'synthetic' or a generator name"),
    (["sim", "-c", ""], "error: -c/--config is empty: give a built-in config name"),
    (["walk", "-c", "", "-o", "x.jsonl"], "error: config '': is empty; give a built-in config name"),
    (["explore", "-c", ""], "error: config '': is empty; give a built-in config name"),
])
def test_an_empty_workload_or_config_is_reported_as_empty(tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert says in r.stderr and "directory" not in r.stderr
    assert _files(tmp_path) == {}


def test_load_workload_of_an_empty_name_says_it_is_empty():
    from kvsm.sim.trace import WorkloadError
    from kvsm.sim.workload import load_workload

    with pytest.raises(WorkloadError, match="workload '': is empty; give a trace file"):
        load_workload("")


# ---- bug 4: more requests asked for than a trace holds ------------------------------------------------


def test_sim_runs_a_short_trace_whole_and_says_so_once(tmp_path):
    t = _short_trace(tmp_path / "t.jsonl", 3)
    r = runner.invoke(app, ["sim", "-w", str(t), "-n", "5", "--ranks", "2", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 3  # stdout is the JSON alone
    notes = [x for x in r.stderr.splitlines() if x.startswith("note:")]
    assert notes == [f"note: the trace {t} has 3 requests; -n 5 runs all of them"]
    r = runner.invoke(app, ["sim", "-w", str(t), "-n", "3", "--ranks", "2", "--json"])
    assert r.exit_code == 0 and "note:" not in r.stderr


def test_run_says_how_many_requests_it_runs_when_the_trace_is_shorter(tmp_path, monkeypatch):
    import kvsm.cli as cli
    import kvsm.sim.runner as sim_runner

    t = _short_trace(tmp_path / "t.jsonl", 4)
    main = sim_runner.main_job_options
    monkeypatch.setattr(sim_runner, "main_job_options", lambda seed, requests, ranks: replace(main(seed, requests, ranks), workload=str(t)))
    monkeypatch.setattr(cli, "_gpu_row", lambda log: ("gpu replay", "skipped: not in this test", "-"))
    monkeypatch.setattr(cli, "_tlc_row", lambda: ("TLC check small", "skipped: not in this test", "-"))
    monkeypatch.setattr(cli, "RUN_MODEL_REQUESTS", 1)
    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0")  # a progress line at every update
    r = runner.invoke(app, ["run", "--requests", "50", "-o", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["steps"][0]["result"].startswith("4 requests")
    err = r.stderr.splitlines()
    assert [x for x in err if x.startswith("note:")] == [f"note: the trace {t} has 4 requests; --requests 50 runs all of them"]
    assert "kvsm: run [1/6] sim: all 4 requests of the Mooncake synthetic trace on 4 ranks, L1 and L2" in err
    progress = [x for x in err if x.startswith("kvsm: run: sim, requests")]
    assert progress and all("/4 (" in x for x in progress) and "/50" not in " ".join(progress)


# ---- bug 5: plots of a walk (no simulated time) ---------------------------------------------------------


def test_the_plots_and_report_of_a_walk_raise_no_warning(tmp_path):
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.report import render_html, render_plots

    res = simulate(SimOptions(workload="config-prompts", config="small", requests=5, schedule="walk"))
    assert res.summary["simulated_ms"] == 0
    zero = replace(res, summary={**res.summary, "requests": 0}, samples=[replace(s, requests=0) for s in res.samples])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for r in (res, zero):  # and one of zero width on its own axis too
            assert set(render_plots(r)) == {"hit_rate.png", "occupancy.png", "lanes.png"}
        render_html(res)


def test_sim_walk_with_plots_and_a_report_prints_no_warning(tmp_path):
    args = ["sim", "-n", "5", "--schedule", "walk", "-c", "small", "-w", "config-prompts", "--plot", str(tmp_path), "--report", str(tmp_path / "r.html")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "Warning" not in r.output and len(_files(tmp_path)) == 4
