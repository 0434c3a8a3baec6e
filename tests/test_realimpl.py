"""SGLang 0.5.20's real HiRadixCache on the CPU, held against the model
(kvsm/realimpl, docs/realimpl.md). Skipped where SGLang is not installed; `.ci/run`
installs it in a second environment (`kvsm realimpl install sglang`) and runs this file
there. SGLang is imported once per session (about 12 s), by the first test that runs
the real cache."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvsm.realimpl import cpu

if not cpu.available():
    pytest.skip("SGLang 0.5.20 is not installed here (kvsm realimpl install sglang)", allow_module_level=True)

from kvsm.config import load_config  # noqa: E402
from kvsm.replay import replay  # noqa: E402
from kvsm.realimpl import sglang as adapter  # noqa: E402
from kvsm.sim.workload import load_workload  # noqa: E402

CFG = load_config("sglang-upstream")
# a host pool large enough that the first 60 synthetic requests evict no host leaf, with load-backs
BIG = dataclasses.replace(CFG, L2=4096)


def _requests(name: str, n: int) -> list[tuple[int, ...]]:
    return [r.hash_ids for r in load_workload(name, requests=n, device_pages=CFG.L1, config=CFG).requests]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[adapter.Result, Path]:
    res = adapter.run(BIG, _requests("synthetic", 60))
    path = adapter.write_log(res, tmp_path_factory.mktemp("ri") / "a.jsonl", {"workload": "synthetic"})
    return res, path


def test_synthetic_runs_in_lockstep_with_load_backs_evictions_and_commits(synthetic_run) -> None:
    res, _ = synthetic_run
    assert res.divergences == []
    assert res.requests == 60
    names = {t.name for t, _ in res.transitions}
    # the real cache evicted from the device, committed backups and loaded a host hit back
    assert {"EvictDevice", "Reserve", "Commit", "LoadBack", "LoadDone"} <= names


def test_the_log_replays_with_every_invariant(synthetic_run) -> None:
    _, path = synthetic_run
    r = replay(path, check=True)
    assert r.ok, (r.first_mismatch, r.violations)
    assert r.transitions == len(synthetic_run[0].transitions)


def test_two_runs_write_the_same_log_byte_for_byte(synthetic_run, tmp_path: Path) -> None:
    res, path = synthetic_run
    again = adapter.run(BIG, _requests("synthetic", 60))
    other = adapter.write_log(again, tmp_path / "b.jsonl", {"workload": "synthetic"})
    assert other.read_bytes() == path.read_bytes()


def test_a_wrong_projection_is_a_divergence_naming_step_event_and_field() -> None:
    calls = {"n": 0}

    def tamper(real: adapter.RealCache) -> None:
        honest = real.projection

        def projection():  # one lock count off, from the 20th comparison on
            p = honest()
            calls["n"] += 1
            if calls["n"] >= 20 and p:
                k = min(p)
                on, backed, pending, lock = p[k]
                p[k] = (on, backed, pending, lock + 1)
            return p

        real.projection = projection

    res = adapter.run(BIG, _requests("synthetic", 10), tamper=tamper)
    assert len(res.divergences) == 1
    d = res.divergences[0]
    assert d.field.startswith("lock of node ") and d.real == d.model + 1
    assert d.step == len(res.transitions) and d.request is not None and d.event and d.kind == "untriaged"


def test_a_real_eviction_order_the_model_does_not_have_is_refused() -> None:
    """Most recently used first: the first real device eviction is not the model's LRU
    victim, and the model refuses the EvictDevice it implies."""

    def mru(real: adapter.RealCache) -> None:
        from sglang.srt.mem_cache.evict_policy import MRUStrategy

        real.cache.eviction_strategy = MRUStrategy()

    res = adapter.run(BIG, _requests("synthetic", 30), tamper=mru)
    assert len(res.divergences) == 1
    d = res.divergences[0]
    assert (d.field == "guard" and d.real.startswith("EvictDevice")) or d.field == "next device victim", d
    assert any(e.startswith("_evict_") for e in d.events) or d.field == "next device victim"


def test_host_objects_as_runs_meet_the_host_pools_fragmentation_and_page_sets_do_not() -> None:
    """docs/realimpl.md, divergence `host-contiguous`: with a 512-page host pool a backup
    the real pool places in scattered free slots needs a contiguous run in the model
    under `l2_alloc = "run"`, whose evict-to-fit then takes a host leaf the real cache
    keeps; under `"pages"` (the config's) the model places it as SGLang does."""
    reqs = _requests("synthetic", 60)
    res = adapter.run(dataclasses.replace(CFG, l2_alloc="run"), reqs)
    assert len(res.divergences) == 1
    d = res.divergences[0]
    assert d.event == "insert" and d.field.startswith("node ") and (d.real, d.model) == ("present", "absent")
    assert d.kind == "host-contiguous"
    assert any(e.startswith("write_backup(") for e in d.events)
    # the model's own Reserve took it: its last transition is the Reserve of that backup
    assert res.transitions[-1][0].name == "Reserve"
    # before it, the real host evictions (backups making room) were the model's host
    # victims, in SGLang's order
    assert sum(t.name == "EvictHost" for t, _ in res.transitions) >= 5
    paged = adapter.run(CFG, reqs)
    assert CFG.l2_alloc == "pages" and paged.divergences == [] and paged.requests == 60
    assert sum(t.name == "EvictHost" for t, _ in paged.transitions) >= 5


@pytest.mark.tlc
def test_the_command_writes_a_log_that_replays_and_tlc_validates(tmp_path: Path) -> None:
    out = tmp_path / "sglang.jsonl"
    env = {**os.environ, "KVSM_PROGRESS_SECONDS": "0"}
    p = subprocess.run([sys.executable, "-m", "kvsm.cli", "realimpl", "sglang", "-n", "25", "-o", str(out), "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["requests"] == 25 and s["transitions"] > 100 and s["divergences"] == []
    assert s["replay"]["ok"] and s["validation"]["ok"] and s["validation"]["steps"] == s["transitions"]
    header = json.loads(out.read_text().splitlines()[0])
    assert header["source"] == "realimpl" and header["config"]["R"] == 1
    # the same run in this process writes the same bytes: nothing of a process (object
    # ids, set order, wall time) reaches the log
    w = load_workload("synthetic", requests=25, device_pages=CFG.L1, config=CFG)
    here = adapter.write_log(adapter.run(CFG, [r.hash_ids for r in w.requests]), tmp_path / "here.jsonl", {"workload": w.info()})
    assert here.read_bytes() == out.read_bytes()
