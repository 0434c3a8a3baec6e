"""A sweep's outputs from its records: `results.csv`, the knees, the plots of hit rate
against each capacity axis and the one-file HTML report.

A curve is the points that differ only in one capacity (`--l1-pages`, `--l2-pages` or
`--l3-pages`) and the seed, plotted against the pages the run had (the resolved
config's L1, L2 or L3, so `0`, "enough for the whole workload", is placed where it
belongs): the mean over the seeds, their range shaded (`kvsm.sweep.seeds`). Its knee
is the smallest capacity whose (mean) hit rate is within 1% of the curve's best:
`hit rate >= (1 - 0.01) x best`.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from ..output import write_atomic, write_csv_rows
from ..sim.report import _png, flat_rows
from .grid import AXES, CAPACITIES, OPTION, Axes, show, used
from .seeds import SEED, SEEDS_CSV, aggregate, bounded_legend, curves, legend_columns, seeds_of, write_seeds_csv

KNEE_WITHIN = 0.01
TIERS = ("l1", "l2", "l3")
MEASURES = (("blocks", "block hit rate"), ("tokens", "token hit rate"))
# the option fields a record's columns start with
_FIELDS = [name for name, _, _ in AXES] + ["check"]


def knee(curve: list[tuple[float, float]], within: float = KNEE_WITHIN) -> tuple[float, float] | None:
    """The (capacity, hit rate) of the smallest capacity whose hit rate is at least
    `(1 - within)` times the curve's best; None for an empty curve."""
    if not curve:
        return None
    best = max(y for _, y in curve)
    return min(((x, y) for x, y in curve if y >= (1 - within) * best), key=lambda p: p[0])


# ---- the table ------------------------------------------------------------------------------


def row(rec: dict[str, Any]) -> dict[str, str]:
    """A record as one CSV row: the point and its status, its options, its hit rates per
    tier, then every field of `kvsm sim --json` (`sim.` + its dotted name)."""
    opts = rec["options"]
    ordered: dict[str, Any] = {"point": rec["point"], "status": rec.get("status")}
    ordered.update({f: opts.get(f) for f in _FIELDS})
    for k in ("hit_rate", "tokens_hit", "tokens_saved", "ttft_ms", "sim", "command", "transitions", "worker", "seconds", "attempts", "error"):
        if k in rec:
            ordered[k] = rec[k]
    if "workers" in rec:
        ordered["workers"] = " ".join(rec["workers"])
    return dict(flat_rows(ordered))


def write_csv(records: list[dict[str, Any]], path: Path) -> Path:
    """One row per record; the columns are the union of the rows' names, in the order
    they first appear (a field a point has not, e.g. a fault it did not inject, is empty)."""
    return write_csv_rows([row(r) for r in records], path)


# ---- curves and knees -----------------------------------------------------------------------


