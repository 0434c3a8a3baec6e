"""Campaign throughput with one and with two local Dask workers, in the same run; with
--catch, the time a campaign takes to catch each injected defect.

The same runs (seeds 0..N-1 of the default campaign choices, N = --runs, with
--requests requests each) go through a LocalCluster of one worker process, then of
two; each cluster is started and its workers warmed up (every module imported) before
the clock starts. Prints {"runs", "transitions", "cpus", "one": {"seconds",
"transitions_per_s"}, "two": {...}, "speedup"}, each with the CPU time its worker processes got
(`cores_used` = that over the wall time: on a machine shared with other jobs, less
than the workers asked for). Target: two workers at least 1.7x one on the 2-core
machine.

    python benchmarks/campaign.py [--json] [--runs 60] [--requests 16..64]

Time to catch (`--catch`): for every injected defect of the registry, `kvsm.config.BUGS`
(the field defects too, and a defect added there later without a change here; `--bugs`
names a subset), `--trials`
campaigns of the default choices with that defect (the configs that accept it), each
on seeds of its own (trial t runs seeds t*100000, t*100000+1, ...), run one after the
other until a run fails, at most `--max-runs` runs; per defect, the median number of
runs and of CPU seconds (the process's, of the runs up to the catching one: checking
every invariant, the replay and the replicas included; shrinking not) and the
detector signatures that caught it. Trials go to `--procs` processes.

    python benchmarks/campaign.py --catch [--trials 5] [--max-runs 200] [--procs 2] [--bugs A,B] [--json]

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


def _catch_trial(job: tuple[str, int, int, tuple[int, int]]) -> dict:
    """One campaign with defect `bug`: its runs one by one until one fails."""
    from kvsm.campaign.run import execute
    from kvsm.campaign.spec import CONFIGS, SpaceError

    bug, trial, max_runs, requests = job
    configs = []
    for c in CONFIGS:
        try:
            make_space([c], bug=bug, requests=requests)
        except SpaceError:
            continue
        configs.append(c)
    space = make_space(configs, bug=bug, requests=requests)
    budget = Budget(seconds=60, transitions=200_000)
    cpu0 = time.process_time()
    for k in range(max_runs):
        spec = derive(space, trial * 100_000 + k)
        out = execute(spec, budget, collect=False)
        if out.failure is not None:
            return {"bug": bug, "trial": trial, "runs": k + 1, "cpu_s": time.process_time() - cpu0,
                    "signature": out.failure.signature, "seed": spec.seed}
    return {"bug": bug, "trial": trial, "runs": None, "cpu_s": time.process_time() - cpu0, "signature": None, "seed": None}


def catch(trials: int, max_runs: int, procs: int, requests: tuple[int, int], only: list[str] | None = None) -> dict:
    """Per defect (every one of the registry, `kvsm.config.BUGS`, or those of `only`):
    the median runs and CPU seconds to catch it over `trials` campaigns."""
    import multiprocessing
    from statistics import median

    from kvsm.config import BUGS

    bugs = [b for b in BUGS if b != "none" and (not only or b in only)]
    unknown = sorted(set(only or ()) - set(BUGS))
    if unknown:
        raise SystemExit(f"--bugs: no such defect {', '.join(unknown)} (one of {', '.join(b for b in BUGS if b != 'none')})")
    jobs = [(b, t, max_runs, requests) for b in bugs for t in range(trials)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        got = pool.map(_catch_trial, jobs, chunksize=1)
    out = {}
    for b in bugs:
        rs = [g for g in got if g["bug"] == b]
        caught = [g for g in rs if g["runs"] is not None]
        out[b] = {
            "caught": f"{len(caught)}/{len(rs)}",
            # a campaign that never caught it counts as more than max_runs
            "median_runs": median([g["runs"] if g["runs"] is not None else max_runs + 1 for g in rs]),
            "max_runs": max([g["runs"] if g["runs"] is not None else max_runs + 1 for g in rs]),
            "median_cpu_s": round(median(g["cpu_s"] for g in rs), 2),
            "signatures": sorted({g["signature"] for g in caught}),
        }
    return {"trials": trials, "max_runs": max_runs, "requests": list(requests), "defects": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--requests", default="16..64")
    ap.add_argument("--catch", action="store_true", help="time to catch each injected defect")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--max-runs", type=int, default=200)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--bugs", default="", help="with --catch: these defects only (comma-separated; default every one)")
    args = ap.parse_args()
    lo, _, hi = args.requests.partition("..")
    if args.catch:
        only = [b for b in args.bugs.split(",") if b]
        res = catch(args.trials, args.max_runs, args.procs, (8, 48) if args.requests == "16..64" else (int(lo), int(hi or lo)), only)
        if args.json:
            print(json.dumps(res))
        else:
            print(f"{'defect':22} {'caught':>7} {'median runs':>12} {'max runs':>9} {'median CPU s':>13}  signatures")
            for b, r in res["defects"].items():
                print(f"{b:22} {r['caught']:>7} {r['median_runs']:>12} {r['max_runs']:>9} {r['median_cpu_s']:>13}  {', '.join(r['signatures'])}")
        return 0 if all(r["max_runs"] <= args.max_runs for r in res["defects"].values()) else 1
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
