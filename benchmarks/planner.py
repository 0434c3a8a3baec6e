"""Owner-lane planner: the reference algorithm against the fast one on the incident the
seed's commit message describes.

cp=4; about 2000 evictable candidates whose pages fill a ~31507-page lane; a
7877-page deficit on one lane (the free-room watermark of 0.25 x 31507). The leaves
hang under 100 shared-prefix parents (half of them locked by running requests, half
evictable once their children go). Both planners must pick identical victims in
identical order; prints {"candidates", "victims", "reference_s", "fast_s", "speedup"}.
Target: speedup >= 50.

    python benchmarks/planner.py [--json] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace

import immutables

from kvsm.config import Config
from kvsm.planner import TreeView, plan, plan_reference
from kvsm.state import ROOT_ID, Node, lane_of
from kvsm.victims import dev_victim_key

R = 4
LANE_PAGES = 31507
DEFICIT = 7877
LEAVES = 2000
PARENTS = 100


def incident(seed: int) -> tuple[dict[int, Node], list[int], Config]:
    rng = random.Random(seed)
    cfg = replace(Config(), R=R, L1=LANE_PAGES)
    # leaf sizes: about 2000 leaves filling the lanes after the parents' pages
    parent_pages = 64
    budget = R * LANE_PAGES - PARENTS * parent_pages
    sizes = [rng.randint(20, 106) for _ in range(LEAVES)]
    scale = budget / sum(sizes)
    sizes = [max(1, int(s * scale)) for s in sizes]
    next_page = [0] * R
    clock = 0

    def pages(start_pos: int, n: int) -> tuple[int, ...]:
        out = []
        for k in range(start_pos, start_pos + n):
            lane = lane_of(k, R)
            out.append(lane + R * next_page[lane])
            next_page[lane] += 1
        return tuple(out)

    raw: dict[int, dict] = {}
    children: dict[int, list[int]] = {ROOT_ID: []}
    nid = 1
    parent_ids = []
    for p in range(PARENTS):
        clock += 1
        raw[nid] = dict(parent=ROOT_ID, dev=pages(0, parent_pages), lock=1 if p % 2 == 0 else 0,
                        hits=rng.randrange(4), touched=clock, host=nid if rng.random() < 0.5 else None)
        children[ROOT_ID].append(nid)
        children[nid] = []
        parent_ids.append(nid)
        nid += 1
    order = list(range(LEAVES))
    rng.shuffle(order)
    for i in order:
        parent = parent_ids[i % PARENTS]
        clock += 1
        raw[nid] = dict(parent=parent, dev=pages(parent_pages, sizes[i]), lock=0, hits=rng.randrange(4),
                        touched=clock, host=nid if rng.random() < 0.7 else None)
        children[parent].append(nid)
        children[nid] = []
        nid += 1
    nodes = {ROOT_ID: Node(ROOT_ID, -1, (), (), None, False, 0, 0, 0, 0,
                           immutables.Map({c: c for c in children[ROOT_ID]}), len(children[ROOT_ID]), ())}
    for i, r in raw.items():
        nodes[i] = Node(i, r["parent"], (i,), r["dev"], r["host"], False, r["lock"], 0, r["hits"], r["touched"],
                        immutables.Map({c: c for c in children[i]}), len(children[i]), ())
    candidates = [i for i, n in nodes.items() if dev_victim_key(n, False, cfg) is not None]
    return nodes, candidates, cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    nodes, candidates, cfg = incident(args.seed)
    deficits = [DEFICIT, 0, 0, 0]

    def view() -> TreeView:
        return TreeView(nodes.__getitem__, lambda i: False, cfg)

    t0 = time.perf_counter()
    ref = plan_reference(view(), deficits, candidates)
    reference_s = time.perf_counter() - t0
    fast_s = float("inf")
    for _ in range(3):  # best of three: the fast planner is short enough to be noisy
        t0 = time.perf_counter()
        fast = plan(view(), deficits, candidates)
        fast_s = min(fast_s, time.perf_counter() - t0)
    if fast != ref:
        print("planners disagree", file=sys.stderr)
        return 1
    out = {
        "candidates": len(candidates),
        "lane_pages": LANE_PAGES,
        "deficit": deficits,
        "victims": len(ref.victims),
        "reference_s": round(reference_s, 4),
        "fast_s": round(fast_s, 5),
        "speedup": round(reference_s / fast_s, 1),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>12}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
