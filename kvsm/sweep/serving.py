"""A sweep's serving plots: for every capacity axis with more than one value, the
prefill tokens saved (all tiers and each) and the estimated time to first token (mean
and p99) against the pages the run had, one curve per combination of the other varying
options but the seed (the mean over the seeds, their range shaded: `serving_<axis>.png`;
docs/sim.md, "Bytes and serving figures")."""

from __future__ import annotations

from typing import Any

from ..sim.report import _png
from .grid import CAPACITIES, OPTION, Axes
from .seeds import aggregate, bounded_legend, curves, legend_columns, seeds_of

# (panel title, how to read the value off a record's sim summary)
PANELS = (
    ("prefill tokens saved, all tiers", lambda s: s["tokens_saved"]["total"]),
    ("tokens saved from L2 and L3", lambda s: s["tokens_saved"]["l2"] + s["tokens_saved"]["l3"]),
    ("TTFT estimate, mean (ms)", lambda s: s["ttft_ms"]["mean"]),
    ("TTFT estimate, p99 (ms)", lambda s: s["ttft_ms"]["p99"]),
)


def render_serving_plots(axes: Axes, records: list[dict[str, Any]]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out: dict[str, bytes] = {}
    for field, key, xlabel in CAPACITIES:
        if field not in axes.varying():
            continue
        groups = {n: [r for r in rs if "ttft_ms" in r["sim"]] for n, rs in curves(axes, records, field, key).items()}
        groups = {n: rs for n, rs in groups.items() if rs}
        if not groups:
            continue
        fig = Figure(figsize=(12.6, 3.8), dpi=90, layout="constrained")
        grid = fig.subplots(1, len(PANELS), squeeze=False)[0]
        xs_all = sorted({r["sim"]["config"][key] for rs in groups.values() for r in rs})
        for ax, (title, value) in zip(grid, PANELS):
            top = max(value(r["sim"]) for rs in groups.values() for r in rs)
            for i, (cname, recs) in enumerate(groups.items()):
                agg = aggregate(recs, field, key, lambda r, value=value: value(r["sim"]))
                color = f"C{i % 10}"
                ax.plot([a.x for a in agg], [a.mean for a in agg], marker=".", color=color, ls=("-", "--", "-.", ":")[i % 4], label=cname)
                if any(a.n > 1 for a in agg):  # the seeds' range
                    ax.fill_between([a.x for a in agg], [a.lo for a in agg], [a.hi for a in agg], color=color, alpha=0.15, lw=0)
            if xs_all and xs_all[0] > 0 and xs_all[-1] >= 10 * xs_all[0]:
                ax.set_xscale("log")
            ax.set_ylim(0, top * 1.1 or 1)
            ax.grid(alpha=0.3)
            ax.set_title(title, fontsize="medium")
            ax.set_xlabel(xlabel)
        handles, labels = bounded_legend(*grid[0].get_legend_handles_labels())
        if len(labels) > 1:
            fig.legend(handles, labels, loc="outside lower center", ncol=legend_columns(labels, fig.get_figwidth()), frameon=False, fontsize="small")
        model = next(iter(groups.values()))[0]["sim"]["serving"]["model"]
        n = max(seeds_of(rs) for rs in groups.values())
        fig.suptitle(f"kvsm sweep: tokens saved and TTFT estimate against {OPTION[field]} ({model['name']}{'' if model['given'] else ', the default model'})"
                     + (f", mean of {n} seeds (shaded: min to max)" if n > 1 else ""))
        out[f"serving_{field}.png"] = _png(fig)
    return out
