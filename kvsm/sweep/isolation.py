"""The price of isolation over a sweep's `--tenants` list (docs/sim.md, "Tenants"):
`isolation.csv` and `isolation.png`, the block hit rate isolated (each tenant its own
namespace) and shared (every request in one) against the tenant count.

A curve is the points that differ only in `--tenants` and the seed (the other varying
options name it, as the capacity curves are named); at one tenant count its values are
the means over the seeds. A point of one tenant is its own baseline: isolated and shared
are its hit rate, the price 0.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..output import write_csv_rows
from .grid import Axes, Point, label

TENANTS = "tenants"
ISOLATION_CSV = "isolation.csv"
ISOLATION_PNG = "isolation.png"
MEASURES = ("blocks", "tokens")


def rates(rec: dict[str, Any]) -> dict[str, float]:
    """A point's hit rates isolated and shared, and the price, in blocks and tokens."""
    t = rec["sim"].get("tenants")
    out = {}
    for m in MEASURES:
        iso = rec["hit_rate"][m]
        sh = t["shared"][f"hit_rate_{m}"] if t is not None else iso
        out |= {f"isolated_{m}": iso, f"shared_{m}": sh, f"price_{m}": sh - iso}
    return out


def isolation_rows(axes: Axes, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per curve and tenant count (the ok records): `curve`, `tenants`, `seeds`,
    and the means over the seeds of `isolated_*`, `shared_*` and `price_*` (blocks,
    tokens); none unless `--tenants` has more than one value."""
    if TENANTS not in axes.varying():
        return []
    varying = axes.varying()
    mix_varies = "tenant_mix" in varying
    others = [n for n in varying if n not in (TENANTS, "seed", "tenant_mix")]
    curves: dict[str, dict[int, list[dict[str, float]]]] = {}
    for rec in records:
        if rec.get("status") != "ok":
            continue
        p = Point.from_json(rec["options"])
        n = p.tenants or 1
        base = label(p, others) if others else ""
        # a point of one tenant has no mix: it starts the curve of every mix
        mixes = axes.given()["tenant_mix"] if n == 1 and mix_varies else (p.tenant_mix,)
        for mix in mixes:
            name = " ".join(x for x in (base, f"--tenant-mix {mix:g}" if mix_varies else "") if x) or "all points"
            curves.setdefault(name, {}).setdefault(n, []).append(rates(rec))
    out = []
    for name, by_n in curves.items():
        for n, rs in sorted(by_n.items()):
            row: dict[str, Any] = {"curve": name, "tenants": n, "seeds": len(rs)}
            for k in rs[0]:
                row[k] = round(statistics.fmean(r[k] for r in rs), 6)
            out.append(row)
    return out


def write_isolation_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    return write_csv_rows([{k: str(v) for k, v in r.items()} for r in rows], path)


def render_isolation(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    """`isolation.png`: per curve, the block hit rate isolated (solid) and shared (dashed)
    against the tenant count (left), and the price of isolation, shared minus isolated
    (right); none without rows."""
    if not rows:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from ..sim.report import _png
    from .seeds import bounded_legend, legend_columns

    curves: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        curves.setdefault(r["curve"], []).append(r)
    fig = Figure(figsize=(10.6, 4.6), dpi=90, layout="constrained")
    left, right = fig.subplots(1, 2)
    ns = sorted({r["tenants"] for r in rows})
    for i, (name, rs) in enumerate(curves.items()):
        color = f"C{i % 10}"
        xs = [r["tenants"] for r in rs]
        left.plot(xs, [r["isolated_blocks"] for r in rs], marker="o", color=color, label=f"{name}: isolated")
        left.plot(xs, [r["shared_blocks"] for r in rs], marker=".", ls="--", color=color, label=f"{name}: shared")
        right.plot(xs, [r["price_blocks"] for r in rs], marker="o", color=color, label=name)
    for ax, title in ((left, "block hit rate, isolated (solid) and shared (dashed)"), (right, "price of isolation: shared - isolated")):
        if ns[-1] >= 8 * ns[0]:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("tenants (namespaces)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(title, fontsize="medium")
    handles, labels = bounded_legend(*left.get_legend_handles_labels())
    if len(curves) > 1 or list(curves) != ["all points"]:
        fig.legend(handles, labels, loc="outside lower center", ncol=legend_columns(labels, fig.get_figwidth()), frameon=False, fontsize="small")
    seeds = max(r["seeds"] for r in rows)
    fig.suptitle("kvsm sweep: the price of isolation against --tenants" + (f" (mean of {seeds} seeds)" if seeds > 1 else ""))
    return {ISOLATION_PNG: _png(fig)}
