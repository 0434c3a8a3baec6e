"""Where TLC's time goes in an exhaustive check: the cost of each action of `Next`.

TLC 2.15's own profiler (`-coverage`) never gets past building its cost model on
KVCache.tla (it expands every operator at every place it is used, and the spec's
operators nest deeply), so this measures differently. For each disjunct of `Next`, a
temporary copy of the spec gets COPIES more disjuncts `(A) /\\ clock < 0`: TLC
evaluates A in full (its guards, its effect, every value of its quantifiers) and then
drops the result, so the state graph does not change and the check costs COPIES times
A more. The action's cost is (CPU seconds with the copies - without) / COPIES, CPU of
the Java process (wait4), so that a shared machine perturbs it less than wall time.
Liveness is measured the same way: the check without PROPERTIES, and with each alone.

Nothing under spec/ is changed; the copies live in a temporary directory.

    python benchmarks/tlc_profile.py [--model ci] [--copies 3] [--json] [--actions Insert,Reserve]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsm.tla.models import ModelConfig, read_cfg  # noqa: E402
from kvsm.tla.location import model_paths, spec_dir  # noqa: E402
from kvsm.tla.runner import run_tlc  # noqa: E402


def next_disjuncts(spec: str) -> tuple[int, int, list[str]]:
    """The lines of `Next ==` (start, end) and its disjuncts, one per `\\/` line."""
    m = re.search(r"^Next ==\n((?:    \\/ .*\n)+)", spec, flags=re.M)
    if m is None:
        raise SystemExit("KVCache.tla: no `Next ==` followed by one `\\/ ...` line per action")
    return m.start(1), m.end(1), [line.strip()[3:] for line in m.group(1).splitlines()]


def action_name(disjunct: str) -> str:
    return re.findall(r"([A-Z][A-Za-z]+)(?:\(|$)", disjunct)[-1]


def run(model: str, spec_text: str, cfg: ModelConfig, workdir: Path) -> dict[str, Any]:
    """One check of `model` against `spec_text` in place of KVCache.tla."""
    d = workdir / "spec"
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(spec_dir(), d)
    (d / "KVCache.tla").write_text(spec_text)
    old = os.environ.get("KVSM_SPEC_DIR")
    os.environ["KVSM_SPEC_DIR"] = str(d)
    try:
        module, _ = model_paths(model)
        res = run_tlc(d / module.name, cfg)
    finally:
        if old is None:
            os.environ.pop("KVSM_SPEC_DIR", None)
        else:
            os.environ["KVSM_SPEC_DIR"] = old
    if not res.ok:
        raise SystemExit(f"{model}: the check failed: {res.violation}")
    return {"cpu": res.cpu_seconds, "wall": res.seconds, "states": res.distinct_states}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="ci")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--actions", default="", help="comma-separated action names (default: every one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    spec = (spec_dir() / "KVCache.tla").read_text()
    start, end, disjuncts = next_disjuncts(spec)
    module, cfg_path = model_paths(a.model)
    full = read_cfg(cfg_path)
    safety = ModelConfig(dict(full.constants), {k: v for k, v in full.sections.items() if k != "PROPERTIES"})
    out: dict[str, Any] = {"model": a.model, "copies": a.copies, "load": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="kvsm-tlc-profile-") as tmp:
        work = Path(tmp)
        base = run(a.model, spec, full, work)
        out["baseline"] = base
        if not a.json:
            print(json.dumps({"baseline": base}), flush=True)
        props: dict[str, Any] = {"none": run(a.model, spec, safety, work)}
        for p in full.names("PROPERTIES"):
            one = ModelConfig(dict(full.constants), {**safety.sections, "PROPERTIES": [p]})
            props[p] = run(a.model, spec, one, work)
        out["properties"] = props
        if not a.json:
            print(json.dumps({"properties": props}), flush=True)
        wanted = {x for x in a.actions.split(",") if x}
        actions = []
        for dj in disjuncts:
            name = action_name(dj)
            if wanted and name not in wanted:
                continue
            extra = "".join(f"    \\/ ({dj}) /\\ clock < 0\n" for _ in range(a.copies))
            r = run(a.model, spec[:end] + extra + spec[end:], full, work)
            cost = (r["cpu"] - base["cpu"]) / a.copies
            row = {"action": name, "cpu_seconds": round(cost, 2), "share": round(cost / base["cpu"], 3)}
            actions.append(row)
            if not a.json:
                print(json.dumps(row), flush=True)
        out["actions"] = actions
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