def knees(axes: Axes, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every capacity axis with more than one value, every curve and both measures:
    the knee and the curve's best."""
    out = []
    for field, key, _ in CAPACITIES:
        if field not in axes.varying():
            continue
        for name, recs in curves(axes, records, field, key).items():
            for measure, _ in MEASURES:
                pts = [(a.x, a.mean) for a in aggregate(recs, field, key, lambda r: r["hit_rate"][measure])]
                k = knee(pts)
                if k is not None:
                    out.append({"axis": OPTION[field], "curve": name, "measure": measure, "knee_pages": k[0],
                                "hit_rate": round(k[1], 6), "best": round(max(y for _, y in pts), 6), "seeds": seeds_of(recs)})
    return out


# ---- plots ----------------------------------------------------------------------------------


def render_plots(axes: Axes, records: list[dict[str, Any]]) -> dict[str, bytes]:
    """`hit_rate_<axis>.png` for every capacity axis with more than one value: block hit
    rate (top row) and token hit rate (bottom), of all tiers (left, each curve's knee
    marked) and of each tier the points have (the curves with that tier); one curve per
    combination of the other varying options (the eviction policy among them)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out: dict[str, bytes] = {}
    for field, key, xlabel in CAPACITIES:
        if field not in axes.varying():
            continue
        groups = curves(axes, records, field, key)
        if not groups:
            continue
        tiers = [t for t in TIERS if any(t in r["options"]["tiers"].split(",") for rs in groups.values() for r in rs)]
        cols = ["all"] + tiers
        fig = Figure(figsize=(3.6 * len(cols) + 0.6, 6.4), dpi=90, layout="constrained")
        grid = fig.subplots(2, len(cols), squeeze=False, sharex=True)
        colors = [f"C{i % 10}" for i in range(len(groups))]
        styles = [("-", "--", "-.", ":")[i % 4] for i in range(len(groups))]  # curves that coincide stay visible
        xs_all = sorted({r["sim"]["config"][key] for rs in groups.values() for r in rs})
        for i, (measure, mlabel) in enumerate(MEASURES):
            for j, col in enumerate(cols):
                ax = grid[i][j]
                name = measure if col == "all" else f"{measure}_{col}"
                for (cname, recs), color, ls in zip(groups.items(), colors, styles):
                    if col != "all" and col not in recs[0]["options"]["tiers"].split(","):
                        continue  # a curve whose points have not this tier
                    agg = aggregate(recs, field, key, lambda r: r["hit_rate"][name])
                    pts = [(a.x, a.mean) for a in agg]
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker=".", color=color, ls=ls, label=cname)
                    if any(a.n > 1 for a in agg):  # the seeds' range
                        ax.fill_between([a.x for a in agg], [a.lo for a in agg], [a.hi for a in agg], color=color, alpha=0.15, lw=0)
                    if col == "all":
                        k = knee(pts)
                        if k is not None:
                            ax.plot([k[0]], [k[1]], marker="o", ms=10, mfc="none", mec=color, mew=2)
                            ax.axvline(k[0], color=color, ls=":", lw=1)
                if xs_all and xs_all[0] > 0 and xs_all[-1] >= 10 * xs_all[0]:
                    ax.set_xscale("log")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.set_title(f"{mlabel}, {'all tiers (o: knee)' if col == 'all' else col.upper() + ' hits'}", fontsize="medium")
                if i == 1:
                    ax.set_xlabel(xlabel)
        handles, labels = bounded_legend(*grid[0][0].get_legend_handles_labels())
        if labels:
            fig.legend(handles, labels, loc="outside lower center", ncol=legend_columns(labels, fig.get_figwidth()), frameon=False, fontsize="small")
        n = max(seeds_of(rs) for rs in groups.values())
        fig.suptitle(f"kvsm sweep: hit rate against {OPTION[field]}" + (f" (mean of {n} seeds, shaded: min to max)" if n > 1 else ""))
        out[f"hit_rate_{field}.png"] = _png(fig)
    return out


# ---- the HTML report ------------------------------------------------------------------------

# the report's table: (heading, how to read it off a record)
_MEASURE_COLUMNS = [
    ("block hit rate", lambda r: f"{r['hit_rate']['blocks']:.4f}"),
    ("token hit rate", lambda r: f"{r['hit_rate']['tokens']:.4f}"),
    ("blocks L1 / L2 / L3", lambda r: " / ".join(f"{r['hit_rate'][f'blocks_{t}']:.4f}" for t in TIERS)),
    ("tokens L1 / L2 / L3", lambda r: " / ".join(f"{r['hit_rate'][f'tokens_{t}']:.4f}" for t in TIERS)),
    ("tokens saved", lambda r: f"{r['sim']['tokens_saved']['total']:,}" if "tokens_saved" in r["sim"] else "-"),
    ("TTFT ms mean / p99 (estimate)", lambda r: f"{r['sim']['ttft_ms']['mean']:,.1f} / {r['sim']['ttft_ms']['p99']:,.1f}" if "ttft_ms" in r["sim"] else "-"),
    ("L1 / L2 / L3 pages", lambda r: " / ".join(str(r["sim"]["config"][t.upper()]) if t in r["options"]["tiers"].split(",") else "-" for t in TIERS)),
    ("evicted L1 / L2", lambda r: f"{r['sim']['evictions']['l1']} / {r['sim']['evictions']['l2']}"),
    ("transitions", lambda r: str(r["transitions"])),
    ("seconds", lambda r: str(r.get("seconds", ""))),
]


def grid_values(name: str, values: tuple[Any, ...], records: list[dict[str, Any]]) -> list[str]:
    """An axis's values as the report's grid shows them: those given, or (an option not
    given) the values its points ran with."""
    if values != (None,):
        return [show(name, v) for v in values]
    return list(dict.fromkeys(used(name, r) for r in records)) or ["-"]


def render_html(axes: Axes, records: list[dict[str, Any]], summary: dict[str, Any], plots: dict[str, bytes]) -> str:
    """One self-contained page: the grid, the knees, the plots inline, one row per point."""
    e = html.escape
    shown = axes.varying() or [n for n, _, _ in AXES]
    imgs = "\n".join(f'<figure><img alt="{e(n)}" src="data:image/png;base64,{base64.b64encode(d).decode()}"></figure>' for n, d in plots.items())
    grid_rows = "\n".join(f"<tr><th>{e(OPTION[n])}</th><td>{e(' | '.join(grid_values(n, vs, records)))}</td></tr>" for n, vs in axes.values)
    grid_rows += f"\n<tr><th>--check</th><td>{'yes' if axes.check else 'no'}</td></tr>"
    knee_rows = "\n".join(
        f"<tr><td>{e(k['axis'])}</td><td>{e(k['curve'])}</td><td>{e(k['measure'])}</td><td>{k['knee_pages']}</td>"
        f"<td>{k['hit_rate']:.4f}</td><td>{k['best']:.4f}</td><td>{k.get('seeds', 1)}</td></tr>"
        for k in summary["knees"]
    )
    head = "".join(f"<th>{e(OPTION[n])}</th>" for n in shown) + "<th>status</th>" + "".join(f"<th>{e(h)}</th>" for h, _ in _MEASURE_COLUMNS)
    body = []
    for r in records:
        opts = r["options"]
        cells = "".join(f"<td>{e(used(n, r))}</td>" for n in shown) + f"<td>{e(r.get('status', '?'))}</td>"
        if r.get("status") == "ok":
            cells += "".join(f"<td>{e(f(r))}</td>" for _, f in _MEASURE_COLUMNS)
        else:
            why = (r.get("sim") or {}).get("stopped", {}).get("message") or r.get("error", "")
            cells += f'<td colspan="{len(_MEASURE_COLUMNS)}">{e(str(why))}</td>'
        body.append(f'<tr title="{e(r.get("command", ""))}">{cells}</tr>')
    n = summary["status"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kvsm sweep</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ text-align: left; padding: 0.15em 1em 0.15em 0; border-bottom: 1px solid #ddd; font-size: 0.9em; }}
th {{ font-weight: 500; color: #444; }}
td {{ white-space: nowrap; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>kvsm sweep</h1>
<p>{summary['points']} points ({', '.join(f'{v} {k}' for k, v in n.items() if v) or 'none run'}); this invocation ran
{summary['ran']} of them on {summary['workers']} workers in {summary['seconds']:.1f} s. Every point is one
<code>kvsm sim</code> run (hover a row for its command); all fields are in <code>results.csv</code> and
<code>results.jsonl</code>.</p>
<h2>Grid</h2>
<table>
{grid_rows}
</table>
<h2>Knees</h2>
<p>The smallest capacity whose hit rate is within {KNEE_WITHIN:.0%} of the best on its curve (pages the run had; over several seeds, of the mean).</p>
<table><tr><th>axis</th><th>curve</th><th>measure</th><th>knee (pages)</th><th>hit rate there</th><th>best</th><th>seeds</th></tr>
{knee_rows or '<tr><td colspan="7">no capacity axis has more than one value</td></tr>'}
</table>
<h2>Plots</h2>
{imgs or '<p>No capacity axis has more than one value: nothing to plot.</p>'}
<h2>Points</h2>
<table><tr>{head}</tr>
{chr(10).join(body)}
</table>
</body></html>
"""


REPORT = "report.html"
CSV = "results.csv"


def write_outputs(axes: Axes, records: list[dict[str, Any]], summary: dict[str, Any], outdir: Path) -> list[Path]:
    """`results.csv` (and `results_seeds.csv` over several seeds, `isolation.csv` over
    several tenant counts), the plots and `report.html` in `outdir`, each written
    atomically."""
    paths = [write_csv(records, outdir / CSV)]
    if SEED in axes.varying():
        paths.append(write_seeds_csv([row(r) for r in records], outdir / SEEDS_CSV))
    from .isolation import ISOLATION_CSV, isolation_rows, render_isolation, write_isolation_csv
    from .serving import render_serving_plots

    isolation = isolation_rows(axes, records)
    if isolation:
        paths.append(write_isolation_csv(isolation, outdir / ISOLATION_CSV))
    plots = render_plots(axes, records) | render_serving_plots(axes, records) | render_isolation(isolation)
    for name, data in plots.items():
        write_atomic(outdir / name, data)
        paths.append(outdir / name)
    write_atomic(outdir / REPORT, render_html(axes, records, summary, plots).encode())
    paths.append(outdir / REPORT)
    return paths
