"""kvsm sweep: every point equals the `kvsm sim` run of its options, on a LocalCluster and
on an existing scheduler; --resume with a larger grid runs only the new points; the
knee; bad lists refused before anything runs."""

from __future__ import annotations

import base64
import csv
import json
import re
import shlex
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.sweep.grid import GridError, parse_axes, run_point
from kvsm.sweep.report import knee, knees, write_outputs
from tests.test_campaign import _env, _lines
from tests.test_show import _browse, _chromium

# a workload whose first requests share prefixes, so that L1 size and policy matter
GRID = ["-w", "system-prompts", "-n", "40", "--l1-pages", "8,32", "--eviction", "lru,slru", "--tiers", "l1", "--tiers", "l1,l2"]


def _sweep(*args: str):
    return CliRunner().invoke(app, ["sweep", *args])


def _sim_json(command: str, subprocess_: bool) -> dict:
    args = shlex.split(command)[2:]  # after "kvsm sim"
    if subprocess_:
        p = subprocess.run([sys.executable, "-m", "kvsm.cli", "sim", *args], env=_env(), capture_output=True, text=True, check=True)
        return json.loads(p.stdout)
    res = CliRunner().invoke(app, ["sim", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _without_wall_time(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "seconds"}


def test_each_point_of_a_sweep_on_a_local_cluster_equals_the_kvsm_sim_run_of_its_options(tmp_path):
    out = tmp_path / "s"
    res = _sweep(*GRID, "--workers", "2", "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["points"] == s["ran"] == 8 and s["status"]["ok"] == 8 and s["workers"] == 2
    recs = _lines(out / "results.jsonl")
    assert len(recs) == 8 and len({r["point"] for r in recs}) == 8
    grid = {(r["options"]["tiers"], r["options"]["eviction"], r["options"]["l1_pages"]) for r in recs}
    assert grid == {(t, e, n) for t in ("l1", "l1,l2") for e in ("lru", "slru") for n in (8, 32)}
    for i, r in enumerate(recs):
        # the first through the command line in a process of its own, the others in this one
        sim = _sim_json(r["command"], subprocess_=i == 0)
        assert _without_wall_time(r["sim"]) == _without_wall_time(sim), r["command"]
        assert sum(r["tokens_hit"].values()) == sim["tokens_hit"]
        assert r["hit_rate"]["blocks_l1"] == round(sim["pages_hit_l1"] / sim["pages_total"], 6)
    assert any(r["hit_rate"]["blocks"] > 0 for r in recs)
    assert {r["sim"]["hit_rate_blocks"] for r in recs if r["options"]["l1_pages"] == 8} != {r["sim"]["hit_rate_blocks"] for r in recs if r["options"]["l1_pages"] == 32}
    # the table: one row per point, every field of kvsm sim --json among its columns
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted(row["point"] for row in rows) == sorted(r["point"] for r in recs)
    assert {"sim.hit_rate_blocks", "sim.config.L1", "sim.pages_moved.l1_to_l2", "hit_rate.tokens_l2", "l1_pages", "eviction"} <= set(rows[0])
    by_point = {row["point"]: row for row in rows}
    assert all(float(by_point[r["point"]]["sim.hit_rate_tokens"]) == r["sim"]["hit_rate_tokens"] for r in recs)
    # a knee per curve (tiers x eviction) and measure; the plot; the report: one file, the plot inside
    assert len(s["knees"]) == 8 and all(k["axis"] == "--l1-pages" and k["knee_pages"] in (8, 32) for k in s["knees"])
    png = (out / "hit_rate_l1_pages.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    page = (out / "report.html").read_text()
    assert base64.b64encode(png).decode() in page
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert page.count("<tr title=") == 8


def test_resume_with_a_larger_grid_runs_only_the_new_points(tmp_path):
    out = tmp_path / "s"
    small = ["-w", "system-prompts", "-n", "20", "--tiers", "l1", "--l1-pages", "8,16", "--eviction", "slru"]
    res = _sweep(*small, "--workers", "1", "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    before = (out / "results.jsonl").read_bytes()
    res = _sweep(*small, "--workers", "1", "-o", str(out))
    assert res.exit_code == 2 and "has results already; --resume continues that sweep" in res.output
    res = _sweep("-w", "system-prompts", "-n", "20", "--tiers", "l1", "--l1-pages", "8,16,32", "--eviction", "lru",
                 "--workers", "1", "-o", str(out), "--resume", "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    # --eviction lru is another point than the config's own (slru) for every size: 3 new points
    assert s["points"] == 3 and s["ran"] == 3
    res = _sweep("-w", "system-prompts", "-n", "20", "--tiers", "l1", "--l1-pages", "8,16,32", "--eviction", "lru,slru",
                 "--workers", "1", "-o", str(out), "--resume", "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    recs = _lines(out / "results.jsonl")
    assert (out / "results.jsonl").read_bytes().startswith(before)
    # of the six points, lru x 3 ran in the second invocation and slru x 8,16 in the first: only slru x 32 is new
    assert s["points"] == 6 and s["ran"] == 1 and len(recs) == 2 + 3 + 1
    assert recs[-1]["options"]["eviction"] == "slru" and recs[-1]["options"]["l1_pages"] == 32
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 6


def test_a_sweep_on_an_existing_scheduler(tmp_path):
    """A cluster the sweep did not start (its workers are processes of their own): the
    sweep connects to its scheduler's address, runs there and leaves it running."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        out = tmp_path / "s"
        res = _sweep("-w", "system-prompts", "-n", "20", "--l1-pages", "8,16", "--scheduler", cluster.scheduler_address, "-o", str(out), "--json")
        assert res.exit_code == 0, res.output
        assert cluster.scheduler.workers, "the sweep closed a cluster it did not start"
        workers = set(cluster.scheduler.workers)
    s = json.loads(res.stdout)
    assert s["points"] == s["ran"] == s["status"]["ok"] == 2 and s["workers"] == 1
    recs = _lines(out / "results.jsonl")
    assert {r["worker"] for r in recs} == workers
    r = recs[0]
    assert _without_wall_time(r["sim"]) == _without_wall_time(_sim_json(r["command"], subprocess_=False))


def test_a_point_a_detector_stops_is_recorded_as_kvsm_sim_json_prints_it():
    """The worker's function in this process: a point with a defect that --check catches."""
    (p,) = parse_axes({"requests": "20", "ranks": "2", "bug": "duplicate_ack"}, check=True).points()
    rec = run_point(p.to_json())
    assert rec["status"] == "stopped" and "hit_rate" not in rec
    res = CliRunner().invoke(app, shlex.split(rec["command"])[1:])
    assert res.exit_code == 1 and json.loads(res.stdout) == rec["sim"] and rec["sim"]["stopped"]["detector"] == "invariant"


def test_the_knee_is_the_smallest_capacity_within_one_percent_of_the_best():
    curve = [(16, 0.71), (1, 0.1), (8, 0.705), (4, 0.7), (2, 0.5)]
    assert knee(curve) == (8, 0.705)  # 0.7 < 0.99 x 0.71 = 0.7029 <= 0.705
    assert knee([(1, 0.5), (2, 0.99), (4, 1.0)]) == (2, 0.99)  # exactly 1% below the best is within
    assert knee([(1, 0.5), (2, 0.98), (4, 1.0)]) == (4, 1.0)
    assert knee([(3, 0.0), (1, 0.0)]) == (1, 0.0)  # a flat curve's knee is its smallest capacity
    assert knee([(2, 0.4), (4, 0.6), (8, 0.5)]) == (4, 0.6)  # a curve that falls: its best
    assert knee([]) is None


def test_a_list_crosses_into_points_and_skips_the_capacities_a_tier_set_has_not():
    axes = parse_axes({"tiers": ["l1", "l1,l2"], "l2_pages": "64,128", "l1_pages": "8,16"})
    pts = axes.points()
    assert [(p.tiers, p.l2_pages, p.l1_pages) for p in pts] == [
        ("l1", None, 8), ("l1", None, 16), ("l1,l2", 64, 8), ("l1,l2", 64, 16), ("l1,l2", 128, 8), ("l1,l2", 128, 16)]
    assert parse_axes({"faults": "none,slow:0.1+abort:0.05"}).given()["faults"] == ("none", "slow:0.1,abort:0.05")
    assert len(parse_axes({"l1_pages": "8,8,16"}).points()) == 2  # a value given twice is one point
    with pytest.raises(GridError, match=r"--l1-pages '-1': must be >= 0"):
        parse_axes({"l1_pages": "8,-1"})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--l1-pages", "8,x"], "--l1-pages 'x': not an integer"),
        (["--l1-pages", "8,,16"], "--l1-pages '8,,16': an empty value in the list"),
        (["--tiers", "l2"], "--tiers 'l2': not a tier set; give l1 | l1,l2 | l1,l2,l3, and repeat --tiers for several"),
        (["--tiers", "l1,l1+l4"], "--tiers 'l1,l1+l4': not a tier set"),
        (["--eviction", "lru,fifo"], "--eviction 'fifo': must be one of slru | lru"),
        (["--faults", "none,slow:2"], "--faults 'slow:2': "),
        (["--ranks", "0,4"], "--ranks '0': must be 1..1024"),
        (["--bug", "none,no_such_bug"], "--bug 'no_such_bug': must be one of"),
        (["--tiers", "l1", "--l2-pages", "64,128"], "--l2-pages 64,128: no point has an L2 tier (--tiers l1)"),
        (["--tiers", "l1", "--tiers", "l1,l2", "--faults", "disk:0.01"], "the point --tiers l1 --requests 5 --faults disk:0.01: --faults disk:0.01 needs --tiers l1,l2,l3"),
        (["--config", "default,no-such-config"], "no-such-config"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "give --workers or --scheduler, not both"),
    ],
)
def test_a_bad_list_value_is_one_error_line_naming_the_option_and_the_value_and_nothing_runs(tmp_path, args, message):
    out = tmp_path / "s"
    res = _sweep("-n", "5", *args, "-o", str(out))
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert res.output.count("\n") == 1 and res.output.startswith("error: ")
    assert not out.exists()


def test_an_output_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    res = _sweep("-n", "5", "-o", str(f))
    assert res.exit_code == 2 and f"{f}/results.csv: cannot write here" in res.output
    assert f.read_text() == "x"


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (apt-get install chromium)")
def test_the_report_opens_in_a_browser_with_its_plot_and_table(tmp_path):
    """Two points run in this process (the worker's function, without Dask), their
    report opened by headless chromium."""
    axes = parse_axes({"workload": "system-prompts", "requests": "20", "l1_pages": "8,16"})
    records = [run_point(p.to_json()) for p in axes.points()]
    summary = {"points": 2, "ran": 2, "status": {"ok": 2}, "workers": 1, "seconds": 0.0, "knees": knees(axes, records)}
    paths = write_outputs(axes, records, summary, tmp_path)
    report = tmp_path / "report.html"
    assert report in paths
    dom = _browse("--dump-dom", f"file://{report}").stdout
    assert "<h1>kvsm sweep</h1>" in dom and dom.count("<tr title=") == 2
    assert dom.count('<img alt="hit_rate_l1_pages.png" src="data:image/png;base64,') == 1
    shot = tmp_path / "report.png"
    _browse(f"--screenshot={shot}", "--window-size=1200,900", f"file://{report}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
