"""The commands, end to end, as a user runs them."""

from __future__ import annotations

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
    same log on rank processes with real bytes, exploration, TLC (skipped without Java)."""
    r = runner.invoke(app, ["run", "--requests", "40", "--outdir", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    steps = {s["step"].split(" (")[0]: s["result"] for s in out["steps"]}
    assert out["ok"] and list(steps) == ["sim", "replay", "explore small", "gpu replay", "TLC check ci"]
    assert steps["replay"] == "every digest reproduced"
    assert "0 violations" in steps["explore small"]
    gpu = steps["gpu replay"]
    assert gpu.startswith("ok:") and " 0 digest mismatches" in gpu
    assert int(gpu.split(", ")[1].split()[0]) > 0, "no byte was verified"
    assert steps["TLC check ci"].startswith(("ok", "skipped"))
    assert list(tmp_path.glob("*.jsonl")), "the run keeps its log"


def test_walk_to_a_directory_is_an_error_that_writes_nothing(tmp_path):
    r = runner.invoke(app, ["walk", "--steps", "3", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []
