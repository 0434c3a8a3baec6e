"""Where `kvsm validate`'s TLC time goes on a log: the cost of each spec action and of
the trace module itself.

TLC's own profiler (`-coverage`) does not get through this spec (spec/README.md), so
this measures by substitution. One segment of the log (the one validate cuts first)
is written as its trace module, and TLC follows variants of it, in turn, one at a
time: the module as validate writes it; for each transition named, the module in
which the steps of that transition take the model's delta as the next state instead
of the spec's action; and the module in which every step does. The CPU seconds an
action costs are those of the module as written less those of its variant; what is
left with every action replaced is the trace module's own cost (parsing it, applying
and comparing the deltas, TLC's work per state), and a variant that stops after the
first step measures the parsing alone. CPU seconds are the Java process's (wait4),
the least of `--repeat` runs of each variant: a run of a few seconds varies by a
second or more with the JIT compiler's and the collector's work.

`--sampler` instead follows the module as written once under Java's own sampling
profiler (JDK Flight Recorder, whose `jfr` reader comes with a JDK, not a JRE) and its
collector log, and says where TLC's Java threads were: the share of samples in each of
TLC's hot spots (comparing functions, with the sorting of their domains; looking names
up along context chains; `@@`; SANY's parse) and the collector's pauses in seconds.

    python benchmarks/validate_profile.py LOG [--actions Insert,LoadBack] [--segments 2] [--repeat 3] [--json]
    python benchmarks/validate_profile.py LOG --sampler [--json]

With no LOG, the log of `kvsm sim --ranks 4 --tiers l1,l2` over the bundled trace.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsm.log import LogError  # noqa: E402
from kvsm.tla.canon import SPEC_VARIABLES  # noqa: E402
from kvsm.tla.trace import CODE, _apply  # noqa: E402
from kvsm.tla.validate import TraceModules, run_segment  # noqa: E402

TAKE = "/\\ Take(Steps[cursor])"


def substituted(text: str, names: list[str]) -> str:
    """The module with the steps of `names` taking the model's delta (`Assign`)."""
    assign = (
        "Assign(s) ==\n    LET d == s[3]\n        E == IF \"nodes\" \\in DOMAIN d THEN ApplyMap(nodes, d.nodes) ELSE nodes\n    IN\n"
        + "\n".join(
            f"    /\\ {v}' = " + ("E" if v == "nodes" else f'IF "{v}" \\in DOMAIN d THEN {_apply(v, v, "d")} ELSE {v}')
            for v in SPEC_VARIABLES
        )
        + "\n\n"
    )
    which = "{" + ", ".join(str(CODE[n]) for n in names) + "}"
    if TAKE not in text:
        raise SystemExit("the trace module has no `/\\ Take(Steps[cursor])`: kvsm.tla.trace changed; update this script")
    out = text.replace(TAKE, f"/\\ IF Steps[cursor][1] \\in {which} THEN Assign(Steps[cursor]) ELSE Take(Steps[cursor])")
    return out.replace("\nSetTo(F) ==", "\n" + assign + "SetTo(F) ==", 1)


def first_step_only(text: str) -> str:
    return text.replace("/\\ cursor < Starts[stretch + 1]\n", "/\\ cursor < 2\n").replace("cursor = Len(Steps) + 1", "cursor = 2")


# TLC's hot spots in a trace module's run: a sample counts for the first of these, in
# this order, that is anywhere on its stack (sorting a domain happens inside a
# comparison), so each sample counts once.
HOT = (
    ("sorting function domains", ("tlc2.value.impl.FcnRcdValue.normalize",)),
    ("comparing functions", ("tlc2.value.impl.FcnRcdValue.equals",)),
    ("@@ (TLC.CombineFcn)", ("tlc2.module.TLC.CombineFcn",)),
    ("name look-ups (Context.lookup)", ("tlc2.util.Context.lookup",)),
    ("SANY (parsing the module)", ("tla2sany.",)),
)


