"""The commands, end to end, as a user runs them."""

from __future__ import annotations

from dataclasses import replace

import json

from typer.testing import CliRunner

from kvsm.cli import app

runner = CliRunner()


def test_walk_replay_round_trip(tmp_path):
    log = tmp_path / "w.jsonl"
    r = runner.invoke(app, ["walk", "--config", "default", "--steps", "150", "--seed", "2", "-o", str(log)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["replay", str(log), "--check", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["transitions"] == 150 and out["violations"] == [] and out["first_mismatch"] is None


def test_replay_of_a_tampered_log_exits_nonzero_and_names_the_line(tmp_path):
    log = tmp_path / "w.jsonl"
    runner.invoke(app, ["walk", "--config", "small", "--steps", "20", "-o", str(log)])
    lines = log.read_text().splitlines()
    d = json.loads(lines[5])
    d["digest"] = "0" * 32
    lines[5] = json.dumps(d)
    log.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["replay", str(log), "--json"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["first_mismatch"]["line"] == 6 and out["transitions"] == 4


def test_unknown_config_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["walk", "--config", "nope", "-o", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2
    assert "config 'nope': no such file, and not a built-in config" in r.output
    assert not (tmp_path / "x.jsonl").exists()


def test_bad_config_file_names_the_field(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("R = 2\nL1 = 'many'\n")
    r = runner.invoke(app, ["explore", "--config", str(p)])
    assert r.exit_code == 2 and "field 'L1' must be an integer" in r.output


def test_explore_reports_states_edges_and_no_violations(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text("R = 2\nL1 = 1\nL2 = 2\nmax_requests = 2\nmax_live = 1\nprompts = [{pages = [1, 2]}, {pages = [1, 3]}]\n")
    r = runner.invoke(app, ["explore", "--config", str(p), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["violations"] == [] and out["states"] > 50 and out["edges"] >= out["states"] - 1
    assert sum(out["edges_by_transition"].values()) == out["edges"]
    assert out["edges_by_transition"]["Split"] > 0 and out["depth"] > 5


def test_the_main_job_runs_every_layer_on_one_log_and_passes(tmp_path):
    """`kvsm run` (README's first command) on fewer requests: simulation, replay, the
    same log on rank processes with real bytes, exploration, TLC (skipped without Java),
    the report; one line a step on stderr, and what to open and try next."""
    r = runner.invoke(app, ["run", "--requests", "40", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    steps = {s["step"].split(" (")[0]: s["result"] for s in out["steps"]}
    assert out["ok"] and list(steps) == ["sim", "replay", "explore small", "gpu replay", "TLC check small", "report"]
    assert steps["replay"] == "every digest reproduced"
    assert "0 violations" in steps["explore small"]
    gpu = steps["gpu replay"]
    assert gpu.startswith("ok:") and " 0 digest mismatches" in gpu
    assert int(gpu.split(", ")[1].split()[0]) > 0, "no byte was verified"
    assert steps["TLC check small"].startswith(("ok", "skipped"))
    if steps["TLC check small"].startswith("ok"):  # the spec and the model see the same states
        assert steps["TLC check small"].split()[1] == steps["explore small"].split()[0]
    assert list(tmp_path.glob("*.jsonl")), "the run keeps its log"
    report = (tmp_path / "report.html").read_text()
    assert out["report"] == str(tmp_path / "report.html")
    assert report.count('src="data:image/png;base64,') == 3 and "TLC check small" in report and "<h2>Steps</h2>" in report
    lines = r.stderr.splitlines()
    assert [x.split("] ")[0] for x in lines if x.startswith("kvsm: run [")] == [f"kvsm: run [{k}/6" for k in range(1, 7)]


def test_the_main_job_ends_with_what_to_open_and_try_next(tmp_path, monkeypatch):
    import kvsm.cli as cli

    monkeypatch.setattr(cli, "_gpu_row", lambda log: ("gpu replay", "skipped: not in this test", "-"))
    monkeypatch.setattr(cli, "_tlc_row", lambda: ("TLC check small", "skipped: not in this test", "-"))
    r = runner.invoke(app, ["run", "--requests", "10", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    tail = r.stdout.splitlines()[-5:]
    log = tmp_path / "sim-synthetic-0.jsonl"
    assert tail[0] == f"open {tmp_path / 'report.html'} (the simulation's plots and these steps)" and tail[1] == "try next:"
    assert tail[2].split()[:5] == ["kvsm", "show", str(log), "--html", str(log.with_suffix(".html"))]
    assert tail[3].split()[:4] == ["kvsm", "check", "--bug", "double_free"]
    assert tail[4].split()[:2] == ["kvsm", "campaign"]


def test_the_main_jobs_explored_config_is_the_model_tlc_checks():
    from kvsm.cli import RUN_MODEL_REQUESTS, RUN_TLC_MODEL
    from kvsm.config import load_config
    from kvsm.tla.location import spec_dir
    from kvsm.tla.models import load_model

    checked = load_model(str(spec_dir() / RUN_TLC_MODEL), properties=False).config
    explored = replace(load_config("small"), max_requests=RUN_MODEL_REQUESTS)
    assert replace(checked, name="", walk_weights=()) == replace(explored, name="", walk_weights=())


def test_walk_to_a_directory_is_an_error_that_writes_nothing(tmp_path):
    r = runner.invoke(app, ["walk", "--steps", "3", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []
