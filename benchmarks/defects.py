"""The detection matrix: every injected defect (docs/defects.md) through every detector.

Per defect (`kvsm.defects.CATALOGUE`):

- TLC: `kvsm check --config MODEL --bug NAME` on the model where it is reachable: the
  invariant it reports, the steps of its (shortest) counterexample, the distinct states
  it had found when it stopped, its seconds;
- simulator: `kvsm sim --check --bug NAME` on the default config with the tiers, faults
  and sizes the defect needs, seeds 0, 1, ... up to --seeds: the first seed whose run is
  stopped, by which detector (an invariant, a replica divergence, work that is never let
  go of) and after how many transitions;
- TLC on the production write-through path (prepared backups, the `prepared` column):
  for the defects that reach it (`kvsm.defects.PREPARED_PATH`), `kvsm check --config
  spec/MC_prepared_defects.cfg --bug NAME`: the invariant, the steps, the transition
  the counterexample ends with (where on the prepared path the defect bites), the
  states and seconds; null for the others;
- GPU backend on the CPU: `kvsm gpu replay LOG --bug NAME` of a run that shows the
  defect's symptom (for wrong bytes: the shortest run whose last load copies bytes that
  are not its node's KV; for ranks that disagree: the shortest counterexample): caught
  or not, and by what check; null where the symptom is neither (docs/defects.md says
  why).

The `none` row must be clean everywhere: TLC on every model of the matrix (the prepared
one included) without a defect (invariants, and liveness where the model checks it), the simulator on every (options, seed) pair that caught
a defect, without it, and the GPU backend on bug-free runs of the same shapes.

    python benchmarks/defects.py [--json] [--seeds 200] [--only NAME,...] [--no-gpu]

Prints a table, or with --json one object:
{"defects": {NAME: {"tlc": {..., "caught": bool}, "prepared": {..., "caught": bool} | null,
"sim": {..., "caught": bool}, "gpu": {..., "caught": bool | null}}}, "none": {"tlc": {...},
"sim": {...}, "gpu": {...}}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kvsm.config import load_config
from kvsm.defects import CATALOGUE, PREPARED_MODEL, PREPARED_PATH, SIM_REQUESTS, Defect, byte_witness, config_with, counterexample, witness_model, write_log

ROOT = Path(__file__).resolve().parent.parent


def _model_path(d: Defect) -> str:
    return str(ROOT / d.model) if d.model.endswith(".cfg") else d.model


def _model_config(d: Defect, model: str | None = None):
    model = model or d.model
    if model == "ci":
        return load_config("small")
    from kvsm.tla.models import config_of_model

    p = ROOT / model
    return config_of_model(p.with_suffix(".tla"), p)


def tlc_row(d: Defect, out: Path, model: str | None = None) -> dict[str, Any]:
    """TLC's check of defect `d` on its model (or on `model`, a spec/ .cfg path)."""
    from kvsm.tla.check import check
    from kvsm.tla.errors import TLCError, TLCUnavailable

    where = model or d.model
    path = str(ROOT / model) if model else _model_path(d)
    try:
        t0 = time.perf_counter()
        res = check(path, bug=d.name, log_path=out / (f"tlc-{Path(where).stem}-{d.name}.jsonl" if model else f"tlc-{d.name}.jsonl"))
        seconds = time.perf_counter() - t0
    except (TLCError, TLCUnavailable) as e:
        return {"config": where, "caught": False, "error": str(e)}
    v = res.to_json()["violation"]
    row: dict[str, Any] = {"config": where, "caught": v is not None, "seconds": round(seconds, 1),
                           "distinct_states": res.tlc.distinct_states}
    if v is not None:
        row |= {"property": v["property"], "kind": v["kind"], "steps": v["steps"], "log": v["log"]}
    return row


