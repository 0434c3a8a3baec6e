"""The GPU backend's L3 tier end to end: rank processes spill slab pages to their own disk
stores and reload them, every page checked against the content generator.

Logs: walks of two- and four-rank L3 configs (the lowest seeds whose walks spill, fail
to spill, reload, fail to reload, admit and load reloaded pages back, found by search),
a hand-built log where each rank loads back a page the other reloaded, and a four-rank
`kvsm sim` run with every tier. Every
replay runs on the CPU (as CI does) and again, marked `gpu`, on CUDA where there is one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvsm.gpu.disk import read_kept
from kvsm.gpu.hooks import parse
from kvsm.gpu.launch import Options
from kvsm.gpu.launch import replay as gpu_replay
from kvsm.gpu.plan import agreements
from kvsm.log import Header, LogWriter, read_log
from kvsm import effects as fx
from kvsm.state import initial_state
from kvsm.transitions import apply

from .test_gpu_plan import L3_FOUR_RANKS, L3_TWO_RANKS, first_l3_walk, reload_then_misaligned_load_back
from .test_gpu_replay import SMALL, first_sim_with

CPU = pytest.param("cpu", id="cpu")
CUDA = pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)


def _write(steps: list, cfg, out: Path, source: str, seed: int | None) -> Path:
    with LogWriter(out, Header(config=cfg, seed=seed, source=source, initial_digest=initial_state(cfg).digest(), extra={})) as w:
        for t, s in steps:
            w.write(t, s)
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("l3logs")
    out = {}
    for name, text in (("two", L3_TWO_RANKS), ("four", L3_FOUR_RANKS)):
        seed, steps = first_l3_walk(text, d)
        out[name] = _write(steps, steps[0][1].config, d / f"{name}.jsonl", "walk", seed)
    steps = reload_then_misaligned_load_back()
    out["cross"] = _write(steps, steps[0][1].config, d / "cross.jsonl", "hand", None)
    # a simulated four-rank run with every tier: spills, reloads, load-backs, host frees
    out["sim"] = first_sim_with(d / "sim.jsonl", 4, "l1,l2,l3", {"spill_write", "reload_read", "load", "poison_host"})
    return out


def _expected(log: Path) -> tuple[Counter, list, int]:
    """From the model alone: counts of every page operation (L3 ones included), the
    steps (index, transition, state before, state after) and the agreements a replay
    makes."""
    header, stream = read_log(log)
    s = initial_state(header.config)
    c: Counter = Counter()
    steps = []
    meets = 1  # the last one, at the end
    for _, i, t, _ in stream:
        prev, s = s, apply(s, t)
        steps.append((i, t, prev, s))
        meets += sum(agreements(t.name, s.effects))
        for e in s.effects:
            if isinstance(e, (fx.Fill, fx.Load, fx.Store)):
                c[e.kind] += 1
            elif isinstance(e, fx.SpillGather):
                c["gathered"] += len(e.pages)
            elif isinstance(e, fx.SpillWrite):
                c["staged_checked"] += len(e.hashes)
                if e.ok:
                    c["spilled"] += len(e.hashes)
                    # the store writes a hash it does not hold yet; the model's l3 says which
                    c["new_on_disk"] += sum((e.rank, h) not in prev.l3 for h in e.hashes)
            elif isinstance(e, fx.ReloadRead) and e.ok:
                c["reloaded"] += len(e.pages)
    return c, steps, meets


def _page_bytes(log: Path) -> int:
    return len(read_log(log)[0].config.payloads) * SMALL["page_bytes"] * SMALL["layers"]


@pytest.mark.parametrize(
    "name,R,device",
    [
        pytest.param("two", 2, "cpu", id="two-cpu"),
        pytest.param("four", 4, "cpu", id="four-cpu"),
        pytest.param("sim", 4, "cpu", id="sim-cpu"),
        pytest.param("two", 2, "cuda", id="two-cuda", marks=pytest.mark.gpu),
        pytest.param("four", 4, "cuda", id="four-cuda", marks=pytest.mark.gpu),
        pytest.param("cross", 2, "cuda", id="cross-cuda", marks=pytest.mark.gpu),
        pytest.param("sim", 4, "cuda", id="sim-cuda", marks=pytest.mark.gpu),
    ],
)
def test_every_rank_spills_and_reloads_its_pages_and_every_disk_page_checks_out(logs, tmp_path, name, R, device):
    out = gpu_replay(Options(str(logs[name]), device=device, disk_dir=str(tmp_path), **SMALL), ranks=R)
    c, steps, meets = _expected(logs[name])
    page = _page_bytes(logs[name])
    assert out["ok"], out["failures"]
    assert out["ranks"] == R and out["transitions"] == len(steps)
    assert out["digest_mismatches"] == 0 and out["verify_failures"] == 0 and out["failures"] == []
    # every L3 page operation of the model was executed exactly once, by the rank it names
    assert out["pages_gathered"] == c["gathered"] > 0
    assert out["pages_spilled"] == c["spilled"] > 0
    assert out["pages_reloaded"] == c["reloaded"] > 0
    assert out["bytes_to_disk"] == c["new_on_disk"] * page > 0
    assert out["bytes_from_disk"] == c["reloaded"] * page > 0
    assert (out["pages_loaded"], out["pages_stored"], out["pages_filled"]) == (c["load"], c["store"], c["fill"])
    # stored and loaded pages, staged copies when written, disk pages before they land
    assert out["bytes_verified"] == (c["load"] + c["store"] + c["staged_checked"] + c["reloaded"]) * page
    assert out["agreements"] == meets
    assert out["disk_dir"] is None and list(tmp_path.iterdir()) == [], "the disk stores are removed at the end"


def _first_reload_of_a_spilled_page(steps):
    """(transition that first wrote it, rank, page hash, reload transition, host page) of
    the first page read back from a disk in the log."""
    written = {}
    for i, _, _, s in steps:
        for e in s.effects:
            if isinstance(e, fx.SpillWrite) and e.ok:
                for h in e.hashes:
                    written.setdefault((e.rank, h), i)
            elif isinstance(e, fx.ReloadRead) and e.ok and e.pages:
                p = e.pages[0]
                return written[(e.rank, p.hash)], e.rank, p.hash, i, p.host
    raise AssertionError("the log reads nothing back from a disk")


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_a_byte_corrupted_on_disk_is_named_by_transition_rank_and_page_hash(logs, device):
    _, steps, _ = _expected(logs["two"])
    t_write, rank, h, t_read, host = _first_reload_of_a_spilled_page(steps)
    out = gpu_replay(Options(str(logs["two"]), device=device, hooks=parse(f"corrupt_disk:{t_write}:{rank}:{h}"), **SMALL))
    assert not out["ok"]
    assert out["injected"] == [{"corrupt_disk": t_write, "rank": rank, "hash": f"{h:016x}", "byte": 1}]
    assert out["digest_mismatches"] == 0, "a bad byte on disk is not a divergence of the model"
    [f] = out["failures"]
    assert (f["kind"], f["op"], f["transition"], f["rank"], f["hash"], f["host_page"]) == ("verify", "reload_read", t_read, rank, f"{h:016x}", host)
    assert f"transition {t_read} " in f["message"] and f"rank {rank}:" in f["message"]
    assert f"page hash 0x{h:016x} read from rank {rank}'s disk" in f["message"] and "layer 0 byte 1" in f["message"]
    assert out["pages_reloaded"] < _expected(logs["two"])[0]["reloaded"], "the bad page must not land in the slab"
    # every rank stops at the first agreement after the bad read, decided by the log
    meets = {i: agreements(t.name, s.effects) for i, t, _, s in steps}
    stop = next(j for j in range(t_read, len(steps) + 1) if meets[j][1] or (j + 1 in meets and meets[j + 1][0]))
    assert out["transitions"] == stop


def test_cli_keeps_the_disk_stores_where_asked_holding_exactly_the_models_l3_pages(logs, tmp_path):
    # the hand-built log: each rank loads back a page the other reloaded (on the CPU
    # this is its only replay; its CUDA variant is above)
    import json

    import torch

    from kvsm.gpu.generator import Generator, as_signed

    from .test_gpu_replay import _cli

    log = str(logs["cross"])
    ok = _cli(log, "--device", "cpu", "--page-bytes", "128", "--layers", "1", "--disk-dir", str(tmp_path), "--keep", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["ok"] and out["pages_loaded"] > 0
    assert {"pages_spilled", "pages_reloaded", "bytes_to_disk", "bytes_from_disk"} <= set(out)
    assert out["bytes_from_disk"] == out["pages_reloaded"] * 128 > 0
    run_dir = Path(out["disk_dir"])
    assert run_dir.parent == tmp_path and sorted(p.name for p in run_dir.iterdir()) == ["rank0", "rank1"]
    final = _expected(logs["cross"])[1][-1][3]
    gen = Generator(1, 1, 128, torch.device("cpu"))
    for r in range(2):
        kept = read_kept(str(run_dir / f"rank{r}"), 128)
        assert set(kept) == {h for (rank, h) in final.l3.keys() if rank == r} != set()
        ids = torch.tensor([as_signed(h) for h in kept], dtype=torch.int64)
        want = gen.words(ids, torch.empty((len(ids), 1, 1, 16), dtype=torch.int64))
        for k, data in enumerate(kept.values()):
            assert data == bytes(want[k].flatten().view(torch.uint8).tolist()), f"rank {r}'s record {k} is not its page"

    bad = _cli(log, "--device", "cpu", "--disk-dir", str(tmp_path / "absent"))
    assert bad.returncode == 2 and f"--disk-dir {tmp_path / 'absent'}: does not exist" in " ".join(bad.stderr.split())
