"""The GPU backend end to end: R rank processes replay walk logs, moving real bytes.

Every replay test runs on the CPU (as CI does) and again, marked `gpu`, on CUDA where
there is one. Pages are small (a few hundred bytes, two layers) so that a replay costs
about as much as starting its processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvsm.config import load_config
from kvsm.gpu.hooks import parse
from kvsm.gpu.launch import Options, union_seconds
from kvsm.gpu.launch import replay as gpu_replay
from kvsm.gpu.plan import agreements
from kvsm.log import Header, LogWriter, read_log
from kvsm.sim import SimOptions, simulate
from kvsm import effects as fx
from kvsm.state import initial_state, lane_of
from kvsm.transitions import apply
from kvsm.walk import walk

from .test_gpu_plan import FOUR_RANKS

CPU = pytest.param("cpu", id="cpu")
CUDA = pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)
SMALL = dict(page_bytes=256, layers=2, timeout_s=120)


def _write_walk(cfg_name: str | Path, steps: int, seed: int, out: Path) -> Path:
    cfg = load_config(cfg_name)
    s0 = initial_state(cfg)
    with LogWriter(out, Header(config=cfg, seed=seed, source="walk", initial_digest=s0.digest(), extra={"steps": steps})) as w:
        for t, s in walk(cfg, steps, seed, s0):
            w.write(t, s)
    return out


def _first_walk_with(cfg_name: str, steps: int, out: Path, kinds: set[str]) -> Path:
    """The walk of the lowest seed whose effects include every kind in `kinds` (found by
    search, so that the test does not hang on one seed's walk)."""
    for seed in range(1000):
        _write_walk(cfg_name, steps, seed, out)
        if kinds <= set(_model_effects(out)[0]):
            return out
    raise AssertionError(f"no walk of {cfg_name} within 1000 seeds has effects {kinds}")


def first_sim_with(out: Path, ranks: int, tiers: str, kinds: set[str]) -> Path:
    """The `kvsm sim` log (thrash workload, small tiers, 60 requests) of the lowest seed
    whose effects include every kind in `kinds`."""
    for seed in range(50):
        l3 = {"l3_pages": 64} if "l3" in tiers else {}
        opts = SimOptions(workload="thrash", config="default", requests=60, ranks=ranks, l1_pages=16, l2_pages=64,
                          seed=seed, tiers=tiers, **l3)
        simulate(opts, out)
        if kinds <= set(_model_effects(out)[0]):
            return out
    raise AssertionError(f"no sim of {ranks} ranks and tiers {tiers} within 50 seeds has effects {kinds}")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("logs")
    (d / "four.toml").write_text(FOUR_RANKS)
    return {
        # the built-in two-rank config, at the first seed whose walk backs pages up
        "small": _first_walk_with("small", 100, d / "small.jsonl", {"store"}),
        # four ranks, two payload regions, many commits and load-backs
        "four": _write_walk(d / "four.toml", 300, 6, d / "four.jsonl"),
        # a simulated run: the scheduler's interleavings, timing and evictions
        "sim": first_sim_with(d / "sim.jsonl", 2, "l1,l2", {"store", "load", "poison_dev"}),
    }


def _model_effects(log: Path) -> tuple[Counter, list]:
    header, stream = read_log(log)
    s = initial_state(header.config)
    counts: Counter = Counter()
    steps = []
    for _, i, t, _ in stream:
        s = apply(s, t)
        counts.update(e.kind for e in s.effects)
        steps.append((i, t, s))
    return counts, steps


@pytest.mark.parametrize(
    "name,R,device,io",
    [
        pytest.param("small", 2, "cpu", "auto", id="small-cpu"),
        pytest.param("four", 4, "cpu", "auto", id="four-cpu"),
        # the staged path only adds a copy on the CPU; run it there so its logic is tested
        pytest.param("four", 4, "cpu", "staged", id="four-cpu-staged"),
        pytest.param("sim", 2, "cpu", "auto", id="sim-cpu"),
        # on CUDA, auto must map the slab (a silent fall-back to staged fails here)
        pytest.param("small", 2, "cuda", "auto", id="small-cuda-auto", marks=pytest.mark.gpu),
        pytest.param("small", 2, "cuda", "direct", id="small-cuda-direct", marks=pytest.mark.gpu),
        pytest.param("four", 4, "cuda", "direct", id="four-cuda-direct", marks=pytest.mark.gpu),
        pytest.param("four", 4, "cuda", "staged", id="four-cuda-staged", marks=pytest.mark.gpu),
        pytest.param("sim", 2, "cuda", "direct", id="sim-cuda-direct", marks=pytest.mark.gpu),
    ],
)
def test_every_rank_replays_the_log_and_every_page_checks_out(logs, name, R, device, io):
    out = gpu_replay(Options(str(logs[name]), device=device, io=io, **SMALL), ranks=R)
    counts, steps = _model_effects(logs[name])
    assert out["ok"], out["failures"]
    assert out["io"] == ("direct" if io == "auto" else io)
    assert out["ranks"] == R and out["transitions"] == len(steps)
    assert out["digest_mismatches"] == 0 and out["verify_failures"] == 0 and out["failures"] == []
    # each page operation of the model was executed exactly once, by its owner
    assert out["pages_loaded"] == counts["load"]
    assert out["pages_stored"] == counts["store"]
    assert out["pages_filled"] == counts["fill"]
    page = len(read_log(logs[name])[0].config.payloads) * SMALL["page_bytes"] * SMALL["layers"]
    assert out["bytes_verified"] == (counts["load"] + counts["store"]) * page > 0
    assert out["agreements"] == 1 + sum(sum(agreements(t.name, s.effects)) for _, t, s in steps)
    if name == "four":
        assert counts["load"] > 0 and counts["poison_host"] > 0, "the log exercises too little"


def _first_load_after_a_store(steps, R):
    """(store transition, storing rank, host page, load transition, loading rank, device
    page) for the first load-back in the log of a page some rank stored before."""
    stored = {}
    for i, _, s in steps:
        for e in s.effects:
            if isinstance(e, fx.Store):
                stored[e.host_page] = (i, e.rank)
            elif isinstance(e, fx.Load) and e.host_page in stored:
                return (*stored[e.host_page], e.host_page, i, lane_of(e.page, R), e.page)
    raise AssertionError("the log has no load-back of a stored page")


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_a_byte_corrupted_in_the_slab_is_named_by_transition_rank_and_page(logs, device):
    _, steps = _model_effects(logs["four"])
    t_store, r_store, host, t_load, r_load, page = _first_load_after_a_store(steps, 4)
    hooks = parse(f"corrupt_slab:{t_store}:{r_store}:{host}")
    out = gpu_replay(Options(str(logs["four"]), device=device, hooks=hooks, **SMALL))
    assert not out["ok"]
    assert out["injected"] == [{"corrupt_slab": t_store, "rank": r_store, "host_page": host, "byte": 1}]
    assert out["digest_mismatches"] == 0, "a bad byte is not a divergence of the model"
    [f] = out["failures"]
    assert (f["kind"], f["transition"], f["rank"], f["page"], f["host_page"]) == ("verify", t_load, r_load, page, host)
    assert f"transition {t_load} " in f["message"] and f"rank {r_load}:" in f["message"]
    assert "layer 0 byte 1" in f["message"]
    # the run stops at the next agreement rather than running on with bad bytes
    assert out["transitions"] < len(steps)


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_a_rank_given_a_wrong_transition_is_caught_by_the_digest_agreement(logs, device):
    _, steps = _model_effects(logs["four"])
    i, rank = 40, 2
    # the first agreement after transition i, decided by the log alone
    meets = {j: agreements(t.name, s.effects) for j, t, s in steps}
    expect = next(j for j in range(i, len(steps) + 1) if meets[j][1] or (j + 1 in meets and meets[j + 1][0]))
    out = gpu_replay(Options(str(logs["four"]), device=device, hooks=parse(f"tamper:{i}:{rank}"), **SMALL))
    assert not out["ok"]
    [inj] = out["injected"]
    assert inj["tamper"] == i and inj["rank"] == rank and inj["applied"] != inj["logged"]
    assert out["digest_mismatches"] == 1
    [f] = out["failures"]
    assert (f["kind"], f["rank"], f["transition"], f["first_divergence"]) == ("digest", rank, expect, i)
    assert f["min_digest"] != f["max_digest"] and f["rank_digest"] != f["log_digest"]
    assert f"rank {rank}'s state digest" in f["message"]


def test_ranks_that_all_disagree_with_the_log_are_all_named(logs, tmp_path):
    # A log whose digests were edited after one transition: every rank computes the
    # true digest, the same on every rank (MIN == MAX), and differs from the log.
    lines = logs["small"].read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    rec["digest"] = "0" * 32
    lines[3] = json.dumps(rec) + "\n"
    bad = tmp_path / "edited.jsonl"
    bad.write_text("".join(lines))
    out = gpu_replay(Options(str(bad), **SMALL))
    assert not out["ok"]
    assert out["digest_mismatches"] == 2
    assert {(f["kind"], f["rank"], f["first_divergence"]) for f in out["failures"]} == {("digest", 0, 3), ("digest", 1, 3)}
    assert all(f["min_digest"] == f["max_digest"] == f["rank_digest"] for f in out["failures"])


def _cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvsm.cli", "gpu", "replay", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_cli_prints_json_and_exits_by_outcome(logs):
    log = str(logs["small"])
    ok = _cli(log, "--device", "cpu", "--page-bytes", "128", "--layers", "1", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert {"ranks", "transitions", "pages_copied", "bytes_verified", "digest_mismatches", "gbps_l1_l2", "seconds"} <= set(out)
    assert out["ranks"] == 2 and out["digest_mismatches"] == 0 and out["bytes_verified"] > 0
    assert "NumPy" not in ok.stderr

    bad = _cli(log, "--device", "cpu", "--page-bytes", "128", "--layers", "1", env={"KVSM_GPU_INJECT": "tamper:5:1"})
    assert bad.returncode == 1
    assert bad.stdout.startswith("FAILED: ")
    assert "rank 1's state digest" in " ".join(bad.stderr.split())

    wrong = _cli(log, "--ranks", "4", "--device", "cpu")
    assert wrong.returncode == 2
    assert "R=2" in wrong.stderr and "--ranks is 4" in wrong.stderr
    assert _cli(log, "--page-bytes", "100").returncode == 2


def test_runs_as_one_rank_under_torchrun_variables(logs, tmp_path):
    # What torchrun does: start R processes with RANK, WORLD_SIZE, MASTER_ADDR/PORT set.
    from kvsm.gpu.launch import _free_port

    log = str(logs["small"])
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "kvsm.cli", "gpu", "replay", log, "--device", "cpu", "--page-bytes", "128", "--layers", "1", "--json", "--timeout", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"},
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    summary = json.loads(outs[0][0])
    assert summary["ok"] and summary["ranks"] == 2 and summary["bytes_verified"] > 0
    assert outs[1][0] == "", "only rank 0 prints the summary"


def test_generator_makes_distinct_deterministic_pages_and_names_poison():
    import torch

    from kvsm.gpu.generator import POISON_DEV, Generator, as_signed, describe

    g = Generator(payloads=2, layers=3, page_bytes=64, device=torch.device("cpu"))
    ids = torch.tensor([as_signed(c) for c in (1, 2, 0xFFFF_FFFF_FFFF_FFFF, 1 << 63)], dtype=torch.int64)
    a = g.words(ids, torch.empty(4, 2, 3, 8, dtype=torch.int64))
    b = g.words(ids, torch.empty(4, 2, 3, 8, dtype=torch.int64))
    assert torch.equal(a, b)
    # every word of every page, payload, layer and offset differs from every other
    assert len(set(a.flatten().tolist())) == a.numel()
    scratch = torch.empty(4, 2, 3, 8, dtype=torch.int64)
    assert not g.mismatches(a, ids, [], scratch).any()
    a[2, 1, 2, 7] ^= 1 << 40  # one flipped bit of byte 5 of the last word of page 2
    assert g.mismatches(a, ids, [], scratch).tolist() == [False, False, True, False]
    # a page the model says is freed must hold the poison, nothing else
    assert g.mismatches(a, ids, [0], scratch).tolist() == [True, False, True, False]
    a[0] = POISON_DEV
    assert g.mismatches(a, ids, [0], scratch).tolist() == [False, False, True, False]
    exp = g.expected(ids[2:3], [], torch.empty(1, 2, 3, 8, dtype=torch.int64))
    assert describe(a[2], exp[0], ("kv", "draft")).endswith("payload 'draft' layer 2 byte 61: " + f"0x{(int(a[2, 1, 2, 7]) >> 40) & 0xFF:02x}, expected 0x{(int(exp[0, 1, 2, 7]) >> 40) & 0xFF:02x}")
    freed = torch.full((2, 3, 8), POISON_DEV, dtype=torch.int64)
    assert "device poison: the page was read after it was freed" in describe(freed, exp[0], ("kv", "draft"))


def test_bus_time_is_the_union_of_the_ranks_copy_intervals():
    assert union_seconds([]) == 0
    assert union_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4)


@pytest.mark.parametrize("device", [CPU, CUDA])
@pytest.mark.parametrize("io", ["direct", "staged"])
def test_warm_up_leaves_every_page_as_it_was_and_reserve_allocates_before_the_copy(tmp_path, device, io):
    import torch

    from kvsm.gpu.generator import POISON_DEV, POISON_HOST
    from kvsm.gpu.memory import Shape, Slab, create_slab, new_pool
    from kvsm.gpu.transfer import Transfer

    dev = torch.device(device)
    shape = Shape(payloads=2, pages=8, layers=2, page_bytes=64)
    path, token = create_slab(str(tmp_path), shape)
    slab = Slab(path, token, shape, dev)
    try:
        slab.host.fill_(POISON_HOST)
        slab.host[1, 0] = 12345  # host page 0 of payload 1 holds bytes that must survive
        before = slab.host.clone()
        pool = new_pool(4, shape, dev)
        x = Transfer(pool, slab, io, dev)
        x.warm_up()
        assert torch.equal(slab.host, before), "the warm-up changed the slab"
        assert bool((pool == POISON_DEV).all()), "the warm-up left a device page unpoisoned"
        # after reserve(n), a store and a load of n pages allocate nothing
        x.reserve(fx.Store, 3)
        x.reserve(fx.Load, 3)
        held = {k: v.data_ptr() for k, v in {**x.scratch._bufs, **(x.staging._bufs if x.staging else {})}.items()}
        lidx, hidx = x.index([0, 1, 2]), x.index([5, 6, 7], host_side=True)
        x.store(lidx, hidx)
        x.load(lidx, hidx)
        x.finish()
        now = {k: v.data_ptr() for k, v in {**x.scratch._bufs, **(x.staging._bufs if x.staging else {})}.items()}
        assert now == held
    finally:
        slab.close()
        os.unlink(path)


def test_a_timeout_that_is_not_positive_is_refused_before_any_process_starts(logs):
    from kvsm.gpu.options import ReplayError, check_inputs

    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ReplayError, match="--timeout must be a positive number"):
            check_inputs(Options(str(logs["small"]), device="cpu", timeout_s=bad), None)