def prepared_row(d: Defect, out: Path) -> dict[str, Any] | None:
    """TLC on the prepared path for a defect that reaches it: caught when TLC reports the
    invariant `PREPARED_PATH` names and its counterexample ends with the transition there."""
    if d.name not in PREPARED_PATH:
        return None
    from kvsm.log import read_log

    row = tlc_row(d, out, PREPARED_MODEL)
    if row["caught"]:
        _, lines = read_log(row["log"])
        last = [t for _, _, t, _ in lines][-1].name
        prop, action = PREPARED_PATH[d.name]
        row |= {"last": last, "caught": row["property"] == prop and last == action}
    return row


def sim_row(d: Defect, seeds: int, bug: str | None) -> dict[str, Any]:
    """The first seed of 0..seeds-1 whose run (with `bug`) stops, or every seed clean."""
    from kvsm.sim import STOPS, SimOptions, simulate, stop_record

    row: dict[str, Any] = {"config": "default", "requests": SIM_REQUESTS, **d.sim}
    t0 = time.perf_counter()
    transitions = 0
    for seed in range(seeds):
        try:
            r = simulate(SimOptions(bug=bug, check=True, seed=seed, requests=SIM_REQUESTS, **d.sim))
            transitions += r.summary["transitions"]
        except STOPS as e:
            rec = stop_record(e, seed)
            return row | {"caught": True, "detector": rec["detector"], "seed": seed, "transitions": rec["transition"],
                          "seeds_run": seed + 1, "message": rec["message"][:300], "seconds": round(time.perf_counter() - t0, 1)}
    return row | {"caught": False, "seeds_run": seeds, "transitions_run": transitions, "seconds": round(time.perf_counter() - t0, 1)}


def _gpu(log: Path, bug: str | None) -> dict[str, Any]:
    from kvsm.gpu.launch import Options, replay

    s = replay(Options(str(log), device="cpu", page_bytes=512, layers=1, timeout_s=300, bug=bug))
    if s["ok"]:
        return {"caught": False, "transitions": s["transitions"], "bytes_verified": s["bytes_verified"]}
    f = s["failures"][0]
    return {"caught": True, "by": f["kind"], "transition": f.get("transition"), "rank": f.get("rank"),
            "message": f["message"][:300], "bytes_verified": s["bytes_verified"]}


def gpu_row(d: Defect, out: Path) -> dict[str, Any]:
    if d.gpu is None:
        return {"caught": None, "why": d.why_no_gpu}
    cfg = config_with(_model_config(d, witness_model(d)), d.name)
    steps = byte_witness(cfg) if d.gpu == "bytes" else counterexample(cfg)
    if not steps:
        return {"caught": False, "why": "no run shows the symptom in the model"}
    log = write_log(cfg, steps, out / f"gpu-{d.name}.jsonl")
    return {"symptom": d.gpu, "log_steps": len(steps), **_gpu(log, d.name)}


