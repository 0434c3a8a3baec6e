"""A sweep over several seeds: one curve per combination of the other options, its mean
over the seeds with their range, one knee line per curve, a bounded legend, no library
warning, and `results_seeds.csv` beside the raw `results.csv`."""

from __future__ import annotations

import copy
import csv
import json
import statistics
import subprocess
import sys
import warnings

from kvsm.sweep import report
from kvsm.sweep.grid import parse_axes, run_point
from kvsm.sweep.report import knees, render_plots
from kvsm.sweep.seeds import LEGEND_MAX, knee_lines
from tests.test_campaign import _env, _lines


def test_a_sweep_over_three_seeds_draws_one_curve_per_other_option_with_its_mean_and_range(tmp_path):
    out = tmp_path / "s"
    args = ["sweep", "-w", "system-prompts", "-n", "20", "--l1-pages", "4,8,16", "--eviction", "lru,slru", "--seed", "0,1,2",
            "--workers", "2", "-o", str(out)]
    p = subprocess.run([sys.executable, "-m", "kvsm.cli", *args], env={**_env(), "KVSM_PROGRESS_SECONDS": "0"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # stderr: kvsm's own lines only (no library warning)
    assert [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("kvsm: ")] == [], p.stderr
    # stdout: one knee line per curve (two curves: the eviction policies), both measures on it
    lines = [x for x in p.stdout.splitlines() if x.startswith("knee of")]
    assert len(lines) == 2 and all("mean of 3 seeds" in x and "blocks" in x and "tokens" in x for x in lines), p.stdout
    recs = _lines(out / "results.jsonl")
    assert len(recs) == 18
    ks = knees(parse_axes({"workload": "system-prompts", "requests": "20", "l1_pages": "4,8,16", "eviction": "lru,slru", "seed": "0,1,2"}), recs)
    assert {k["curve"] for k in ks} == {"--eviction lru", "--eviction slru"} and all(k["seeds"] == 3 for k in ks)
    for k in ks:  # the knee is the mean curve's
        pol = k["curve"].split()[-1]
        at = [r["hit_rate"][k["measure"]] for r in recs if r["options"]["eviction"] == pol and r["sim"]["config"]["L1"] == k["knee_pages"]]
        assert len(at) == 3 and abs(k["hit_rate"] - statistics.fmean(at)) < 1e-6
    # the raw CSV: one row per point and seed; the seeds' CSV: one row per point without its seed
    raw = list(csv.DictReader((out / "results.csv").open()))
    agg = list(csv.DictReader((out / "results_seeds.csv").open()))
    assert len(raw) == 18 and len(agg) == 6 and "seed" not in agg[0]
    for row in agg:
        mine = [r for r in raw if (r["eviction"], r["l1_pages"]) == (row["eviction"], row["l1_pages"])]
        ys = [float(r["hit_rate.blocks"]) for r in mine]
        assert row["seeds"] == "0 1 2"
        assert float(row["hit_rate.blocks.min"]) == min(ys) and float(row["hit_rate.blocks.max"]) == max(ys)
        assert abs(float(row["hit_rate.blocks.mean"]) - statistics.fmean(ys)) < 1e-5


def _many_records(seeds: int, curves: int) -> tuple:
    """Records of a grid of `curves` request counts x `seeds` seeds x two L1 sizes, made
    from two real points (only the options and the hit rates differ: what the plots read)."""
    axes = parse_axes({"workload": "system-prompts", "requests": ",".join(str(10 + i) for i in range(curves)),
                       "seed": ",".join(map(str, range(seeds))), "l1_pages": "8,16"})
    base = {p.l1_pages: run_point(p.to_json()) for p in parse_axes({"workload": "system-prompts", "requests": "10", "l1_pages": "8,16"}).points()}
    records = []
    for p in axes.points():
        r = copy.deepcopy(base[p.l1_pages])
        r["options"] = p.to_json() | {"point": None}
        del r["options"]["point"]
        r["point"] = p.key
        wobble = ((p.seed * 7 + p.requests) % 11) / 100
        r["hit_rate"] = {k: min(1.0, v + wobble) for k, v in r["hit_rate"].items()}
        records.append(r)
    return axes, records


def test_the_plots_of_many_seeds_and_curves_have_a_bounded_legend_and_raise_no_warning(monkeypatch):
    axes, records = _many_records(seeds=200, curves=14)
    figs = []
    monkeypatch.setattr(report, "_png", lambda fig: figs.append(fig) or b"")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        plots = render_plots(axes, records)
        for fig in figs:  # the layout is computed when the figure is drawn
            fig.canvas.draw()
    assert list(plots) == ["hit_rate_l1_pages.png"] and len(figs) == 1
    texts = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert len(texts) == LEGEND_MAX and texts[-1].startswith("... and 5 more curves")
    assert not any("--seed" in t for t in texts)
    # one line per curve (band and mean: the seeds do not make curves of their own)
    lines = [ln for ln in figs[0].axes[0].get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    assert len(lines) == 14
    ks = knees(axes, records)
    assert len(knee_lines(ks)) == 14 and len(ks) == 28 and all(k["seeds"] == 200 for k in ks)


def test_the_json_summary_of_a_sweep_names_the_seeds_of_each_knee():
    axes, records = _many_records(seeds=3, curves=1)
    ks = knees(axes, records)
    assert [k["curve"] for k in ks] == ["all points", "all points"] and {k["seeds"] for k in ks} == {3}
    json.dumps(ks)
