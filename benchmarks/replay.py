"""Replay cost per transition as the tree grows: for each size (about 1k, 10k and 100k
nodes, or --sizes), a log whose first part grows the tree to that size through the
model's own transitions (`kvsm.grow`: about 2.8 transitions a node, minutes for a million
nodes where a walk would take hours) and whose last 2 * WINDOW transitions are an
ordinary walk over it, built alike for every size. Each log is replayed (parse, apply,
verify digest) in a fresh process, the sizes in turns; the CPU time per transition over
the last WINDOW transitions is the figure, the best of --repeat, and the largest tree's
figure is divided by the smallest's. The replays' peak memory is reported too, and
`warm_us`: the same window's lines replayed again from the state before it, right after
the replay (the best of 3 passes, each line parsed, applied and its digest verified),
when what it touches is still in the caches; `us` - `warm_us` is what reaching parts of the state not touched for a long
time costs (on a large tree, most of what a transition reads), `warm_ratio` the growth
left without it.

Prints {"sizes": [...], "nodes": [...], "per_transition_us": [...], "runs_us": [...],
"wall_us": [...], "warm_us": [...], "replay_rss_mb": [...], "build_s": [...],
"ratio_100k_over_1k": r, "warm_ratio": w, ...} (the ratio's key names the sizes).
Target (issue 26): ratio <= 1.5 for 1M over 1k (`--sizes 1000,1000000`).

With --check, measures instead what checking every invariant costs (`kvsm replay
--check`, `kvsm.checking`): a 4-rank L3 simulator log (the first --requests requests of
the bundled trace, `kvsm sim --tiers l1,l2,l3 --ranks 4`) replayed plainly and with
--check, each the best CPU time of --repeat (the kinds taken in turn), and prints {"transitions",
"agreement_points", "plain_s", "check_s", "ratio", "check_every_512_s",
"ratio_every_512", "full_checks", ...}; the last pair has the from-scratch check only
every 512 transitions and at the end, not at the agreement points. Target: ratio <= 3.

    python benchmarks/replay.py [--json] [--sizes 1000,10000,100000] [--window 4000] [--repeat 3] [--logs DIR]
    python benchmarks/replay.py --check [--json] [--requests 200] [--repeat 3]

--logs DIR keeps the logs (grown-NODES-WINDOW.jsonl, with a JSON sidecar of their
figures) and reuses those already there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kvsm.config import Config
from kvsm.grow import grow, plan_growth
from kvsm.log import Header, LogWriter, parse_transition
from kvsm.replay import collector_off, replay
from kvsm.state import ClusterState, initial_state
from kvsm.transitions import Transition, apply

WEIGHTS = {
    "Arrive": 1.0, "Match": 1.0, "Insert": 1.0, "Finish": 1.0, "Abort": 0.05, "Split": 0.3,
    "Reserve": 0.3, "WriteDone": 2.0, "Commit": 0.5, "Rollback": 0.02,
    "EvictDevice": 0.15, "EvictHost": 0.05, "LoadBack": 0.3,
}
WARM = 3  # passes of the window applied again from the state before it (`replay_once`)


def base_config(nodes: int) -> Config:
    """What every size shares: 4 ranks, 16-token pages, 8 live requests, the walk's weights;
    `kvsm.grow.plan_growth` sizes the pools and draws the walk's prompts."""
    return replace(Config(), name=f"replay-{nodes}", R=4, P=16, max_live=8, walk_weights=tuple(sorted(WEIGHTS.items())))


