"""Which model mutations a campaign notices, with and without the spec as a second
implementation (docs/campaign.md, "The spec as a second implementation").

    python benchmarks/mutations.py --patches DIR [--runs 40] [--validate V]
                                   [--shrink-seconds 0] [--workers W] [--json]

Each `DIR/*.patch` (a unified diff, `patch -p1` at the checkout's root: a small wrong
change to the model) is applied to a copy of this checkout in a temporary directory,
where `kvsm campaign --runs N` runs with the campaign's defaults but `--validate` and
`--shrink-seconds`. The patches stay wherever DIR is: this script holds none. A
mutation is *noticed before* when some run fails by a detector other than `spec`
(exactly the failures of the same campaign with `--validate none`: validation only adds
failures to the runs it selects), and *noticed after* when any run fails. The clean
checkout runs first, with `--validate none` and then as the mutants do: a failure there
is a false alarm, which the script reports, and the two give validation's cost (CPU
and wall ratios, measured in the same invocation).
Shrinking does not change which runs fail, so it is off by default (0 s), which keeps a
mutation's campaign at the cost of its runs and validations.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", "out", "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def campaign(patch: Path | None, args: argparse.Namespace, validate: str | None = None) -> dict:
    """The campaign's summary on a copy of the checkout with `patch` applied."""
    with tempfile.TemporaryDirectory(prefix="kvsm-mutation-") as d:
        tree = Path(d) / "kvsm"
        shutil.copytree(ROOT, tree, ignore=SKIP)
        if patch is not None:
            p = subprocess.run(["patch", "-p1", "-s", "-i", str(patch.resolve())], cwd=tree, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"{patch}: does not apply to this checkout: {p.stdout}{p.stderr}".strip())
        cmd = [sys.executable, "-m", "kvsm.cli", "campaign", "--runs", str(args.runs), "--shrink-seconds", str(args.shrink_seconds),
               "-o", str(Path(d) / "out"), "--json"]
        validate = validate or args.validate
        if validate is not None:
            cmd += ["--validate", validate]
        if args.workers is not None:
            cmd += ["--workers", str(args.workers)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        t0, c0 = time.perf_counter(), _cpu()
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        try:
            if r.returncode not in (0, 1):
                raise ValueError
            s = json.loads(r.stdout)
        except ValueError:  # the campaign itself broke: said, and the other mutations go on
            print(f"kvsm campaign exited {r.returncode} on {patch or 'the clean checkout'}: {r.stderr[-3000:]}", file=sys.stderr)
            return {"mutation": patch.stem if patch is not None else "(none)", "error": r.returncode, "before": {}, "after": {},
                    "noticed_before": False, "noticed_after": False, "validated": 0, "rejected": 0,
                    "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    sigs = {g["signature"]: len(g["runs"]) for g in s["failures"]}
    before = {k: v for k, v in sigs.items() if not k.startswith("spec:")}
    name = patch.stem if patch is not None else "(none)" if validate != "none" else "(none, --validate none)"
    return {"mutation": name, "before": before, "after": sigs,
            "noticed_before": bool(before), "noticed_after": bool(sigs), "validated": s["validation"]["validated"],
            "rejected": s["validation"]["rejected"], "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--patches", type=Path, required=True, help="a directory of *.patch files (patch -p1 at the checkout's root)")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--validate", default=None, help="kvsm campaign --validate (default: the campaign's default)")
    ap.add_argument("--shrink-seconds", type=float, default=0.0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-clean", action="store_true", help="skip the clean checkout's two campaigns (no false-alarm check, no cost ratio)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    patches = sorted(args.patches.glob("*.patch"))
    if not patches:
        sys.exit(f"--patches {args.patches}: no *.patch file there")
    base = campaign(None, args, "none") if not args.no_clean else None
    rows = []
    for p in ([] if args.no_clean else [None]) + patches:
        rows.append(campaign(p, args))
        print(f"{rows[-1]['mutation']}: noticed {rows[-1]['noticed_before']} / {rows[-1]['noticed_after']}: {rows[-1]['after']}",
              file=sys.stderr, flush=True)
    clean = rows[0] if base is not None else None
    muts = rows[1:] if base is not None else rows
    out = {
        "runs": args.runs,
        "validate": args.validate or "default",
        "false_alarm": clean["noticed_after"] if clean else None,
        "baseline": base,
        "cost_cpu": round(clean["cpu_s"] / base["cpu_s"], 2) if clean else None,
        "cost_wall": round(clean["wall_s"] / base["wall_s"], 2) if clean else None,
        "noticed_before": sum(r["noticed_before"] for r in muts),
        "noticed_after": sum(r["noticed_after"] for r in muts),
        "mutations": len(muts),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'mutation':34} {'before':7} {'after':6} {'val':>4} {'rej':>4} {'wall':>6} {'cpu':>6}  signatures")
    for r in ([base] if base else []) + rows:
        sig = ", ".join(f"{k} x{v}" for k, v in sorted(r["after"].items())) or "-"
        print(f"{r['mutation']:34} {'yes' if r['noticed_before'] else 'no':7} {'yes' if r['noticed_after'] else 'no':6} "
              f"{r['validated']:4} {r['rejected']:4} {r['wall_s']:6.1f} {r['cpu_s']:6.1f}  {sig}")
    print(f"noticed: {out['noticed_before']} of {out['mutations']} without validation, {out['noticed_after']} with "
          f"--validate {out['validate']}" + ("; FALSE ALARM on the clean checkout" if out["false_alarm"] else ""))
    if clean:
        print(f"cost of the clean campaign against --validate none: {out['cost_cpu']} times the CPU, {out['cost_wall']} times the wall")


if __name__ == "__main__":
    main()
