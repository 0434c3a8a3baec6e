"""How much slower the simulator's single-tier reference mode is than a bare block LRU.

Both run over the whole bundled Mooncake synthetic trace in this one process, at the
same capacity, after the trace is parsed (parsing is not timed for either):

- sim: `kvsm sim --tiers l1 --ranks 1 --page-tokens 1 --eviction lru --l1-pages CAP`
  (the serial schedule through the model: Arrive, Match, Insert, Finish per request,
  no log unless --log), timed around the simulator's loop;
- lru: an `OrderedDict` of hash ids, LRU order, CAP entries; a request's hit is its
  longest prefix of hash ids present but for its last id (a match never covers a
  prompt's last page), then every id is touched or inserted.

Each is run --repeat times and the fastest run counts; wall and CPU time are both
printed (CPU time is steadier when the machine is shared). Both
compute the block hit rate, printed beside the times: in this trace the two agree
within 0.2% (exactly at 1,953 and 97,656 pages; the model also stamps the unmatched
part of the node a match ends inside, as the reference does, which a block LRU does
not), a check that the comparison is like for like. With --full, also time one
full run (`--tiers l1,l2 --ranks 4`, default config, timed schedule) for README, and
with --full-l3 one with the disk tier (`--tiers l1,l2,l3 --ranks 4`, several minutes).

    python benchmarks/sim.py [--json] [--capacity 19531] [--repeat 3] [--log] [--full] [--full-l3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from kvsm.log import Header, LogWriter
from kvsm.sim import SimOptions, load_workload, simulate
from kvsm.sim.options import prepare
from kvsm.sim.scheduler import Simulation


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def block_lru(traces: list[tuple[int, ...]], capacity: int) -> tuple[float, float, float]:
    w0, c0 = _clocks()
    cache: OrderedDict[int, bool] = OrderedDict()
    hit = total = 0
    for ids in traces:
        k = 0
        for x in ids[:-1]:
            if x not in cache:
                break
            k += 1
        hit += k
        total += len(ids)
        for x in ids:
            if x in cache:
                cache.move_to_end(x)
            else:
                cache[x] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
    w1, c1 = _clocks()
    return w1 - w0, c1 - c0, hit / total


def reference_sim(capacity: int, log: bool) -> tuple[float, float, float]:
    """The simulator's loop alone, as `simulate` runs it (workload parsed beforehand)."""
    opts = SimOptions(workload="synthetic", tiers="l1", ranks=1, page_tokens=1, eviction="lru", l1_pages=capacity)
    sim = Simulation(prepare(opts), opts.timing, opts.seed)
    with tempfile.TemporaryDirectory() as d:
        if log:
            header = Header(config=sim.cfg, seed=opts.seed, source="sim", initial_digest=sim.cluster.state.digest(), extra={})
            with LogWriter(Path(d) / "ref.jsonl", header) as w:
                sim.writer = w
                w0, c0 = _clocks()
                sim.run()
                w1, c1 = _clocks()
        else:
            w0, c0 = _clocks()
            sim.run()
            w1, c1 = _clocks()
    m = sim.metrics
    return w1 - w0, c1 - c0, (m.pages_hit_l1 + m.pages_hit_l2) / m.pages_total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--capacity", type=int, default=19531, help="pages (512-token blocks); 19531 = 10M tokens")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--log", action="store_true", help="the simulator also writes its transition log")
    ap.add_argument("--full", action="store_true", help="also time a full --tiers l1,l2 --ranks 4 run of the trace")
    ap.add_argument("--full-l3", action="store_true", help="also time a full --tiers l1,l2,l3 --ranks 4 run of the trace")
    a = ap.parse_args()
    traces = [r.hash_ids for r in load_workload("synthetic").requests]
    sim_runs = [reference_sim(a.capacity, a.log) for _ in range(a.repeat)]
    lru_runs = [block_lru(traces, a.capacity) for _ in range(a.repeat)]
    sim_s, lru_s = min(r[0] for r in sim_runs), min(r[0] for r in lru_runs)
    sim_cpu, lru_cpu = min(r[1] for r in sim_runs), min(r[1] for r in lru_runs)
    out = {
        "sim_s": round(sim_s, 4),
        "lru_s": round(lru_s, 4),
        "ratio": round(sim_s / lru_s, 1),
        # CPU time of this process: steadier than wall time on a shared machine
        "sim_cpu_s": round(sim_cpu, 4),
        "lru_cpu_s": round(lru_cpu, 4),
        "ratio_cpu": round(sim_cpu / lru_cpu, 1),
        "capacity_pages": a.capacity,
        "hit_rate_sim": round(sim_runs[0][2], 6),
        "hit_rate_lru": round(lru_runs[0][2], 6),
        "requests": len(traces),
        "log": a.log,
    }
    if a.full:
        t0 = time.perf_counter()
        r = simulate(SimOptions(workload="synthetic", tiers="l1,l2", ranks=4))
        out["full_run_s"] = round(time.perf_counter() - t0, 2)
        out["full_run_transitions"] = r.summary["transitions"]
        out["full_run_hit_rate"] = r.summary["hit_rate_blocks"]
    if a.full_l3:
        t0 = time.perf_counter()
        c0 = time.process_time()
        s = simulate(SimOptions(workload="synthetic", tiers="l1,l2,l3", ranks=4)).summary
        out["full_l3_run_s"] = round(time.perf_counter() - t0, 2)
        out["full_l3_run_cpu_s"] = round(time.process_time() - c0, 2)
        out["full_l3_run_transitions"] = s["transitions"]
        out["full_l3_run_hit_rate"] = s["hit_rate_blocks"]
        out["full_l3_run_hits_per_tier"] = {t: s[f"pages_hit_{t}"] for t in ("l1", "l2", "l3")}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