def build_log(nodes: int, walk_steps: int, log: Path) -> dict:
    """The log of a tree grown to `nodes` nodes (`kvsm.grow`) and a walk of `walk_steps`
    steps over it; returns its figures."""
    g = plan_growth(nodes, base_config(nodes))
    s0 = initial_state(g.config)
    final = s0
    t0 = time.perf_counter()
    with LogWriter(log, Header(config=g.config, seed=1, source="walk", initial_digest=s0.digest(), extra={})) as w:
        for t, s in grow(g, walk_steps, state=s0):
            w.write(t, s)
            final = s
    return {
        "grown_nodes": g.nodes, "nodes": len(final.nodes), "transitions": w.count,
        "growth_transitions": 4 * g.requests, "build_s": round(time.perf_counter() - t0), "build_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _child(*args: str) -> dict:
    """This script run with `args` in a fresh process (so that each replay starts from the
    same empty heap and its peak memory is its own), its JSON answer."""
    out = subprocess.run([sys.executable, __file__, *args], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout)


def walk_log(nodes: int, window: int, workdir: Path) -> dict:
    """The log for a tree of about `nodes` nodes in `workdir` (with a sidecar of its
    figures), or the one already there: the growth, then a walk of 2 * `window` steps
    (the first half brings the live requests, backups and evictions to their ordinary
    mix; the replay is measured over the second)."""
    log = workdir / f"grown-{nodes}-{window}.jsonl"
    info = workdir / f"grown-{nodes}-{window}.json"
    if log.exists() and info.exists():
        row = json.loads(info.read_text())
        print(f"  {nodes}: reusing {log} ({row['transitions']} transitions, {row['nodes']} nodes)", file=sys.stderr, flush=True)
        return {**row, "log": log}
    row = _child("--build-one", str(nodes), str(2 * window), str(log))
    info.write_text(json.dumps(row))
    print(f"  {nodes}: grown to {row['grown_nodes']} nodes in {row['growth_transitions']} transitions, "
          f"{row['transitions']} in all, {row['build_s']} s", file=sys.stderr, flush=True)
    return {**row, "log": log}


def replay_once(log: Path, total: int, window: int, warm: int = WARM) -> dict:
    """Microseconds per transition over the last `window` transitions of a replay of
    `log`, and the replay's peak memory. Then, from the state the replay reached before
    that window (kept), the window's lines are replayed again `warm` times (each parsed,
    applied and its digest verified, as the replay does) and the best is `warm_us`: the
    same work right after it was done, with what it touches still in the caches, so
    that `us` - `warm_us` is about what reaching memory the window had not touched for
    a long time costs."""
    stamps: dict[int, tuple[float, float]] = {}
    kept: list[ClusterState] = []
    start = total - window

    def on_state(n: int, t: Transition, state: ClusterState) -> None:
        if n == start or n == total:
            stamps[n] = (time.process_time(), time.perf_counter())
            if n == start:
                kept.append(state)

    t0 = time.process_time()
    res = replay(log, on_state=on_state)
    assert res.ok, res.to_json()
    replay_s = time.process_time() - t0
    (c0, w0), (c1, w1) = stamps[start], stamps[total]
    out = {"us": (c1 - c0) / window * 1e6, "wall_us": (w1 - w0) / window * 1e6, "replay_s": replay_s, "rss_mb": _peak_rss_mb()}
    if warm:
        lines = _last_lines(log, window)
        out["warm_us"] = min(_replay_lines(str(log), kept[0], lines) for _ in range(warm)) / window * 1e6
    return out


def _last_lines(log: Path, window: int) -> list[bytes]:
    """The log's last `window` transition lines (read from its end: the lines before
    the end line)."""
    size = log.stat().st_size
    chunk = 512 * (window + 2)
    while True:
        with open(log, "rb") as f:
            f.seek(max(0, size - chunk))
            lines = f.read().splitlines(keepends=True)
        if len(lines) > window + 2 or chunk >= size:
            return lines[-window - 1 : -1]
        chunk *= 2


def _replay_lines(path: str, state: ClusterState, lines: list[bytes]) -> float:
    """CPU seconds to replay transition `lines` from `state` as a replay does (with the
    collector off; each line decoded and parsed, applied, its digest verified)."""
    with collector_off():
        t0 = time.process_time()
        for raw in lines:
            _, t, digest = parse_transition(path, 0, raw.decode("utf-8"))
            state = apply(state, t)
            if state.digest() != digest:
                raise AssertionError(f"digest mismatch after {t} in a warm pass")
        return time.process_time() - t0


def measure_check(requests: int, repeat: int, workdir: Path) -> dict:
    """Plain replay against `replay --check` on a 4-rank L3 simulator log."""
    import kvsm.replay as replaying  # its replay builds the checker it imported (`kvsm.replay.Checker`)
    from kvsm.sim import SimOptions, simulate
    from kvsm.transitions import REGISTRY

    log = workdir / "sim-l3.jsonl"
    res = simulate(SimOptions(workload="synthetic", requests=requests, ranks=4, tiers="l1,l2,l3"), log)
    names = res.summary["transitions_by_name"]
    agreement = sum(n for name, n in names.items() if REGISTRY[name].agreement)
    del res
    gc.collect()

    fulls = []
    real_checker = replaying.Checker

    class Counting(real_checker):
        def __init__(self, state, **kw):
            super().__init__(state, **kw)
            fulls.append(self)

    def once(sparse: bool = False, **kw) -> tuple[float, int]:
        """CPU time of one replay, and its from-scratch checks (with `sparse`: only every
        512 transitions and at the end)."""
        replaying.Checker = (lambda state, **k: Counting(state, at_agreement=False, **k)) if sparse else Counting
        try:
            gc.collect()
            t0 = time.process_time()
            r = replay(log, **kw)
            dt = time.process_time() - t0
        finally:
            replaying.Checker = real_checker
        assert r.ok, r.to_json()
        return dt, (fulls[-1].stats.full if kw.get("check") else 0)

    # the three interleaved, so that a change in the machine's load falls on each alike
    runs = [(once(), once(check=True), once(sparse=True, check=True)) for _ in range(repeat)]
    plain = min(r[0][0] for r in runs)
    checked = min(r[1][0] for r in runs)
    full_checks = runs[-1][1][1]
    sparse = min(r[2][0] for r in runs)
    sparse_full = runs[-1][2][1]
    return {
        "log": f"kvsm sim --workload synthetic --requests {requests} --ranks 4 --tiers l1,l2,l3",
        "transitions": sum(names.values()),
        "agreement_points": agreement,
        "plain_s": round(plain, 3),
        "check_s": round(checked, 3),
        "ratio": round(checked / plain, 2),
        "full_checks": full_checks,
        "check_every_512_s": round(sparse, 3),
        "ratio_every_512": round(sparse / plain, 2),
        "full_checks_every_512": sparse_full,
    }


def _size(n: int) -> str:
    for unit, name in ((1000000, "M"), (1000, "k")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{name}"
    return str(n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--window", type=int, default=4000)
    ap.add_argument("--check", action="store_true", help="measure replay --check against plain replay instead")
    ap.add_argument("--requests", type=int, default=200, help="with --check: requests of the simulated log")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each replay, the best counts")
    ap.add_argument("--logs", help="keep the logs in this directory and reuse those already there")
    ap.add_argument("--build-one", nargs=3, metavar=("NODES", "STEPS", "LOG"), help=argparse.SUPPRESS)
    ap.add_argument("--replay-one", nargs=3, metavar=("LOG", "TRANSITIONS", "WINDOW"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as d:
            out = measure_check(args.requests, args.repeat, Path(d))
        print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
        return 0
    if args.build_one:
        nodes, steps, log = args.build_one
        print(json.dumps(build_log(int(nodes), int(steps), Path(log))))
        return 0
    if args.replay_one:
        log, total, window = args.replay_one
        print(json.dumps(replay_once(Path(log), int(total), int(window))))
        return 0
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(args.logs) if args.logs else Path(d)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = [walk_log(n, args.window, workdir) for n in sizes]
        # the sizes replayed in turns, so that a change in the machine's load falls on each alike
        runs = [[_child("--replay-one", str(r["log"]), str(r["transitions"]), str(args.window)) for r in rows] for _ in range(args.repeat)]
    best = [min(run[i]["us"] for run in runs) for i in range(len(sizes))]
    warm = [min(run[i]["warm_us"] for run in runs) for i in range(len(sizes))]
    out = {
        "sizes": sizes,
        "nodes": [r["nodes"] for r in rows],
        "grown_nodes": [r["grown_nodes"] for r in rows],
        "transitions": [r["transitions"] for r in rows],
        "build_s": [r["build_s"] for r in rows],
        "build_rss_mb": [r["build_rss_mb"] for r in rows],
        "replay_s": [round(min(run[i]["replay_s"] for run in runs), 1) for i in range(len(sizes))],
        "replay_rss_mb": [max(run[i]["rss_mb"] for run in runs) for i in range(len(sizes))],
        "per_transition_us": [round(b, 1) for b in best],
        "runs_us": [[round(x["us"], 1) for x in run] for run in runs],
        "wall_us": [round(min(run[i]["wall_us"] for run in runs), 1) for i in range(len(sizes))],
        "warm_us": [round(w, 1) for w in warm],
        f"ratio_{_size(sizes[-1])}_over_{_size(sizes[0])}": round(best[-1] / best[0], 2),
        "warm_ratio": round(warm[-1] / warm[0], 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
