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
- the reference profile (the `reference` column): TLC on the reference's small model
  with the findings' knobs fixed (`kvsm check --config spec/MC_reference_defects.cfg
  --bug NAME`, each run stopped past --reference-timeout seconds and reported as a
  timeout), and the simulator on `reference-default` with the L3 tier and the same
  knobs fixed (`kvsm.defects.reference_sim`), seeds 0 .. --reference-seeds - 1; a
  defect the small model cannot reach (`kvsm.defects.REFERENCE_UNREACHABLE`) is not run
  by TLC and says why;
- GPU backend on the CPU: `kvsm gpu replay LOG --bug NAME` of a run that shows the
  defect's symptom (for wrong bytes: the shortest run whose last load copies bytes that
  are not its node's KV; for ranks that disagree: the shortest counterexample): caught
  or not, and by what check; null where the symptom is neither (docs/defects.md says
  why).

The `none` row must be clean everywhere: TLC on every model of the matrix (the prepared
one included) without a defect (invariants, and liveness where the model checks it), the simulator on every (options, seed) pair that caught
a defect, without it, and the GPU backend on bug-free runs of the same shapes.

    python benchmarks/defects.py [--json] [--seeds 200] [--only NAME,...] [--no-gpu]
        [--columns tlc,prepared,sim,gpu,reference] [--reference-seeds 20] [--reference-timeout 900]

Prints a table, or with --json one object:
{"defects": {NAME: {"tlc": {..., "caught": bool}, "prepared": {..., "caught": bool} | null,
"sim": {..., "caught": bool}, "gpu": {..., "caught": bool | null}, "reference": {"tlc": {...},
"sim": {...}}}}, "none": {"tlc": {...}, "sim": {...}, "gpu": {...}, "reference": {...}}}, each
with the columns asked for.
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
from kvsm.defects import (CATALOGUE, PREPARED_MODEL, PREPARED_PATH, REFERENCE_MODEL, REFERENCE_UNREACHABLE, SIM_REQUESTS, Defect, byte_witness,
                          config_with, counterexample, reference_sim, witness_model, write_log)

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


def tlc_row(d: Defect, out: Path, model: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    """TLC's check of defect `d` on its model (or on `model`, a spec/ .cfg path), stopped
    past `timeout` seconds (then a timeout, not clean)."""
    from kvsm.tla.check import check
    from kvsm.tla.errors import TLCError, TLCUnavailable
    from kvsm.tla.runner import TLCTimeout

    where = model or d.model
    path = str(ROOT / model) if model else _model_path(d)
    try:
        t0 = time.perf_counter()
        res = check(path, bug=d.name, log_path=out / (f"tlc-{Path(where).stem}-{d.name}.jsonl" if model else f"tlc-{d.name}.jsonl"),
                    timeout=timeout)
        seconds = time.perf_counter() - t0
    except TLCTimeout:
        return {"config": where, "caught": False, "timeout": timeout}
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


def sim_row(d: Defect, seeds: int, bug: str | None, opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The first seed of 0..seeds-1 whose run (with `bug`, the options `opts` or the
    defect's own) stops, or every seed clean."""
    from kvsm.sim import STOPS, SimOptions, simulate, stop_record

    opts = d.sim if opts is None else opts
    row: dict[str, Any] = {"config": "default", "requests": SIM_REQUESTS, **opts}
    t0 = time.perf_counter()
    transitions = 0
    for seed in range(seeds):
        try:
            r = simulate(SimOptions(bug=bug, check=True, seed=seed, requests=SIM_REQUESTS, **opts))
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


def reference_row(d: Defect, out: Path, seeds: int, timeout: float) -> dict[str, Any]:
    """The `reference` column: TLC on the reference's small model with the findings' knobs
    fixed (not run where the model cannot reach the defect: why), and the simulator on
    `reference-default` with the L3 tier and the same knobs fixed."""
    if d.name in REFERENCE_UNREACHABLE:
        tlc = {"config": REFERENCE_MODEL, "caught": False, "unreachable": REFERENCE_UNREACHABLE[d.name]}
    else:
        tlc = tlc_row(d, out, REFERENCE_MODEL, timeout)
    return {"tlc": tlc, "sim": sim_row(d, seeds, d.name, reference_sim(d))}


def reference_none_row(defects: list[Defect], rows: dict[str, dict], timeout: float) -> dict[str, Any]:
    """The `reference` column without a defect: TLC on the model with the findings' knobs
    fixed (clean, or the column means nothing), the pure reference model (its first
    finding, docs/findings.md), and the simulator on every (options, seed) that caught a
    defect in the column."""
    from kvsm.tla.check import check
    from kvsm.tla.errors import TLCError, TLCUnavailable
    from kvsm.tla.runner import TLCTimeout

    tlc: dict[str, Any] = {}
    for label, model in (("fixed", str(ROOT / REFERENCE_MODEL)), ("reference", "reference")):
        try:
            res = check(model, timeout=timeout)
            v = res.to_json()["violation"]
            tlc[label] = {"violation": v and {k: v[k] for k in ("property", "kind", "steps")},
                          "distinct_states": res.tlc.distinct_states, "seconds": round(res.tlc.seconds, 1)}
        except TLCTimeout:
            tlc[label] = {"timeout": timeout}
        except (TLCError, TLCUnavailable) as e:
            tlc[label] = {"error": str(e)}
    sim: dict[str, Any] = {}
    for d in defects:
        seed = rows.get(d.name, {}).get("sim", {}).get("seed")
        if seed is None:
            continue
        r = sim_row(d, seed + 1, None, reference_sim(d))
        sim[d.name] = {"seeds": seed + 1, "caught": r["caught"], **({"detector": r["detector"], "seed": r["seed"]} if r["caught"] else {})}
    fixed = tlc["fixed"]
    return {"tlc": {"caught": bool(fixed.get("violation") or fixed.get("error") or fixed.get("timeout")), "models": tlc},
            "sim": {"caught": any(v["caught"] for v in sim.values()), "runs": sim}}


COLUMNS = ("tlc", "prepared", "sim", "gpu", "reference")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", type=int, default=200, help="simulator seeds tried per defect (0 .. N-1)")
    ap.add_argument("--only", default="", help="comma-separated defects (default: all)")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU backend column")
    ap.add_argument("--columns", default=",".join(COLUMNS), help=f"comma-separated columns (default: all of {','.join(COLUMNS)})")
    ap.add_argument("--reference-seeds", type=int, default=20, help="simulator seeds tried per defect in the reference column")
    ap.add_argument("--reference-timeout", type=float, default=900, help="seconds a TLC run of the reference column may take")
    ap.add_argument("--no-none", action="store_true", help="skip the none row (runs split over several processes)")
    ap.add_argument("--rows", default="", help="take the defects' rows from this rows.jsonl of earlier runs (--out DIR writes "
                    "DIR/rows.jsonl) and compute the none row only")
    ap.add_argument("--out", default="", help="where the logs go (default: a temporary directory)")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(CATALOGUE)
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        sys.exit(f"--only: not in the catalogue: {', '.join(unknown)}")
    cols = [c for c in a.columns.split(",") if c]
    if not cols or set(cols) - set(COLUMNS):
        sys.exit(f"--columns: expected some of {','.join(COLUMNS)}, got {a.columns!r}")
    if a.no_gpu and "gpu" in cols:
        cols.remove("gpu")
    defects = [CATALOGUE[n] for n in names]
    with tempfile.TemporaryDirectory(prefix="kvsm-defects-") as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows: dict[str, Any] = {}
        if a.rows:
            done = {k: v for line in Path(a.rows).read_text().splitlines() if line.strip() for k, v in json.loads(line).items()}
            missing = [d.name for d in defects if d.name not in done]
            if missing:
                sys.exit(f"--rows {a.rows}: no row for {', '.join(missing)}")
            rows = {d.name: done[d.name] for d in defects}
            cols = [c for c in cols if all(c in r for r in rows.values())]
        for d in defects if not a.rows else ():
            row: dict[str, Any] = {}
            if "tlc" in cols:
                row["tlc"] = tlc_row(d, out)
            if "prepared" in cols:
                row["prepared"] = prepared_row(d, out)
            if "sim" in cols:
                row["sim"] = sim_row(d, a.seeds, d.name)
            if "gpu" in cols:
                row["gpu"] = gpu_row(d, out)
            if "reference" in cols:
                row["reference"] = reference_row(d, out, a.reference_seeds, a.reference_timeout)
            rows[d.name] = row
            with open(out / "rows.jsonl", "a") as f:  # each row as it is done (a long run stopped keeps them)
                f.write(json.dumps({d.name: row}) + "\n")
            print(f"{d.name}: done", file=sys.stderr, flush=True)
        none: dict[str, Any] = {}
        if a.no_none:
            pass
        elif {"tlc", "prepared", "sim", "gpu"} & set(cols):
            none = none_row(defects, a.seeds, out, {n: r.get("sim", {}) for n, r in rows.items()}, "gpu" in cols)
        if "reference" in cols and not a.no_none:
            none["reference"] = reference_none_row(defects, {n: r["reference"] for n, r in rows.items()}, a.reference_timeout)
    result = {"defects": rows, "none": none}
    if a.json:
        print(json.dumps(result))
        return
    print(table(result))


def _tlc_cell(t: dict[str, Any], with_model: bool = True) -> str:
    if t["caught"]:
        return (f"{Path(t['config']).stem}, " if with_model else "") + f"{t['property']}, {t['steps']}, {t['distinct_states']:,}, {t['seconds']}"
    if t.get("unreachable"):
        return f"not reachable ({t['unreachable']})"
    if t.get("timeout"):
        return f"timeout ({t['timeout']:g} s)"
    if t.get("error"):
        return f"error: {t['error'][:200]}"
    return f"not caught ({t['distinct_states']:,} states, {t['seconds']} s)"


def _prepared_cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return "n/a"
    if p["caught"]:
        return f"{p['property']}, {p['steps']}, {p['last']}, {p['distinct_states']:,}, {p['seconds']}"
    return "not caught" + (f" ({p.get('property')} at {p.get('last')})" if p.get("property") else "")


def _sim_cell(s: dict[str, Any]) -> str:
    return f"{s['detector']}, {s['seed']}, {s['transitions']:,}" if s["caught"] else f"not caught ({s['seeds_run']} seeds)"


def _gpu_cell(g: dict[str, Any]) -> str:
    return "n/a" if g["caught"] is None else (f"{g['by']} at transition {g['transition']} (rank {g['rank']})" if g["caught"] else "not caught")


HEADERS = {
    "tlc": ("TLC: model, invariant, steps, states, s", lambda r: _tlc_cell(r["tlc"])),
    "prepared": ("TLC on the prepared path: invariant, steps, last step, states, s", lambda r: _prepared_cell(r.get("prepared"))),
    "sim": ("simulator: detector, first seed, transitions", lambda r: _sim_cell(r["sim"])),
    "gpu": ("GPU backend (CPU)", lambda r: _gpu_cell(r["gpu"])),
    "reference": ("reference (findings' knobs fixed), TLC: invariant, steps, states, s | reference, simulator: detector, first seed, transitions",
                  lambda r: f"{_tlc_cell(r['reference']['tlc'], False)} | {_sim_cell(r['reference']['sim'])}"),
}


def _none_cells(n: dict[str, Any]) -> dict[str, str]:
    cells: dict[str, str] = {}
    if "tlc" in n:
        cells["tlc"] = f"{'clean' if not n['tlc']['caught'] else 'VIOLATION'} ({len(n['tlc']['models'])} models)"
        cells["prepared"] = "(in the models)"
        cells["sim"] = f"{'clean' if not n['sim']['caught'] else 'CAUGHT'} ({sum(v['seeds'] for v in n['sim']['runs'].values())} runs)"
        cells["gpu"] = f"{'n/a' if n['gpu']['caught'] is None else ('clean' if not n['gpu']['caught'] else 'CAUGHT')} ({len(n['gpu']['runs'])} logs)"
    if "reference" in n:
        r = n["reference"]
        fixed, pure = r["tlc"]["models"]["fixed"], r["tlc"]["models"]["reference"]
        if "distinct_states" in fixed:
            tlc = f"{'VIOLATION' if fixed['violation'] else 'clean'} ({fixed['distinct_states']:,} states, {fixed['seconds']} s)"
        else:
            tlc = f"timeout ({fixed['timeout']:g} s)" if "timeout" in fixed else f"error: {fixed.get('error', '')[:200]}"
        v = pure.get("violation")
        tlc += "; the pure reference: " + (f"{v['property']} at {v['steps']} steps (finding 1)" if v else str(pure))
        cells["reference"] = f"{tlc} | {'clean' if not r['sim']['caught'] else 'CAUGHT'} ({sum(v['seeds'] for v in r['sim']['runs'].values())} runs)"
    return cells


def table(result: dict[str, Any]) -> str:
    rows = result["defects"]
    cols = [c for c in HEADERS if rows and c in next(iter(rows.values()))]
    head = "| defect | " + " | ".join(HEADERS[c][0] for c in cols) + " |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(HEADERS[c][1](r) for c in cols) + " |")
    none = _none_cells(result["none"])
    lines.append("| none | " + " | ".join(none.get(c, "") for c in cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
