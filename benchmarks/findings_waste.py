"""The wastes of the performance findings (docs/findings.md: 2', 3 and 4), measured by
the simulator: each finding's knob at the reference's value against its fix, every
other finding's knob fixed, on the same workloads, seeds and sizes, per 1,000 requests.

A waste is what the reference's path costs a cache that stays correct: pages
recomputed (prefill the cache could have served), disk pages written and read, and L2
pages held by content no match can reach. The baseline is the fixed run of the same
workload, seed and size, measured in the same invocation; the script prints each
finding's difference (reference minus fixed) and the ratio of recomputed pages.

Sizes: `reference-default` (512 device pages a lane, 4,096 host pages, 16,384 disk pages
a rank) and a small one (64 / 512 / 2,048) under which the device and the host evict
often, where the findings' paths are taken more.

    python benchmarks/findings_waste.py [--json] [--requests N] [--seeds 0,1,2] [--only 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from kvsm.sim.options import SimOptions
from kvsm.sim.runner import simulate

# finding -> (knob, the reference's reading, the fixed reading)
FINDINGS = {
    "2'": ("own_disk_durable", "shared", "fixed"),
    "3": ("unbacked_evict", "reference", "fixed"),
    "4": ("durable_split", "reference", "fixed"),
}
FIXED = (("commit_call", "fixed"), ("own_disk_durable", "fixed"), ("unbacked_evict", "fixed"), ("durable_split", "fixed"))
WORKLOADS = ("synthetic", "multi-turn", "system-prompts", "long-doc")
SIZES = {"default": (None, None, None), "small": (64, 512, 2048)}
# per 1,000 requests, reference minus fixed
MEASURES = ("pages_recomputed", "disk_pages_written", "disk_pages_read", "pages_hit_l3", "l2_pages_unreachable")
HELD = "l2_pages_unreachable_mean_x1000"  # a run's mean, summed over runs: reported as a mean


SAMPLE_EVERY = 200  # transitions between two samples of the unreachable L2 pages


def unreachable_l2_pages(s) -> int:
    """Pages of the committed host objects that no match can reach: owned by no node, or
    by a node the root does not reach (an orphan, under a husk)."""
    nodes = s.nodes
    reached, level = set(), [0]
    while level:
        reached.update(level)
        level = [c for nid in level for c in nodes[nid].children.values()]
    return sum(o.length for o in s.objects.values() if o.committed and o.owner not in reached)


def measure(workload: str, size: str, seed: int, requests: int, knob: str, value: str) -> dict[str, int]:
    settings = tuple((k, value if k == knob else v) for k, v in FIXED)
    l1, l2, l3 = SIZES[size]
    opts = SimOptions(
        workload=workload, config="reference-default", seed=seed, requests=requests, tiers="l1,l2,l3",
        l1_pages=l1, l2_pages=l2, l3_pages=l3, settings=settings,
    )
    samples: list[int] = []
    seen = 0

    def sample(t, state):
        nonlocal seen
        seen += 1
        if seen % SAMPLE_EVERY == 0:
            samples.append(unreachable_l2_pages(state))

    res = simulate(opts, on_transition=sample)
    d = res.summary
    moved = d["pages_moved"]
    return {
        "requests": d["requests"],
        "pages_recomputed": d["pages_recomputed"],
        "disk_pages_written": moved["l2_to_l3"],
        "disk_pages_read": moved["l3_to_l2"],
        "pages_hit_l3": d["pages_hit_l3"],
        "l2_pages_unreachable": unreachable_l2_pages(res.final_state),
        # the mean over the run, sampled (x 1000 to keep integer sums exact)
        "l2_pages_unreachable_mean_x1000": round(1000 * sum(samples) / len(samples)) if samples else 0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--only", choices=list(FINDINGS), action="append", help="measure this finding only (repeatable)")
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    out: dict[str, dict] = {}
    for finding, (knob, ref, fix) in FINDINGS.items():
        if args.only and finding not in args.only:
            continue
        tot = {v: dict.fromkeys(MEASURES + (HELD, "requests"), 0) for v in ("reference", "fixed")}
        runs_differ = 0
        differ: list[str] = []
        runs_of = [(w, z, x) for w in WORKLOADS for z in SIZES for x in seeds]
        for workload in WORKLOADS:
            for size in SIZES:
                for seed in seeds:
                    a = measure(workload, size, seed, args.requests, knob, ref)
                    b = measure(workload, size, seed, args.requests, knob, fix)
                    if a != b:
                        runs_differ += 1
                        differ.append(f"{workload}/{size}/seed {seed}")
                    for v, m in (("reference", a), ("fixed", b)):
                        for k in tot[v]:
                            tot[v][k] += m[k]
        per_k = {
            k: round(1000 * (tot["reference"][k] - tot["fixed"][k]) / tot["fixed"]["requests"], 2) for k in MEASURES
        }
        # the unreachable L2 pages held, on average over a run (the mean of the runs' means)
        held = {v: round(tot[v][HELD] / 1000 / len(runs_of), 3) for v in ("reference", "fixed")}
        fixed_rec = tot["fixed"]["pages_recomputed"]
        out[finding] = {
            "knob": knob,
            "reference": ref,
            "fixed": fix,
            "pairs": len(WORKLOADS) * len(SIZES) * len(seeds),
            "pairs_that_differ": runs_differ,
            "differ": differ,
            "per_1000_requests": per_k,
            "recomputed_ratio": round(tot["reference"]["pages_recomputed"] / fixed_rec, 4) if fixed_rec else None,
            "l2_pages_unreachable_held_mean": held,
            "totals": tot,
        }
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        for f, r in out.items():
            p = r["per_1000_requests"]
            print(
                f"finding {f} ({r['knob']} {r['reference']} vs {r['fixed']}): {r['pairs_that_differ']}/{r['pairs']} "
                f"runs differ; per 1,000 requests: recomputed {p['pages_recomputed']:+}, disk written "
                f"{p['disk_pages_written']:+}, read {p['disk_pages_read']:+}, L3 hits {p['pages_hit_l3']:+}, "
                f"unreachable L2 pages at the end {p['l2_pages_unreachable']:+}, held on average "
                f"{r['l2_pages_unreachable_held_mean']['reference']} (fixed: {r['l2_pages_unreachable_held_mean']['fixed']}); "
                f"recomputed ratio {r['recomputed_ratio']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
