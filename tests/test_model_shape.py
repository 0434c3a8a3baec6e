"""Bytes from a model's shape (`--model`, `--l1-size`, ..., `kvsm.sim.shape`), real
`--page-tokens`, and the serving figures (tokens saved, recomputed tokens, the TTFT
estimate, bytes moved) in `kvsm sim --json` and a sweep's CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.sim import SimOptions, simulate
from kvsm.sim.shape import PRESETS, Serving, ShapeError, load_model, parse_size, serving_summary, ttft_ms
from kvsm.sim.trace import Workload, TraceRequest, split_pages
from kvsm.sweep.grid import Point, parse_axes, run_point
from kvsm.sweep.report import write_outputs

runner = CliRunner()


def _sim(*args: str):
    return runner.invoke(app, ["sim", *args])


def _trace(tmp_path: Path, reqs: list[tuple[int, list[int]]]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 3, "hash_ids": h}) + "\n" for i, (n, h) in enumerate(reqs)))
    return p


# ---- shapes and sizes ----------------------------------------------------------------------


def test_preset_bytes_per_token_are_the_published_shapes_computed_by_hand():
    # K and V, per layer, per KV head, head_dim values of 2 bytes (bf16)
    assert PRESETS["llama-3.1-8b"].bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert PRESETS["qwen2.5-7b"].bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57_344
    # MLA: one latent of kv_lora_rank + rope head dim per layer, no K and V pair
    assert PRESETS["deepseek-v3"].bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert PRESETS["deepseek-v3"].mla and not PRESETS["llama-3.1-8b"].mla


@pytest.mark.parametrize(
    "text, n",
    [("40GiB", 40 * 2**30), ("512MiB", 512 * 2**20), ("8GB", 8 * 10**9), ("1.5KiB", 1536), ("2TB", 2 * 10**12), ("4096B", 4096), ("3gib", 3 * 2**30)],
)
def test_a_size_with_a_unit_is_its_bytes(text, n):
    assert parse_size("--l1-size", text) == n


@pytest.mark.parametrize("text", ["8", "8GQ", "GiB", "-1GiB", "1 Gibibyte", "0GiB", ""])
def test_a_size_without_a_known_unit_is_refused_naming_the_option(text):
    with pytest.raises(ShapeError, match="--l2-size"):
        parse_size("--l2-size", text)


def test_a_size_becomes_whole_pages_of_the_shape_and_every_capacity_shows_pages_tokens_bytes():
    r = _sim("-n", "20", "--model", "qwen2.5-7b", "--l1-size", "8GiB", "--l2-size", "64GiB", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    page = 57_344 * 512
    assert s["config"]["L1"] == 8 * 2**30 // page == 292 and s["config"]["L2"] == 64 * 2**30 // page
    assert s["capacity"]["l1"] == {"pages": 292, "tokens": 292 * 512, "bytes": 292 * page}
    assert s["capacity"]["l2"]["bytes"] == s["config"]["L2"] * page and "l3" not in s["capacity"]
    assert s["serving"]["model"]["name"] == "qwen2.5-7b" and s["serving"]["model"]["given"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--l1-pages", "64", "--l1-size", "8GiB"], "--l1-size 8GiB: give --l1-pages or --l1-size, not both"),
        (["--l2-pages", "64", "--l2-size", "8GiB"], "give --l2-pages or --l2-size, not both"),
        (["--l1-size", "8GQ"], "--l1-size '8GQ': a size is a number and a unit"),
        (["--l1-size", "8"], "--l1-size '8': a size is a number and a unit"),
        (["--l1-size", "63MiB"], "--l1-size 63MiB: smaller than one page (64 MiB: 512 tokens x 131,072 bytes per token of llama-3.1-8b)"),
        (["--tiers", "l1", "--l2-size", "1GiB"], "--l2-size needs an L2 tier"),
        (["--l3-size", "1TB"], "--l3-size needs --tiers l1,l2,l3"),
        (["--model", "nope"], "--model nope: not a preset"),
        (["--prefill-tps", "0"], "--prefill-tps 0.0: must be a positive number"),
        (["--page-tokens", "100"], "--page-tokens 100: must divide the workload's block size 512"),
        (["--page-tokens", "1024"], "--page-tokens 1024: must divide the workload's block size 512"),
        (["--tiers", "l1,l2,l3", "--reload-ttl-s", "1", "--set", "reload_ttl=3"], "give --reload-ttl-s or --set reload_ttl=TICKS, not both"),
    ],
)
def test_a_bad_size_model_or_rate_exits_2_naming_the_option(tmp_path, args, message):
    log = tmp_path / "out.jsonl"
    r = _sim("-n", "5", *args, "-o", str(log))
    assert r.exit_code == 2, r.output
    assert message in r.output.replace("\n", "")
    assert "Traceback" not in r.output and not log.exists()


def test_a_sweep_refuses_pages_and_size_of_one_tier_and_a_bad_size_before_anything_runs(tmp_path):
    for args, message in (
        (["--l1-pages", "8,16", "--l1-size", "1GiB"], "give --l1-pages or --l1-size, not both"),
        (["--l1-size", "1GiB,2XB"], "--l1-size '2XB': a size is a number and a unit"),
        (["--model", "x.toml"], "--model x.toml: not a preset"),
    ):
        r = runner.invoke(app, ["sweep", *args, "-o", str(tmp_path / "s")])
        assert r.exit_code == 2 and message in r.output.replace("\n", ""), r.output
        assert not (tmp_path / "s").exists()


def test_a_toml_model_file_gives_its_shape_and_a_bad_one_is_refused_naming_the_field(tmp_path):
    good = tmp_path / "mine.toml"
    good.write_text('layers = 10\nkv_heads = 2\nhead_dim = 64\ndtype = "fp8"\n')
    m = load_model(str(good))
    assert (m.name, m.bytes_per_token) == ("mine", 2 * 10 * 2 * 64 * 1)
    mla = tmp_path / "mla.toml"
    mla.write_text('name = "tiny-mla"\nlayers = 3\nkv_lora_rank = 128\nrope_head_dim = 32\ndtype = "bf16"\n')
    assert load_model(str(mla)).bytes_per_token == 3 * 160 * 2
    r = _sim("-n", "5", "--model", str(mla), "--l1-size", "2MiB", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["serving"]["model"]["name"] == "tiny-mla" and s["config"]["L1"] == 2 * 2**20 // (960 * 512)
    for text, field in (
        ('layers = 10\nkv_heads = 2\ndtype = "bf16"\n', "head_dim"),
        ('layers = 10\nkv_heads = 2\nhead_dim = 64\ndtype = "int3"\n', "dtype"),
        ('layers = 0\nkv_heads = 2\nhead_dim = 64\ndtype = "bf16"\n', "layers"),
        ('layers = 1\nkv_heads = 2\nhead_dim = 64\ndtype = "bf16"\nheads = 3\n', "heads"),
        ("layers = [\n", "not valid TOML"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ShapeError, match=field):
            load_model(str(bad))
        r = _sim("-n", "5", "--model", str(bad))
        assert r.exit_code == 2 and f"--model {bad}" in r.output.replace("\n", "") and "Traceback" not in r.output


# ---- --page-tokens -------------------------------------------------------------------------


def test_page_tokens_splits_a_block_into_pages_sharing_a_prefix_down_to_the_page(tmp_path):
    w = Workload("t", "t", 512, (TraceRequest(0, 600, 0, (7, 9)), TraceRequest(1, 1024, 0, (7, 9))))
    s = split_pages(w, 128)
    # block 7 whole: 4 pages; block 9 holds 88 tokens of the first prompt (1 page), 512 of the second
    assert s.requests[0].hash_ids == (28, 29, 30, 31, 36) and s.requests[1].hash_ids == (28, 29, 30, 31, 36, 37, 38, 39)
    assert s.block_tokens == 128 and split_pages(w, 512) is w
    path = _trace(tmp_path, [(600, [7, 9]), (1024, [7, 9])])
    common = ["--workload", str(path), "--tiers", "l1", "--ranks", "1", "--json"]
    split = json.loads(_sim(*common, "--page-tokens", "128").stdout)
    whole = json.loads(_sim(*common).stdout)
    # whole blocks: the second prompt matches block 7 only (never its last page); in pages
    # of 128 tokens it matches every page of the first prompt, the partial one included
    assert whole["tokens_saved"]["l1"] == 512 and split["tokens_saved"]["l1"] == 5 * 128
    assert split["config"]["P"] == 128 and split["pages_total"] == 13 and split["capacity"]["l1"]["tokens"] == split["config"]["L1"] * 128


# ---- serving figures -----------------------------------------------------------------------


def test_tokens_saved_per_tier_and_recomputed_add_up_to_the_prompt_tokens_of_the_requests():
    s = simulate(SimOptions(requests=200, tiers="l1,l2,l3", l1_pages=32, l2_pages=256, l3_pages=0)).summary
    saved, rec = s["tokens_saved"], s["tokens_recomputed"]
    assert sum(saved[t] > 0 for t in ("l1", "l2", "l3")) >= 2, saved  # the run exercises more than one tier
    assert saved["l1"] + saved["l2"] + saved["l3"] == saved["total"] == s["tokens_hit"]
    from kvsm.sim.workload import load_workload

    prompts = sum(r.input_length for r in load_workload("synthetic", 200).requests)
    assert saved["total"] + rec["total"] == s["tokens_total"] == prompts
    assert rec["mean"] == round(rec["total"] / s["requests"], 3)


def test_the_ttft_estimate_is_the_documented_formula_on_a_hand_checked_run(tmp_path):
    # one rank, L1 only: the second prompt hits block 1 and 2 (1024 tokens) and recomputes 476
    path = _trace(tmp_path, [(1536, [1, 2, 3]), (1500, [1, 2, 4])])
    r = _sim("--workload", str(path), "--tiers", "l1", "--ranks", "1", "--prefill-tps", "1000", "--json")
    s = json.loads(r.stdout)
    assert s["tokens_recomputed"]["total"] == 1536 + 476
    assert s["ttft_ms"] == {"mean": (1536 + 476) / 2, "p50": 476.0, "p99": 1536.0, "max": 1536.0}
    # the load terms, by hand: 2 ranks; 3 pages from the host (2 L2 hits and 1 L3 reload,
    # which crosses the host too) and 1 page from disk, of 1 MB each
    sv = Serving(PRESETS["llama-3.1-8b"], prefill_tps=500, l2_gbps=10, l3_gbps=2)
    assert ttft_ms(1000, 2, 1, 10**6, 2, sv) == pytest.approx(1000 * (1000 / 1000 + 3e6 / 20e9 + 1e6 / 4e9))
    f = serving_summary([(1000, 1, 2, 1, 0)], {"l1_to_l2": 3}, 100, 2, sv)
    page = PRESETS["llama-3.1-8b"].bytes_per_token * 100
    assert f["tokens_saved"] == {"l1": 100, "l2": 200, "l3": 100, "total": 400}
    assert f["ttft_ms"]["mean"] == round(ttft_ms(600, 2, 1, page, 2, sv), 3)
    assert f["bytes_moved"] == {"l1_to_l2": 3 * page}


def test_bytes_moved_are_pages_moved_times_the_page_bytes_and_the_default_model_is_named():
    s = simulate(SimOptions(requests=60, l1_pages=32, l2_pages=256)).summary
    page = 128 * 1024 * 512
    assert s["serving"]["model"] == PRESETS["llama-3.1-8b"].to_json() | {"given": False}
    assert s["bytes_moved"] == {k: v * page for k, v in s["pages_moved"].items()} and s["bytes_moved"]["l1_to_l2"] > 0


def test_reload_ttl_in_seconds_is_ticks_of_the_timed_clock():
    s = simulate(SimOptions(requests=5, tiers="l1,l2,l3", reload_ttl_s=1.0)).summary
    assert s["config"]["reload_ttl"] == 50 and s["config"]["reload_ttl_s"] == 1.0  # ticks of 20 ms
    assert simulate(SimOptions(requests=5, tiers="l1,l2,l3", reload_ttl_s=0.03)).summary["config"]["reload_ttl"] == 2


def test_the_figures_are_deterministic():
    o = SimOptions(requests=80, model="deepseek-v3", l1_size="4GiB", l2_size="16GiB", faults="slow:0.1")
    a, b = simulate(o).summary, simulate(o).summary
    a.pop("seconds"), b.pop("seconds")
    assert a == b


# ---- the sweep ------------------------------------------------------------------------------


def test_a_point_without_the_new_options_keeps_its_name():
    # the names these points had before --model and the sizes existed
    assert Point().key == "4b89e1cdbb68cce4" and Point(l1_pages=64, tiers="l1").key == "29b50fe1d61b3a9b"
    assert Point(l1_size="8GiB").key != Point().key


def test_a_sweep_over_sizes_writes_tokens_saved_and_ttft_per_point_in_its_csv_and_plot(tmp_path):
    axes = parse_axes({"workload": "system-prompts", "requests": "30", "model": "qwen2.5-7b", "l1_size": "1GiB,2GiB"})
    records = [run_point(p.to_json()) for p in axes.points()]
    assert [r["sim"]["config"]["L1"] for r in records] == [2**30 // (57_344 * 512), 2**31 // (57_344 * 512)]
    summary = {"points": 2, "ran": 2, "status": {"ok": 2}, "workers": 1, "seconds": 0.0, "knees": []}
    paths = write_outputs(axes, records, summary, tmp_path)
    assert tmp_path / "serving_l1_size.png" in paths and tmp_path / "hit_rate_l1_size.png" in paths
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    for col in ("model", "l1_size", "tokens_saved.total", "tokens_saved.l1", "ttft_ms.mean", "ttft_ms.p99", "sim.bytes_moved.l1_to_l2", "sim.capacity.l1.bytes"):
        assert col in rows[0], col
    assert [r["l1_size"] for r in rows] == ["1GiB", "2GiB"]
    assert all(int(r["tokens_saved.total"]) == rec["sim"]["tokens_hit"] for r, rec in zip(rows, records))
    assert "--model qwen2.5-7b" in records[0]["command"] and "--l1-size 1GiB" in records[0]["command"]


# ---- kvsm run -------------------------------------------------------------------------------


def test_kvsm_run_takes_a_model_and_sizes_and_refuses_a_bad_one_before_anything_runs(tmp_path):
    from kvsm.sim.runner import main_job_options, with_shape

    s = simulate(with_shape(main_job_options(0, 20, 4), "qwen2.5-7b", "4GiB")).summary
    assert s["config"]["L1"] == 4 * 2**30 // (57_344 * 512) and s["config"]["L2"] == 2048  # L2 as kvsm run's
    assert s["serving"]["model"]["name"] == "qwen2.5-7b" and s["faults"] == "slow:0.05,stall:0.01,abort:0.02"
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", "-n", "5", "--l1-size", "1MiB", "-o", str(out)])
    assert r.exit_code == 2 and "--l1-size 1MiB: smaller than one page" in r.output.replace("\n", "")
    assert not out.exists()
