"""How long `kvsm show LOG --html FILE` takes on the log `kvsm run` writes, against
`kvsm replay LOG` of the same log measured in the same run.

The log is `kvsm run`'s simulation (`kvsm.sim.runner.main_job_options`: the first
--requests requests of the bundled Mooncake synthetic trace on 4 ranks, L1 256 and L2
2,048 pages, its fault mix; 300 requests give 6,590 steps), written once into a
temporary directory. Then `kvsm show LOG --html FILE` (every step's view, diff and
invariants, with the default `--check`) and `kvsm replay LOG` (parse, apply, verify
every digest) run --repeat times each, in turns, each in a process of its own, and the
fastest run of each counts: wall time and the child's CPU time (steadier on a shared
machine). `ratio` is show's CPU time over replay's.

Prints {"steps", "show_html_s", "show_html_cpu_s", "replay_s", "replay_cpu_s", "ratio",
"html_bytes", "target_s"}. Target (issue 41): `show_html_s` <= 10 s.

    python benchmarks/show_html.py [--json] [--requests 300] [--repeat 3]
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

from kvsm.sim import simulate
from kvsm.sim.runner import main_job_options

TARGET_S = 10.0


def timed(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of `python -m kvsm.cli ARGS` in a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvsm.cli", *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "KVSM_PROGRESS_SECONDS": "0"}, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--requests", type=int, default=300, help="requests of kvsm run's simulation (default 300: 6,590 steps)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command; the fastest counts")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvsm-show-html-") as d:
        log, page = Path(d) / "sim.jsonl", Path(d) / "sim.html"
        steps = simulate(main_job_options(0, a.requests, 4), log).summary["transitions"]
        show, replay = [], []
        for _ in range(a.repeat):
            show.append(timed(["show", str(log), "--html", str(page)]))
            replay.append(timed(["replay", str(log)]))
        html_bytes = page.stat().st_size
    best_show, best_replay = min(show, key=lambda x: x[1]), min(replay, key=lambda x: x[1])
    out = {
        "steps": steps,
        "show_html_s": round(best_show[0], 2),
        "show_html_cpu_s": round(best_show[1], 2),
        "replay_s": round(best_replay[0], 2),
        "replay_cpu_s": round(best_replay[1], 2),
        "ratio": round(best_show[1] / best_replay[1], 2),
        "html_bytes": html_bytes,
        "target_s": TARGET_S,
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"kvsm show --html of a {steps}-step log: {out['show_html_s']} s ({out['show_html_cpu_s']} s CPU), "
              f"kvsm replay {out['replay_s']} s ({out['replay_cpu_s']} s CPU): ratio {out['ratio']} (target {TARGET_S:g} s)")


if __name__ == "__main__":
    main()