def sampled(text: str, config: Any, steps: int, tmp: Path) -> dict[str, Any]:
    """Where TLC's threads were while following `text`, by JFR's execution samples, and
    the collector's pauses (the serial collector validate uses)."""
    jfr = shutil.which("jfr")
    if jfr is None:
        raise SystemExit("--sampler needs `jfr`, the flight recorder's reader that comes with a JDK (a JRE has none)")
    rec, gc = tmp / "tlc.jfr", tmp / "gc.log"
    res = run_segment(text, config, steps, jvm_extra=(f"-XX:StartFlightRecording=filename={rec},settings=profile", f"-Xlog:gc:file={gc}"))
    if res.violation is not None:
        raise SystemExit(f"TLC reported {res.violation.property} on the module as written: validate rejects this log")
    out = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", str(rec)], check=True,
                         capture_output=True, text=True).stdout
    counts: Counter[str] = Counter()
    samples = out.split("jdk.ExecutionSample")[1:]
    for s in samples:
        frames = re.findall(r"^\s+([\w.$<>]+)\(", s, re.M)
        label = next((name for name, marks in HOT for f in frames if f.startswith(marks)), "the rest")
        counts[label] += 1
    pauses = [float(m) for m in re.findall(r"Pause .* ([0-9.]+)ms$", gc.read_text(), re.M)]
    n = max(1, len(samples))
    return {
        "cpu_seconds": round(res.cpu_seconds or 0.0, 1),
        "samples": len(samples),
        "share": {name: round(counts[name] / n, 3) for name, _ in HOT + (("the rest", ()),)},
        "gc_pause_seconds": round(sum(pauses) / 1000, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?")
    ap.add_argument("--actions", help="comma-separated transitions (default: every transition of the segment)")
    ap.add_argument("--segments", type=int, default=2, help="cut the log as validate would into this many; the first is profiled")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each variant; the least CPU time counts")
    ap.add_argument("--sampler", action="store_true", help="where TLC's threads spend the module as written (JFR; needs a JDK)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvsm-vprof-") as tmp:
        log = a.log
        if log is None:
            log = str(Path(tmp) / "sim.jsonl")
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            subprocess.run([sys.executable, "-m", "kvsm.cli", "sim", "--ranks", "4", "--tiers", "l1,l2", "-o", log],
                           check=True, env=env, stdout=subprocess.DEVNULL)
        try:
            modules = TraceModules(log, a.segments, a.segments, None)
            seg, text = next(iter(modules))
        except LogError as e:
            raise SystemExit(f"validate_profile.py: {e}") from None
        counts = Counter(t.name for t in modules.steps)
        names = a.actions.split(",") if a.actions else [n for n, _ in counts.most_common()]
        out: dict[str, Any] = {"log": log, "steps": seg.steps, "load_before": [round(x, 2) for x in os.getloadavg()]}
        if a.sampler:
            out["sampler"] = sampled(text, modules.config, seg.steps, Path(tmp))
            print(json.dumps(out))
            return 0

        def cpu(variant: str, steps: int = seg.steps) -> float:
            runs = []
            for _ in range(max(1, a.repeat)):
                res = run_segment(variant, modules.config, steps)
                if res.violation is not None:
                    raise SystemExit(f"TLC reported {res.violation.property} on a variant: the substitution is wrong")
                runs.append(res.cpu_seconds or 0.0)
            return round(min(runs), 2)

        out["as_written"] = cpu(text)
        out["parse"] = cpu(first_step_only(text), 1)
        out["every_action_replaced"] = cpu(substituted(text, list(counts)))
        out["actions"] = []
        for n in names:
            c = cpu(substituted(text, [n]))
            row = {"action": n, "steps": counts.get(n, 0), "cpu_seconds": round(out["as_written"] - c, 2)}
            row["ms_per_step"] = round(1000 * row["cpu_seconds"] / row["steps"], 2) if row["steps"] else None
            out["actions"].append(row)
            if not a.json:
                print(json.dumps(row), flush=True)
        out["trace_module"] = round(out["every_action_replaced"] - out["parse"], 2)
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(out))
    else:
        print(json.dumps({k: v for k, v in out.items() if k != "actions"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