def none_row(defects: list[Defect], seeds: int, out: Path, sim_rows: dict[str, dict], gpu: bool) -> dict[str, Any]:
    from kvsm.tla.check import check
    from kvsm.tla.errors import TLCError, TLCUnavailable

    tlc: dict[str, Any] = {}
    models = {_model_path(d) for d in defects} | ({str(ROOT / PREPARED_MODEL)} if any(d.name in PREPARED_PATH for d in defects) else set())
    for model in sorted(models):
        try:
            res = check(model)
            tlc[Path(model).stem if model.endswith(".cfg") else model] = {
                "violation": res.to_json()["violation"], "distinct_states": res.tlc.distinct_states,
                "seconds": round(res.tlc.seconds, 1)}
        except (TLCError, TLCUnavailable) as e:
            tlc[model] = {"error": str(e)}
    sim: dict[str, Any] = {}
    for d in defects:
        seed = sim_rows.get(d.name, {}).get("seed")
        if seed is None:
            continue
        r = sim_row(d, seed + 1, None)  # every seed up to the one that caught it, without the defect
        sim[d.name] = {"seeds": seed + 1, "caught": r["caught"], **({"detector": r["detector"], "seed": r["seed"]} if r["caught"] else {})}
    gpu_rows: dict[str, Any] = {}
    if gpu:
        for d in defects:
            if d.gpu is None:
                continue
            cfg = _model_config(d)
            steps = counterexample(config_with(cfg, d.name))  # the same shape of run, replayed by a correct cache
            if steps:
                from kvsm.transitions import apply
                from kvsm.state import initial_state

                # the longest prefix the correct model takes
                s, kept = initial_state(cfg), []
                for t in steps:
                    try:
                        s = apply(s, t)
                    except Exception:  # noqa: BLE001 - the correct model refuses the deviating step
                        break
                    kept.append(t)
                log = write_log(cfg, kept, out / f"gpu-none-{d.name}.jsonl")
                gpu_rows[d.name] = _gpu(log, None)
    return {
        "tlc": {"caught": any(v.get("violation") or v.get("error") for v in tlc.values()), "models": tlc},
        "sim": {"caught": any(v["caught"] for v in sim.values()), "runs": sim},
        "gpu": {"caught": any(v["caught"] for v in gpu_rows.values()) if gpu_rows else None, "runs": gpu_rows},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", type=int, default=200, help="simulator seeds tried per defect (0 .. N-1)")
    ap.add_argument("--only", default="", help="comma-separated defects (default: all)")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU backend column")
    ap.add_argument("--out", default="", help="where the logs go (default: a temporary directory)")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(CATALOGUE)
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        sys.exit(f"--only: not in the catalogue: {', '.join(unknown)}")
    defects = [CATALOGUE[n] for n in names]
    with tempfile.TemporaryDirectory(prefix="kvsm-defects-") as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows: dict[str, Any] = {}
        for d in defects:
            rows[d.name] = {
                "tlc": tlc_row(d, out),
                "prepared": prepared_row(d, out),
                "sim": sim_row(d, a.seeds, d.name),
                "gpu": gpu_row(d, out) if not a.no_gpu else {"caught": None, "why": "--no-gpu"},
            }
            print(f"{d.name}: done", file=sys.stderr, flush=True)
        none = none_row(defects, a.seeds, out, {n: r["sim"] for n, r in rows.items()}, not a.no_gpu)
    result = {"defects": rows, "none": none}
    if a.json:
        print(json.dumps(result))
        return
    print(table(result))


def table(result: dict[str, Any]) -> str:
    lines = [
        "| defect | TLC: model, invariant, steps, states, s | TLC on the prepared path: invariant, steps, last step, states, s | simulator: detector, first seed, transitions | GPU backend (CPU) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in result["defects"].items():
        t, p, s, g = r["tlc"], r.get("prepared"), r["sim"], r["gpu"]
        tlc = f"{Path(t['config']).stem}, {t['property']}, {t['steps']}, {t['distinct_states']:,}, {t['seconds']}" if t["caught"] else "not caught"
        if p is None:
            prep = "n/a"
        elif p["caught"]:
            prep = f"{p['property']}, {p['steps']}, {p['last']}, {p['distinct_states']:,}, {p['seconds']}"
        else:
            prep = "not caught" + (f" ({p.get('property')} at {p.get('last')})" if p.get("property") else "")
        sim = f"{s['detector']}, {s['seed']}, {s['transitions']:,}" if s["caught"] else f"not caught ({s['seeds_run']} seeds)"
        gpu = "n/a" if g["caught"] is None else (f"{g['by']} at transition {g['transition']} (rank {g['rank']})" if g["caught"] else "not caught")
        lines.append(f"| {name} | {tlc} | {prep} | {sim} | {gpu} |")
    n = result["none"]
    lines.append(f"| none | {'clean' if not n['tlc']['caught'] else 'VIOLATION'} ({len(n['tlc']['models'])} models) | (in the models) | "
                 f"{'clean' if not n['sim']['caught'] else 'CAUGHT'} ({sum(v['seeds'] for v in n['sim']['runs'].values())} runs) | "
                 f"{'n/a' if n['gpu']['caught'] is None else ('clean' if not n['gpu']['caught'] else 'CAUGHT')} ({len(n['gpu']['runs'])} logs) |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
