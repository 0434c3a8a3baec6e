"""`kvsm sim` as a user runs it, the report files, and the main job's entry point."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.replay import replay
from kvsm.sim import run_main_job

runner = CliRunner()
SMALL = ["--workload", "thrash", "--requests", "40", "--ranks", "2", "--l1-pages", "64", "--l2-pages", "160"]
REQUIRED = (
    "requests",
    "pages_total",
    "pages_hit_l1",
    "pages_hit_l2",
    "hit_rate_blocks",
    "hit_rate_tokens",
    "pages_recomputed",
    "pages_moved",
    "evictions",
    "backups_committed",
    "backups_rolled_back",
    "transitions",
    "seconds",
)


def test_json_summary_has_every_measure(tmp_path):
    log = tmp_path / "run.jsonl"
    r = runner.invoke(app, ["sim", *SMALL, "--seed", "3", "--faults", "slow:0.1,abort:0.05", "-o", str(log), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    for k in REQUIRED:
        assert k in s, k
    assert set(s["pages_moved"]) == {"l1_to_l2", "l2_to_l1", "l2_to_l3", "l3_to_l2"} and set(s["evictions"]) == {"l1", "l2"}
    assert s["requests"] == 40 and s["seed"] == 3 and s["faults"] == "slow:0.1,abort:0.05"
    assert s["hit_rate_blocks"] == round((s["pages_hit_l1"] + s["pages_hit_l2"]) / s["pages_total"], 6)
    header = json.loads(log.read_text().splitlines()[0])
    assert header["source"] == "sim" and header["seed"] == 3
    assert header["extra"]["workload"]["name"] == "thrash" and header["extra"]["tiers"] == "l1,l2"


def test_table_plots_and_report(tmp_path):
    plots, report = tmp_path / "plots", tmp_path / "r.html"
    r = runner.invoke(app, ["sim", *SMALL, "--plot", str(plots), "--report", str(report)])
    assert r.exit_code == 0, r.output
    assert "block hit rate" in r.stdout
    for name in ("hit_rate.png", "occupancy.png", "lanes.png"):
        assert (plots / name).read_bytes().startswith(b"\x89PNG")
    page = report.read_text()
    assert page.count("data:image/png;base64,") == 3 and "hit_rate_blocks" in page and "<script" not in page


def test_bad_input_is_an_error_that_writes_nothing(tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1}\n')
    log = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["sim", "--workload", str(trace), "-o", str(log)])
    assert r.exit_code == 2
    assert f"{trace}:2: field 'input_length' is missing" in r.output.replace("\n", "")
    assert not log.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    r = runner.invoke(app, ["sim", "--faults", "slow:2", "-o", str(log)])
    assert r.exit_code == 2 and "outside [0, 1]" in r.output and not log.exists()


def test_reference_mode_from_the_command_line(tmp_path):
    r = runner.invoke(
        app,
        ["sim", "--workload", "synthetic", "--requests", "300", "--tiers", "l1", "--ranks", "1", "--eviction", "lru", "--l1-pages", "200", "--json"],
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["schedule"] == "serial" and s["config"]["eviction"] == "lru" and s["config"]["P"] == 512
    assert s["pages_hit_l2"] == s["pages_hit_l3"] == 0
    assert s["pages_moved"] == {"l1_to_l2": 0, "l2_to_l1": 0, "l2_to_l3": 0, "l3_to_l2": 0}
    assert s["evictions"]["l1"] > 0


def test_main_job_writes_a_log_that_replays(tmp_path):
    s = run_main_job(tmp_path, seed=1, requests=60)
    assert s["requests"] == 60 and s["config"]["R"] == 4 and s["tiers"] == "l1,l2"
    res = replay(s["log"])
    assert res.ok and res.transitions == s["transitions"] and res.final_digest == s["final_digest"]


def test_a_run_without_a_log_ends_at_the_digest_of_the_run_with_one(tmp_path):
    """Without a log or replicas the simulator skips the per-transition digest sums; its
    final digest must still be that of the logged run."""
    args = ["sim", "--workload", "synthetic", "--requests", "120", "--ranks", "1", "--json"]
    plain = runner.invoke(app, args)
    logged = runner.invoke(app, [*args, "-o", str(tmp_path / "r.jsonl")])
    assert plain.exit_code == 0 and logged.exit_code == 0, plain.output + logged.output
    a, b = json.loads(plain.stdout), json.loads(logged.stdout)
    assert a["transitions"] == b["transitions"] > 0
    assert a["final_digest"] == b["final_digest"]


def test_an_output_that_cannot_be_written_is_an_error_before_the_run_and_leaves_nothing(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    f = tmp_path / "f"
    f.write_text("a file\n")
    cases = [
        (["-o", str(d)], "is a directory"),
        (["-o", str(f / "x.jsonl")], "not a directory"),
        (["-o", str(tmp_path / "o.jsonl"), "--plot", str(f)], "not a directory"),
        (["-o", str(tmp_path / "o.jsonl"), "--report", str(d)], "is a directory"),
        (["-o", str(tmp_path / "o.jsonl"), "--report", str(f / "r.html")], "not a directory"),
    ]
    for args, why in cases:
        r = runner.invoke(app, ["sim", "-n", "3", "--json", *args])
        assert r.exit_code == 2, (args, r.output)
        assert why in r.output.lower() and "Traceback" not in r.output, (args, r.output)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"], args
        assert list(d.iterdir()) == [] and f.read_text() == "a file\n"


def test_l2_pages_without_an_l2_tier_is_an_error(tmp_path):
    r = runner.invoke(app, ["sim", "-n", "3", "--tiers", "l1", "--l2-pages", "8", "-o", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 2 and "--l2-pages needs" in r.output and not (tmp_path / "o.jsonl").exists()
