"""`kvsm validate` at the speed of replay: a plain `kvsm replay` of a log and `kvsm
validate` of it, side by side, and many short logs in one `validate_many` call against
one `validate` call each.

The log (default: `kvsm sim --ranks 4 --tiers l1,l2` over the bundled trace, 62,988
transitions) is replayed and validated `--repeat` times, alternating, each as the
command a user runs (a fresh Python process: its start counts on both sides). Printed:
validate's transitions per second, the replay's and validate's wall seconds (the median
of the repeats), the ratio validate / replay, which moves less with the machine than
seconds do, and TLC's CPU seconds and the model's seconds of each validate; the
issue's target is at least 5,000 transitions a second and at most 3.

Many logs: `--many` campaign-like logs (`kvsm sim` of `--many-requests` requests, one
seed each, default config) validated by one `validate_many` call, and by one
`validate` call each, one after another: the wall seconds of both and the speedup.

The machine may be shared (other TLC processes): the load average is printed before
and after; measure when it is low.

    python benchmarks/validate_speed.py [--log LOG] [--repeat 3] [--workers 2]
        [--many 40] [--many-requests 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsm.tla.validate import validate, validate_many  # noqa: E402


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _kvsm(*args: str, check: bool = True, out: list[str] | None = None) -> float:
    """Wall seconds of `kvsm ARGS` in a fresh Python process (its stdout appended to
    `out`, if given)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "kvsm.cli", *args], env=env,
                       stdout=subprocess.PIPE if out is not None else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"kvsm {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    if out is not None:
        out.append(r.stdout)
    return time.perf_counter() - t0


def _transitions(log: Path) -> int:
    with open(log) as f:
        return sum(1 for line in f if line.startswith('{"i":'))


def side_by_side(log: Path, repeat: int, workers: int) -> dict[str, Any]:
    replay_s, validate_s, tlc_cpu, model_s = [], [], [], []
    for _ in range(repeat):
        replay_s.append(_kvsm("replay", str(log)))
        out: list[str] = []
        validate_s.append(_kvsm("validate", str(log), "--workers", str(workers), "--json", out=out))
        res = json.loads(out[0])
        if not res["ok"]:
            raise SystemExit(f"kvsm validate rejected {log}: {res['first_rejected'] or res['model_rejected'] or res['digest_mismatch']}")
        tlc_cpu.append(sum(s["cpu_seconds"] or 0.0 for s in res["segments"]))
        model_s.append(res["model_seconds"])
    n = _transitions(log)
    r, v = statistics.median(replay_s), statistics.median(validate_s)
    return {
        "log": str(log), "transitions": n, "workers": workers, "repeat": repeat,
        "replay_seconds": round(r, 2), "validate_seconds": round(v, 2),
        "validate_transitions_per_s": round(n / v, 1), "validate_over_replay": round(v / r, 2),
        "replay_runs": [round(x, 2) for x in replay_s], "validate_runs": [round(x, 2) for x in validate_s],
        # TLC's CPU seconds (all its processes) and the model's replay and writing, per run:
        # CPU seconds move less than wall seconds on a shared machine
        "tlc_cpu_seconds": [round(x, 1) for x in tlc_cpu], "model_seconds": model_s,
        "meets_target": n / v >= 5000 and v / r <= 3,
    }


def many_logs(tmp: Path, count: int, requests: int, workers: int) -> dict[str, Any]:
    logs = []
    for seed in range(count):
        p = tmp / f"sim-{seed}.jsonl"
        _kvsm("sim", "--ranks", "4", "--tiers", "l1,l2", "--requests", str(requests), "--seed", str(seed), "-o", str(p))
        logs.append(p)
    t0 = time.perf_counter()
    together = validate_many(logs, workers=workers)
    many_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    apart = [validate(p, workers=workers) for p in logs]
    apart_s = time.perf_counter() - t0
    if [r.ok for r in together] != [r.ok for r in apart]:
        raise SystemExit("validate_many and validate disagree on a log")
    steps = sum(r.steps for r in together)
    return {
        "logs": count, "requests_each": requests, "transitions": steps, "workers": workers,
        "all_ok": all(r.ok for r in together),
        "tlc_runs_together": len({id(s.tlc) for r in together for s in r.segments}),
        "validate_many_seconds": round(many_s, 2), "validate_each_seconds": round(apart_s, 2),
        "speedup": round(apart_s / many_s, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, help="the log to replay and validate (default: the bundled trace's sim log)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="TLC processes at once")
    ap.add_argument("--many", type=int, default=40, help="short logs for the many-logs figure (0: skip it)")
    ap.add_argument("--many-requests", type=int, default=12, help="requests of each short log")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out: dict[str, Any] = {"load_before": _load(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="kvsm-vspeed-") as tmp:
        log = a.log
        if log is None:
            log = Path(tmp) / "sim.jsonl"
            _kvsm("sim", "--ranks", "4", "--tiers", "l1,l2", "-o", str(log))
        out["side_by_side"] = side_by_side(log, max(1, a.repeat), a.workers)
        if not a.json:
            print(json.dumps(out["side_by_side"]), flush=True)
        if a.many > 0:
            out["many"] = many_logs(Path(tmp), a.many, a.many_requests, a.workers)
            if not a.json:
                print(json.dumps(out["many"]), flush=True)
    out["load_after"] = _load()
    if a.json:
        print(json.dumps(out))
    else:
        print(json.dumps({"load_before": out["load_before"], "load_after": out["load_after"], "cpus": out["cpus"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
