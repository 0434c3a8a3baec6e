"""What TLC costs kvsm: model checking the shipped models and validating logs.

For `ci`, `deep` and `l3` (and `l3deep` with `--deep`), `kvsm check` with one TLC
worker: distinct states, states generated, depth, wall seconds (the JVM's start
included), the Java process's CPU seconds (user + system, all its threads) and peak
resident set (both from the kernel's accounting of that one process: wait4), distinct
states per wall second per worker and per CPU second. `l3deep` runs at most
`--deep-limit` seconds (it does not finish in CI time); its figures are then TLC's
last progress report.

For `kvsm validate`: walks of the default config (`--walk-steps`, each) and the log of
`kvsm sim --ranks 4 --tiers l1,l2` over the bundled trace (about 63,000 transitions),
with `--workers` TLC processes: transitions per wall second, wall seconds, the CPU
seconds of the TLC processes and of the Python side (replaying the log and writing the
trace modules), and the ratio of validate's wall time to a plain `kvsm replay` of the
same log measured in the same run (`over_replay`: a figure that moves less with the
machine than seconds do).

The machine may be shared: the load average is printed before and after, and the
ratio CPU / wall says how much of a core each run got; on an idle machine the wall time
of a one-worker check is about its CPU time.

    python benchmarks/tlc.py [--json] [--deep] [--deep-limit 1800] [--only check|validate]
        [--workers 2] [--walk-steps 1000,10000] [--no-sim]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsm.tla.check import check  # noqa: E402
from kvsm.tla.location import spec_dir  # noqa: E402
from kvsm.tla.runner import TLCTimeout  # noqa: E402
from kvsm.tla.validate import validate  # noqa: E402
from kvsm.replay import replay  # noqa: E402


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench_check(model: str, workers: int, limit: float | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        res = check(model, workers=workers, timeout=limit)
    except TLCTimeout as e:
        wall = time.perf_counter() - t0
        p = e.progress() or {}
        cpu, rss = e.usage if e.usage else (None, None)
        return {
            "model": model, "finished": False, "stopped_after_s": limit, **p, "seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1) if cpu else None, "peak_rss_mb": round(rss / 2**20) if rss else None,
            "distinct_per_s_per_worker": round(p.get("distinct_states", 0) / wall / workers, 1) if p else None,
        }
    t = res.tlc
    out = {
        "model": model, "finished": True, "ok": res.ok, "distinct_states": t.distinct_states,
        "states_generated": t.states_generated, "depth": t.depth, "seconds": round(t.seconds, 1),
        "cpu_seconds": round(t.cpu_seconds, 1) if t.cpu_seconds else None,
        "peak_rss_mb": round(t.peak_rss / 2**20) if t.peak_rss else None,
        "distinct_per_s_per_worker": round((t.distinct_states or 0) / t.seconds / workers, 1),
        "distinct_per_cpu_s": round((t.distinct_states or 0) / t.cpu_seconds, 1) if t.cpu_seconds else None,
        "cpu_over_wall": round(t.cpu_seconds / t.seconds, 2) if t.cpu_seconds else None,
    }
    return out


def _kvsm(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "kvsm.cli", *args], check=True, env=env, stdout=subprocess.DEVNULL)


def bench_validate(log: Path, label: str, workers: int) -> dict[str, Any]:
    r0 = time.perf_counter()
    rep = replay(log)
    replay_s = time.perf_counter() - r0
    if not rep.ok:
        raise SystemExit(f"{log}: the log does not replay: {rep}")
    c0 = time.process_time()
    res = validate(log, workers=workers)
    py_cpu = time.process_time() - c0
    tlc_cpu = sum(s.tlc.cpu_seconds or 0 for s in res.segments if s.tlc)
    return {
        "log": label, "ok": res.ok, "transitions": res.steps, "workers": workers, "segments": len(res.segments),
        "seconds": round(res.seconds, 1), "transitions_per_s": round(res.transitions_per_second, 1),
        "tlc_cpu_seconds": round(tlc_cpu, 1), "python_cpu_seconds": round(py_cpu, 1),
        "transitions_per_cpu_s": round(res.steps / (tlc_cpu + py_cpu), 1) if tlc_cpu + py_cpu else None,
        "segment_cpu_seconds": [s["cpu_seconds"] for s in res.to_json()["segments"]],
        "peak_rss_mb": max((s["peak_rss_mb"] or 0) for s in res.to_json()["segments"]),
        "replay_seconds": round(replay_s, 2), "over_replay": round(res.seconds / replay_s, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--deep", action="store_true", help="also l3deep, for at most --deep-limit seconds")
    ap.add_argument("--deep-limit", type=float, default=1800.0)
    ap.add_argument("--only", choices=("check", "validate"))
    ap.add_argument("--workers", type=int, default=2, help="TLC processes for validate")
    ap.add_argument("--walk-steps", default="1000,10000")
    ap.add_argument("--no-sim", action="store_true", help="skip the whole simulator run's log")
    a = ap.parse_args()
    out: dict[str, Any] = {"load_before": _load(), "cpus": os.cpu_count()}
    if a.only in (None, "check"):
        models = ["ci", "deep", "l3"] + ([str(spec_dir() / "MC_l3deep.cfg")] if a.deep else [])
        out["check"] = []
        for m in models:
            r = bench_check(m, 1, a.deep_limit if "l3deep" in m else None)
            out["check"].append(r)
            if not a.json:
                print(json.dumps(r), flush=True)
    if a.only in (None, "validate"):
        out["validate"] = []
        with tempfile.TemporaryDirectory(prefix="kvsm-bench-tlc-") as tmp:
            logs = []
            for n in (int(x) for x in a.walk_steps.split(",") if x):
                p = Path(tmp) / f"walk-default-{n}.jsonl"
                _kvsm("walk", "--config", "default", "--steps", str(n), "--seed", "0", "-o", str(p))
                logs.append((p, f"walk default {n} steps"))
            if not a.no_sim:
                p = Path(tmp) / "sim.jsonl"
                _kvsm("sim", "--ranks", "4", "--tiers", "l1,l2", "-o", str(p))
                logs.append((p, "sim --ranks 4 --tiers l1,l2 (bundled trace)"))
            for p, label in logs:
                r = bench_validate(p, label, a.workers)
                out["validate"].append(r)
                if not a.json:
                    print(json.dumps(r), flush=True)
    out["load_after"] = _load()
    if a.json:
        print(json.dumps(out))
    else:
        print(json.dumps({"load_before": out["load_before"], "load_after": out["load_after"], "cpus": out["cpus"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
