"""Checked and bounded before anything runs (issue 41, item 5): an empty output path is
refused by every command that writes one, a sweep's grid and a campaign's runs have a
ceiling that an option lifts, a campaign's --requests is held to `kvsm sim -n`'s bound,
and a bad $KVSM_PROGRESS_SECONDS is refused; each is one error line, exit 2, and nothing
is written."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

from kvsm.cli import app

from .helpers import one_error

runner = CliRunner()




def _nothing_written(where) -> None:
    assert sorted(p.name for p in where.iterdir()) == []


# ---- -o '' --------------------------------------------------------------------------------


@pytest.mark.parametrize("args, option", [
    (["walk", "-o", ""], "'-o' / '--output'"),
    (["run", "-o", ""], "'-o' / '--output'"),
    (["run", "--outdir", ""], "'--outdir'"),
    (["sim", "-n", "5", "-o", ""], "'-o' / '--output'"),
    (["sim", "-n", "5", "--plot", ""], "'--plot'"),
    (["sim", "-n", "5", "--report", ""], "'--report'"),
    (["sweep", "-n", "5", "-o", ""], "'-o' / '--output'"),
    (["campaign", "--runs", "1", "-c", "small", "-o", ""], "'-o' / '--output'"),
    (["campaign", "--runs", "1", "-c", "small", "--plot", ""], "'--plot'"),
    (["show", "x.jsonl", "--html", ""], "'--html'"),
    (["check", "--log", ""], "'--log'"),
    (["corpus", "add", "x.jsonl", "--name", "x", "--dir", ""], "'--dir'"),
])
def test_an_empty_output_path_is_refused_everywhere(tmp_path, monkeypatch, args, option):
    monkeypatch.chdir(tmp_path)  # an empty path is the current directory: nothing lands here
    line = one_error(runner.invoke(app, args), f"Invalid value for {option}: is empty, which would be the current directory; give a path")
    assert f" {args[0]}" in line.split(":")[1]  # the command named
    _nothing_written(tmp_path)


def test_a_sweep_writes_under_out_by_default():
    from kvsm.commands.common import output_path

    sweep = next(c for c in app.registered_commands if c.name == "sweep")
    default = inspect.signature(sweep.callback).parameters["outdir"].default
    assert default.default == output_path("out/sweep") and default.parser is output_path


# ---- ceilings: a sweep's points, a campaign's runs ---------------------------------------------


def _list(n: int, start: int = 0) -> str:
    return ",".join(str(i) for i in range(start, start + n))


def test_a_sweep_grid_over_the_ceiling_names_its_product_and_the_option(tmp_path, monkeypatch):
    from kvsm.bounds import MAX_SWEEP_POINTS

    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["sweep", "-n", "5", "--seed", _list(2001), "--l1-pages", _list(200, 1)])
    one_error(res, f"error: the grid is 2,001 x 200 = 400,200 points (--seed x --l1-pages), more than the ceiling {MAX_SWEEP_POINTS:,}; --max-points lifts it")
    res = runner.invoke(app, ["sweep", "-n", "5", "--seed", _list(MAX_SWEEP_POINTS + 1)])
    one_error(res, f"error: the grid is {MAX_SWEEP_POINTS + 1:,} points (--seed), more than the ceiling {MAX_SWEEP_POINTS:,}; --max-points lifts it")
    res = runner.invoke(app, ["sweep", "-n", "5", "--seed", "0,1,2", "--l1-pages", "8,16", "--max-points", "5", "-o", "s"])
    one_error(res, "error: the grid is 3 x 2 = 6 points (--seed x --l1-pages), more than the ceiling 5; --max-points lifts it")
    _nothing_written(tmp_path)


def test_max_points_lifts_the_ceiling_and_a_large_grid_is_announced_while_prepared(tmp_path, monkeypatch):
    import kvsm.commands.sweep as sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sweep, "ANNOUNCE_POINTS", 1)
    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0")  # a progress line at every point
    # past the ceiling and the preparation, the next check (--scheduler) is the one that fails
    res = runner.invoke(app, ["sweep", "-n", "5", "-w", "system-prompts", "--seed", "0,1", "--max-points", "2", "--scheduler", "nowhere", "-o", "s"])
    assert res.exit_code == 2, res.output
    err = res.stderr.splitlines()
    assert err[0] == "kvsm: sweep: preparing 2 points (each checked as kvsm sim would, before any runs)", err
    assert [x.split(",")[0] for x in err[1:-1]] == ["kvsm: sweep: points prepared 1/2 (50%)", "kvsm: sweep: points prepared 2/2 (100%)"], err
    assert err[-1].startswith("error: --scheduler nowhere: not a scheduler address"), err
    _nothing_written(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--runs", "99999999999999"], "error: --runs 99999999999999: 99,999,999,999,999 runs, more than the ceiling 1,000,000; --max-runs lifts it"),
    (["--seeds", "0..1000000"], "error: --seeds 0..1000000: 1,000,001 runs, more than the ceiling 1,000,000; --max-runs lifts it"),
    (["--runs", "3", "--max-runs", "2"], "error: --runs 3: 3 runs, more than the ceiling 2; --max-runs lifts it"),
    (["--requests", "1..99999999"], "error: --requests 1..99999999: MAX is more than 100000, the most requests a run makes (kvsm sim -n's bound)"),
    (["--requests", "1..100001", "--schedule", "random"], "error: --requests 1..100001: MAX is more than 100000"),
    (["--requests", "1..10000"], "error: --requests 1..10000: a walk run of --schedule swarm (configs small) makes 16 times MAX, "
                                 "160000 requests, more than 100000 (kvsm sim -n's bound); MAX is at most 6250 here"),
])
def test_a_campaign_is_bounded_before_anything_runs(tmp_path, monkeypatch, args, message):
    from kvsm.bounds import MAX_CAMPAIGN_RUNS

    assert MAX_CAMPAIGN_RUNS == 1_000_000
    monkeypatch.chdir(tmp_path)
    one_error(runner.invoke(app, ["campaign", "-c", "small", "--workers", "1", *args, "-o", "c"]), message)
    _nothing_written(tmp_path)


def test_a_campaign_takes_the_bounds_themselves(tmp_path, monkeypatch):
    """--max-runs N runs N; MAX 100000 without walk runs and 6250 with them pass the
    check: the next check (--scheduler) is the one that fails."""
    monkeypatch.chdir(tmp_path)
    for args in (["--runs", "2", "--max-runs", "2"], ["--requests", "1..100000", "--schedule", "random"], ["--requests", "1..6250"]):
        res = runner.invoke(app, ["campaign", "-c", "small", *args, "--scheduler", "nowhere", "-o", "c"])
        one_error(res, "error: --scheduler nowhere: not a scheduler address")
    _nothing_written(tmp_path)


# ---- $KVSM_PROGRESS_SECONDS ---------------------------------------------------------------------


@pytest.mark.parametrize("value, reason", [("abc", "not a number"), ("-1", "negative"), ("nan", "not a finite number"), ("inf", "not a finite number")])
def test_a_bad_progress_seconds_is_refused_before_anything_runs(tmp_path, monkeypatch, value, reason):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", value)
    res = runner.invoke(app, ["walk", "--steps", "3", "-o", "w.jsonl"])
    one_error(res, f"error: environment variable KVSM_PROGRESS_SECONDS={value!r}: {reason}; give the seconds between two progress lines, a number >= 0 such as 5 or 0.5")
    _nothing_written(tmp_path)


@pytest.mark.parametrize("value, seconds", [("", 5.0), ("  ", 5.0), ("0", 0.0), ("0.5", 0.5), (" 2 ", 2.0)])
def test_a_good_or_empty_progress_seconds_is_taken(monkeypatch, value, seconds):
    from kvsm.commands.common import progress_interval

    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", value)
    assert progress_interval() == seconds
