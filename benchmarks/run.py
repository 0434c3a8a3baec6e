"""How long `kvsm run` (README's first command) takes here, step by step.

Runs `python -m kvsm.cli run --json` as its own process (so the time counts its start-up,
the imports, the GPU replay's rank processes and TLC's JVM, as a user waits for them)
and prints each step's wall time as the run measured it, the total wall time, the CPU
time of the run and every process it started, and the load average before and after:
on a shared machine the wall times grow with the load while the CPU time stays about
the same, so a busy machine's figures say little about a quiet one's without it. The
target (README) is 60 s on a quiet 2-core machine.

    python benchmarks/run.py [--json] [-o DIR] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 60.0
ROOT = Path(__file__).resolve().parent.parent


def measure(outdir: Path, requests: int) -> dict:
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    r = subprocess.run([sys.executable, "-m", "kvsm.cli", "run", "--json", "-o", str(outdir), "--requests", str(requests)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"kvsm run failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "steps": [{"step": s["step"], "seconds": None if s["time"] == "-" else float(s["time"].rstrip("s"))} for s in out["steps"]],
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "cpus": os.cpu_count(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "target_seconds": TARGET_SECONDS,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("-o", "--output", dest="outdir", type=Path, default=None, help="kvsm run -o: where the run writes (default: a temporary directory)")
    ap.add_argument("--requests", type=int, default=300, help="kvsm run --requests (default 300, its own)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvsm-bench-run-") as tmp:
        res = measure(a.outdir or Path(tmp), a.requests)
    if a.json:
        print(json.dumps(res))
        return
    for s in res["steps"]:
        took = "     -" if s["seconds"] is None else f"{s['seconds']:6.1f} s"
        print(f"{s['step']:<32} {took}")
    print(f"{'total (wall, with start-up)':<32} {res['wall_seconds']:6.1f} s")
    print(f"{'CPU, every process':<32} {res['cpu_seconds']:6.1f} s on {res['cpus']} CPUs")
    print(f"load average before / after: {res['load_before']} / {res['load_after']} (target: {TARGET_SECONDS:.0f} s on a quiet 2-core machine)")


if __name__ == "__main__":
    main()
