"""A campaign's summary, from its result records: the `--json` object, the table, the plots.

`--json` prints `{"runs", "transitions", "failures": [{"signature", "runs", "case"}],
"coverage": {...}, "workers", "seconds"}`: `runs` and `transitions` count every run
recorded in `DIR/results.jsonl` (a resumed campaign's earlier runs included), a failure
group lists the seeds of its runs and the shrunk case with the fewest transitions (the
lowest seed's among equals),
`workers` and `seconds` are this invocation's. `coverage` is `kvsm.campaign.coverage`'s
totals plus `runs` (how many ended `ok`, `failed`, `budget`, `killed`, `error`; how many
were retried on another worker; the workers lost meanwhile) and `spec` (runs per config,
tier set, fault mix, workload and tenant count, `kvsm sim --tenants`: 1 without) and `graph` (the transition kinds and ordered pairs of
kinds of the spec's state graph of `small` that the runs reached, and those never
reached: `kvsm.campaign.coverage.against_graph`). `validation` counts the runs whose
logs TLC followed (`validated`), those it rejected, those it could not decide
(`errors`) and its seconds, with the campaign's `mode` and, when TLC cannot run here,
why (`unavailable`, such as "no Java"); its `successors`, the walk runs whose states'
successors local conform compared (`runs`, `states`, `differ`, `errors`,
`kvsm.campaign.successors`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from rich.console import Group
from rich.table import Table

from .coverage import against_graph, empty, merge

STATUSES = ("ok", "failed", "budget", "killed", "error")


def failure_signature(rec: dict[str, Any]) -> str | None:
    if rec.get("status") == "failed" and rec.get("failure"):
        return rec["failure"]["signature"]
    if rec.get("status") == "error":
        return f"campaign-error:{rec.get('error', '?').split(':')[0]}@-"
    return None


def summarize(records: Iterable[dict[str, Any]], workers: int, seconds: float, lost: list[str] | None = None,
              validation: dict[str, Any] | None = None) -> dict[str, Any]:
    cov = empty()
    val = {"mode": "none", "validated": 0, "rejected": 0, "errors": 0, "seconds": 0.0, "unavailable": None} | (validation or {})
    val.setdefault("successors", {"runs": 0, "states": 0, "differ": 0, "errors": 0})
    status: Counter = Counter()
    spec: dict[str, Counter] = {k: Counter() for k in ("config", "tiers", "faults", "workload")}
    tenants: Counter = Counter()
    groups: dict[str, dict[str, Any]] = {}
    runs = transitions = retried = 0
    for rec in records:
        runs += 1
        transitions += rec.get("transitions", 0)
        status[rec.get("status", "error")] += 1
        retried += rec.get("attempts", 1) > 1
        if rec.get("coverage"):
            merge(cov, rec["coverage"])
        for k in spec:
            if rec.get("spec") and k in rec["spec"]:
                spec[k][str(rec["spec"][k])] += 1
        if rec.get("spec"):  # runs that spread their workload over tenants test isolation
            tenants[str(rec["spec"].get("tenants") or 1)] += 1
        v = rec.get("validation")
        if v is not None:
            val["validated"] += 1
            val["errors"] += "error" in v
            val["rejected"] += not v["ok"] and "error" not in v
            val["seconds"] += v.get("seconds", 0.0)
        lv = rec.get("successors")
        if lv is not None:
            loc = val["successors"]
            loc["runs"] += 1
            loc["states"] += lv.get("states", 0)
            loc["errors"] += "error" in lv
            loc["differ"] += not lv["ok"] and "error" not in lv
        sig = failure_signature(rec)
        if sig is not None:
            g = groups.setdefault(sig, {"signature": sig, "runs": [], "case": None, "_size": None})
            g["runs"].append(rec["seed"])
            key = (rec.get("case_size", {}).get("transitions", 1 << 62), rec["seed"])
            if rec.get("case") and (g["_size"] is None or key < g["_size"]):
                g["case"], g["_size"] = rec["case"], key
    cov["runs"] = {s: status.get(s, 0) for s in STATUSES} | {"retried": retried, "workers_lost": list(lost or [])}
    cov["spec"] = {k: dict(sorted(v.items())) for k, v in spec.items()}
    cov["spec"]["tenants"] = dict(sorted(tenants.items(), key=lambda kv: int(kv[0])))
    cov["graph"] = against_graph(cov)
    failures = []
    for g in sorted(groups.values(), key=lambda g: (-len(g["runs"]), g["signature"])):
        g.pop("_size")
        g["runs"] = sorted(g["runs"])
        failures.append(g)
    val["seconds"] = round(val["seconds"], 3)
    return {"runs": runs, "transitions": transitions, "failures": failures, "coverage": cov, "validation": val,
            "workers": workers, "seconds": round(seconds, 3)}


def render(s: dict[str, Any], outdir: Path) -> Group:
    """The summary as rich tables."""
    cov = s["coverage"]
    r = cov["runs"]
    head = Table(title=f"kvsm campaign {outdir}", show_header=False)
    head.add_column("measure")
    head.add_column("value", justify="right")
    rate = s["transitions"] / s["seconds"] if s["seconds"] else 0.0
    head.add_row("runs (ok / failed / over budget / killed / error)", f"{s['runs']} ({r['ok']} / {r['failed']} / {r['budget']} / {r['killed']} / {r['error']})")
    head.add_row("runs retried on another worker", str(r["retried"]))
    per = cov["spec"].get("tenants", {})
    spread = sum(v for k, v in per.items() if k != "1")
    head.add_row("runs with tenants (--tenants N > 1: isolation tested)",
                 f"{spread}" + (f" ({', '.join(f'{k}: {v}' for k, v in per.items() if k != '1')})" if spread else ""))
    if r["workers_lost"]:
        head.add_row("workers lost", ", ".join(r["workers_lost"]))
    head.add_row("transitions", f"{s['transitions']:,}")
    head.add_row("workers, seconds, transitions/s (this invocation)", f"{s['workers']}, {s['seconds']:.1f}, {rate:,.0f}")
    v = s["validation"]
    note = f"{v['rejected']} rejected" + (f", {v['errors']} undecided" if v["errors"] else "")
    if v["unavailable"]:
        note = v["unavailable"]
    head.add_row(f"runs validated by TLC (--validate {v['mode']})", f"{v['validated']} ({note})")
    loc = v.get("successors") or {}
    if loc.get("runs"):
        extra = f", {loc['errors']} undecided" if loc["errors"] else ""
        head.add_row("walk runs whose successors TLC compared", f"{loc['runs']} ({loc['states']:,} states, {loc['differ']} differ{extra})")
    head.add_row("failure groups", str(len(s["failures"])))
    parts: list[Any] = [head]
    if s["failures"]:
        ft = Table(title="failures, one shrunk case per signature")
        for c in ("signature", "runs", "seeds", "case"):
            ft.add_column(c)
        for g in s["failures"]:
            seeds = ", ".join(map(str, g["runs"][:6])) + (" ..." if len(g["runs"]) > 6 else "")
            ft.add_row(g["signature"], str(len(g["runs"])), seeds, str(g["case"] or "-"))
        parts.append(ft)
    ct = Table(title="coverage")
    ct.add_column("what")
    ct.add_column("reached", justify="right")
    ct.add_column("counts")
    tr = cov["transitions"]
    ct.add_row("transitions", f"{sum(1 for v in tr.values() if v)}/{len(tr)}", _counts(tr))
    outcomes = sum(len(v) for v in cov["guards"].values())
    rejected = sum(1 for v in cov["guards"].values() for k in v if k.startswith("rejected"))
    ct.add_row("guard outcomes", f"{outcomes} ({rejected} rejection reasons)", _counts({k: sum(v.values()) for k, v in cov["guards"].items()}))
    ct.add_row("faults injected", f"{sum(1 for v in cov['faults'].values() if v)}/{len(cov['faults'])}", _counts(cov["faults"]))
    inv = cov["invariants"]
    ct.add_row("invariants evaluated", f"{sum(1 for v in inv.values() if sum(v.values()))}/{len(inv)}",
               _counts({k.split()[0]: v.get("full", 0) + v.get("step", 0) for k, v in inv.items()}))
    sc = cov["scenarios"]
    ct.add_row("spec scenarios (docs/tla.md)", f"{sum(1 for v in sc.values() if v)}/{len(sc)}",
               "; ".join(f"{k}: {v}" for k, v in sc.items() if v) or "none")
    missing = [k for k, v in sc.items() if not v]
    if missing:
        ct.add_row("scenarios not reached", str(len(missing)), "; ".join(missing))
    g = cov.get("graph")
    if g:
        k, p = g["kinds"], g["pairs"]
        ct.add_row(f"kinds of {g['config']}'s state graph", f"{k['reached']}/{k['of']}", "not reached: " + (", ".join(k["missing"]) or "none"))
        ct.add_row(f"pairs a>b of {g['config']}'s state graph", f"{p['reached']}/{p['of']} ({p['percent']:g}%)",
                   "not reached: " + (", ".join(p["missing"]) or "none") + f"; {p['beyond']} pairs beyond the graph")
    parts.append(ct)
    return Group(*parts)


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in d.items() if v) or "none"


def write_plots(records: list[dict[str, Any]], outdir: Path) -> list[Path]:
    """`coverage.png` (distinct guard outcomes, transitions and scenarios reached over the
    runs, in the order they finished) and `failures.png` (failing runs per signature over
    the runs), with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    from ..output import write_atomic

    seen_t: set[str] = set()
    seen_g: set[tuple[str, str]] = set()
    seen_s: set[str] = set()
    xs, ts, gs, ss = [], [], [], []
    per_sig: dict[str, list[int]] = {}
    fails: Counter = Counter()
    for i, rec in enumerate(records, start=1):
        c = rec.get("coverage") or {}
        seen_t.update(k for k, v in c.get("transitions", {}).items() if v)
        seen_g.update((n, k) for n, o in c.get("guards", {}).items() for k in o)
        seen_s.update(k for k, v in c.get("scenarios", {}).items() if v)
        xs.append(i)
        ts.append(len(seen_t))
        gs.append(len(seen_g))
        ss.append(len(seen_s))
        sig = failure_signature(rec)
        if sig is not None:
            fails[sig] += 1
            per_sig.setdefault(sig, [0] * (i - 1))
        for k, series in per_sig.items():
            series.append(fails[k])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(xs, gs, label="guard outcomes")
    ax.plot(xs, ts, label="transitions taken")
    ax.plot(xs, ss, label="spec scenarios")
    ax.set_xlabel("runs finished")
    ax.set_ylabel("distinct items reached")
    ax.set_title("kvsm campaign: coverage over runs")
    ax.legend()
    fig.tight_layout()
    p1 = write_atomic(outdir / "coverage.png", _png(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, series in sorted(per_sig.items()):
        ax.plot(xs, series, label=k)
    if not per_sig:
        ax.plot(xs, [0] * len(xs), label="no failure")
    ax.set_xlabel("runs finished")
    ax.set_ylabel("failing runs")
    # counts: whole numbers from 0 (a flat 0 would otherwise get an axis from -0.04 to 0.04)
    ax.set_ylim(0, max([1] + [max(v) for v in per_sig.values() if v]))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("kvsm campaign: failures over runs, per signature")
    ax.legend(fontsize="small")
    fig.tight_layout()
    p2 = write_atomic(outdir / "failures.png", _png(fig))
    plt.close(fig)
    return [p1, p2]


def _png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
