"""Campaign throughput with one and with two local Dask workers, in the same run.

The same runs (seeds 0..N-1 of the default campaign choices, N = --runs, with
--requests requests each) go through a LocalCluster of one worker process, then of
two; each cluster is started and its workers warmed up (every module imported) before
the clock starts. Prints {"runs", "transitions", "cpus", "one": {"seconds",
"transitions_per_s"}, "two": {...}, "speedup"}, each with the CPU time its worker processes got
(`cores_used` = that over the wall time: on a machine shared with other jobs, less
than the workers asked for). Target: two workers at least 1.7x one on the 2-core
machine.

    python benchmarks/campaign.py [--json] [--runs 60] [--requests 16..64]

Pointing a campaign at an existing Dask cluster instead: start a scheduler and workers
wherever kvsm is installed, then give the scheduler's address (docs/campaign.md):

    dask scheduler --host 10.0.0.1 --port 8786
    dask worker tcp://10.0.0.1:8786 --nthreads 1      # on each machine, one per core
    kvsm campaign --scheduler tcp://10.0.0.1:8786 --runs 10000 -o campaign
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

from kvsm.campaign.execute import connect, run_all
from kvsm.campaign.run import Budget
from kvsm.campaign.spec import derive, make_space


def measure(workers: int, specs: list, budget: Budget) -> dict:
    session = connect(workers=workers)
    try:
        # warm-up: every worker imports kvsm and runs one tiny run before the clock starts
        warm = [replace(specs[0], seed=10_000_000 + i, requests=1) for i in range(2 * workers)]
        run_all(session, warm, budget, lambda rec: None)
        got: list[dict] = []
        cpu0 = _worker_cpu(session)
        t0 = time.perf_counter()
        run_all(session, specs, budget, got.append)
        seconds = time.perf_counter() - t0
        cpu = _worker_cpu(session) - cpu0
    finally:
        session.close()
    bad = [r for r in got if r["status"] != "ok"]
    assert not bad, bad[:1]
    transitions = sum(r["transitions"] for r in got)
    return {"seconds": round(seconds, 3), "transitions": transitions, "transitions_per_s": round(transitions / seconds, 1),
            "worker_cpu_s": round(cpu, 3), "cores_used": round(cpu / seconds, 2)}


def _worker_cpu(session) -> float:
    """CPU seconds the worker processes have used (what the machine gave them)."""
    import psutil  # a dependency of distributed

    pids = session.client.run(os.getpid)
    return sum(sum(psutil.Process(p).cpu_times()[:2]) for p in pids.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--requests", default="16..64")
    args = ap.parse_args()
    lo, _, hi = args.requests.partition("..")
    space = make_space(requests=(int(lo), int(hi or lo)))
    specs = [derive(space, s) for s in range(args.runs)]
    budget = Budget()
    one = measure(1, specs, budget)
    two = measure(2, specs, budget)
    assert one["transitions"] == two["transitions"]
    out = {
        "runs": args.runs,
        "transitions": one["transitions"],
        "cpus": os.cpu_count(),
        "one": {k: one[k] for k in ("seconds", "transitions_per_s", "worker_cpu_s", "cores_used")},
        "two": {k: two[k] for k in ("seconds", "transitions_per_s", "worker_cpu_s", "cores_used")},
        "speedup": round(two["transitions_per_s"] / one["transitions_per_s"], 2),
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
