"""Plots (PNG, matplotlib's headless Agg backend) and a self-contained HTML report.

Every file is written through kvsm/output.py: beside its destination and renamed into
place, so a failure leaves no partial file and never clobbers an existing one half-way.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from ..output import write_atomic
from .options import CLOCKLESS
from .runner import SimResult

PLOTS = ("hit_rate.png", "occupancy.png", "lanes.png")  # what `write_plots` writes


def _axis(result: SimResult) -> tuple[list[float], str, float]:
    """The samples' x values, the axis label and where the axis ends: the whole simulated
    time (timed and random schedules) or every request (serial and walk, which have no
    clock). The end is never 0: a run of zero width (no request, no simulated time) is
    drawn on an axis one unit wide, not on a singular one."""
    if result.summary["schedule"] not in CLOCKLESS:
        x, label, end = [s.t_ms / 1000 for s in result.samples], "simulated time (s)", result.summary["simulated_ms"] / 1000
    else:
        x, label, end = [float(s.requests) for s in result.samples], "requests served", float(result.summary["requests"])
    return x, label, max([end, *x]) or 1.0


def smoothed_hit_rate(result: SimResult, share: float = 0.05) -> list[float | None]:
    """The block hit rate over a moving window of about `share` of the run's prompt pages
    (at least 1): the pages hit over the pages asked for in the window ending at each
    sample; None before any page."""
    samples = result.samples
    window = max(1, int(share * (samples[-1].pages if samples else 0)))
    out: list[float | None] = []
    j = 0
    for s in samples:
        # the window starts at the last sample at least `window` pages back
        while j + 1 < len(samples) and s.pages - samples[j + 1].pages >= window:
            j += 1
        base = samples[j] if s.pages - samples[j].pages >= window else None
        h0, p0 = (base.hits, base.pages) if base is not None else (0, 0)
        out.append((s.hits - h0) / (s.pages - p0) if s.pages > p0 else (out[-1] if out else None))
    return out


def _legend(ax: Any, **kw: Any) -> None:
    # below the axes, so no legend hides a curve
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4, frameon=False, **kw)


def _ranks_panel(ax: Any, x: list[float], rows: list[tuple[float, ...]], label: str, end: float, xlabel: str) -> None:
    """One line per rank up to 8 ranks; a heat map (rank by time) beyond."""
    R = len(rows[0]) if rows else 0
    if R <= 8:
        for r in range(R):
            ax.plot(x, [row[r] for row in rows], lw=1.2, label=f"rank {r}")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(label)
        _legend(ax, fontsize="small")
    else:
        import numpy as np  # noqa: PLC0415 - matplotlib's own dependency

        # sample i holds from its time to the next sample's (samples are not evenly spaced)
        edges = list(x) + [max(end, x[-1])]
        img = ax.pcolormesh(edges, np.arange(R + 1) - 0.5, np.array(rows).T, vmin=0, vmax=1, cmap="viridis", shading="flat")
        ax.set_ylabel("rank")
        ax.figure.colorbar(img, ax=ax, label=label, pad=0.01)
    ax.set_xlim(0, end)
    ax.set_xlabel(xlabel)
    if R <= 8:
        ax.grid(alpha=0.3)


def render_plots(result: SimResult) -> dict[str, bytes]:
    """PNG bytes by file name: `hit_rate.png` (smoothed and cumulative block hit rate),
    `occupancy.png` (each tier in use), `lanes.png` (each rank's device lane and, with
    L3, each rank's disk)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    x, xlabel, end = _axis(result)
    s = result.summary
    title = f"{s['workload']['name']}, {s['requests']} requests, {s['config']['R']} ranks, seed {s['seed']}"
    out: dict[str, bytes] = {}

    fig = Figure(figsize=(9, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    smooth = smoothed_hit_rate(result)
    ax.plot(x, [v if v is not None else float("nan") for v in smooth], lw=1.2, color="tab:blue", label="moving (last 5% of pages)")
    ax.plot(x, [p.hit_rate for p in result.samples], lw=2.2, color="tab:orange", label="cumulative")
    ax.set_ylim(0, 1)
    ax.set_xlim(0, end)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("block hit rate (all tiers)")
    ax.set_title(f"Hit rate: {title}")
    ax.grid(alpha=0.3)
    _legend(ax)
    out["hit_rate.png"] = _png(fig)

    fig = Figure(figsize=(9, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    tiers = s["tiers"].split(",")
    c = s["config"]
    ax.plot(x, [p.l1_used for p in result.samples], label=f"L1 (device, {c['R']} x {c['L1']} pages)")
    if "l2" in tiers:
        ax.plot(x, [p.l2_used for p in result.samples], label=f"L2 (shared host, {c['L2']} pages)")
    if "l3" in tiers:
        ax.plot(x, [p.l3_used for p in result.samples], label=f"L3 (disks, {c['R']} x {c['L3']} pages)")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(0, end)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("pages in use (fraction of capacity)")
    ax.set_title(f"Tier occupancy: {title}")
    ax.grid(alpha=0.3)
    _legend(ax)
    out["occupancy.png"] = _png(fig)

    l3 = bool(result.samples and result.samples[0].l3_ranks)
    fig = Figure(figsize=(9, 7 if l3 else 4.5), dpi=100, layout="constrained")
    axes = fig.subplots(2 if l3 else 1, 1, squeeze=False)[:, 0]
    _ranks_panel(axes[0], x, [p.l1_lanes for p in result.samples], "device lane in use (fraction)", end, xlabel)
    axes[0].set_title(f"L1 per rank (each lane {c['L1']} pages): {title}")
    if l3:
        _ranks_panel(axes[1], x, [p.l3_ranks for p in result.samples], "disk in use (fraction)", end, xlabel)
        axes[1].set_title(f"L3 per rank (each disk {c['L3']} pages)")
    out["lanes.png"] = _png(fig)
    return out


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def write_plots(result: SimResult, directory: str | Path) -> list[Path]:
    d = Path(directory)
    paths = []
    for name, data in render_plots(result).items():
        p = d / name
        write_atomic(p, data)
        paths.append(p)
    return paths


def flat_rows(summary: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The summary as (name, value) rows; nested objects become dotted names."""
    rows = []
    for k, v in summary.items():
        if isinstance(v, dict):
            rows.extend(flat_rows(v, f"{prefix}{k}."))
        else:
            rows.append((f"{prefix}{k}", "" if v is None else str(v)))
    return rows


# The report's tables: (title, [(label, dotted summary key)]). Every key of the summary
# is in one of them; one that is not (a measure added later) goes to "Other".
GROUPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Run", [
        ("workload", "workload.name"), ("source", "workload.source"), ("requests in the workload", "workload.requests"),
        ("prompt pages in the workload", "workload.pages"), ("tokens per block", "workload.block_tokens"),
        ("trace sha256", "workload.sha256"), ("seed", "seed"), ("schedule", "schedule"), ("replicas compared", "replicas"), ("tiers", "tiers"),
        ("faults asked for", "faults"), ("simulated time (ms)", "simulated_ms"), ("scheduler iterations", "iterations"),
        ("transitions", "transitions"), ("sync points", "sync_points"), ("wall time (s)", "seconds"),
        ("final digest", "final_digest"), ("log", "log"),
    ]),
    ("Config", [
        ("name", "config.name"), ("ranks (R)", "config.R"), ("tokens per page (P)", "config.P"),
        ("L1 pages per rank lane", "config.L1"), ("L2 pages (shared host)", "config.L2"), ("L3 pages per rank disk", "config.L3"),
        ("policy", "config.policy"), ("eviction", "config.eviction"), ("write threshold", "config.write_threshold"),
        ("load-back threshold (tokens)", "config.load_back_threshold"), ("spills in flight", "config.spill_inflight"),
        ("reloads in flight", "config.reload_inflight"), ("spill queue capacity", "config.spill_queue_cap"),
        ("reload ttl (ticks)", "config.reload_ttl"),
    ]),
    ("Hits", [
        ("block hit rate", "hit_rate_blocks"), ("token hit rate", "hit_rate_tokens"), ("requests admitted", "requests"),
        ("prompt pages", "pages_total"), ("hit on L1", "pages_hit_l1"), ("hit on L2 (loaded back)", "pages_hit_l2"),
        ("hit on L3 (reloaded)", "pages_hit_l3"), ("recomputed", "pages_recomputed"), ("not cached (did not fit)", "pages_uncached"),
        ("prompt tokens", "tokens_total"), ("tokens hit", "tokens_hit"),
    ]),
    ("Bytes and serving figures (estimates, docs/sim.md)", [
        ("model", "serving.model.name"), ("model given (false: the default)", "serving.model.given"),
        ("layers", "serving.model.layers"), ("KV heads", "serving.model.kv_heads"), ("head dim", "serving.model.head_dim"),
        ("MLA kv_lora_rank", "serving.model.kv_lora_rank"), ("MLA rope head dim", "serving.model.rope_head_dim"),
        ("dtype", "serving.model.dtype"), ("KV bytes per token", "serving.model.bytes_per_token"), ("bytes per page", "serving.page_bytes"),
        *((f"{t.upper()} {what} ({unit})", f"capacity.{t}.{unit}") for t, what in (("l1", "per rank"), ("l2", "shared"), ("l3", "per rank"))
          for unit in ("pages", "tokens", "bytes")),
        *((f"prefill tokens saved, {t}", f"tokens_saved.{t}") for t in ("l1", "l2", "l3", "total")),
        *((f"tokens recomputed per request, {q}", f"tokens_recomputed.{q}") for q in ("mean", "p50", "p99")),
        ("tokens recomputed, all requests", "tokens_recomputed.total"),
        *((f"TTFT estimate (ms), {q}", f"ttft_ms.{q}") for q in ("mean", "p50", "p99", "max")),
        *((f"bytes moved {a} -> {b}", f"bytes_moved.{a.lower()}_to_{b.lower()}") for a, b in (("L1", "L2"), ("L2", "L1"), ("L2", "L3"), ("L3", "L2"))),
        ("prefill tokens per second per rank", "serving.prefill_tps"), ("host-to-device GB/s per rank", "serving.l2_gbps"),
        ("disk-to-host GB/s per rank", "serving.l3_gbps"), ("reload ttl (seconds)", "config.reload_ttl_s"),
    ]),
    ("Requests", [
        ("finished", "requests_finished"), ("aborted by a fault", "requests_aborted"), ("not cached", "requests_uncached"),
        ("held for a reload", "requests_held"),
    ]),
    ("Pages moved and evicted", [
        ("L1 -> L2 (backups written)", "pages_moved.l1_to_l2"), ("L2 -> L1 (load-backs)", "pages_moved.l2_to_l1"),
        ("L2 -> L3 (spilled)", "pages_moved.l2_to_l3"), ("L3 -> L2 (reloaded)", "pages_moved.l3_to_l2"),
        ("evicted from L1", "evictions.l1"), ("evicted from L2", "evictions.l2"), ("load-backs", "loadbacks"),
        ("load-backs refused", "loadbacks_refused"),
    ]),
    ("Backups", [
        ("reserved", "backups_reserved"), ("committed", "backups_committed"), ("rolled back", "backups_rolled_back"),
        ("write-back waits", "write_back_waits"), ("reserves that did not fit (evictions kept)", "reserves_failed"),
        ("prepared (write-through, before the forward pass)", "backups_prepared"),
        ("prepares that did not fit", "prepares_failed"), ("prepared and attached at insert", "prepared_attached"),
        ("prepared and rolled back", "prepared_rolled_back"),
    ]),
    ("L3", [
        ("spills submitted", "spills_submitted"), ("spills durable", "spills_durable"), ("spills failed", "spills_failed"),
        ("spills stale", "spills_stale"), ("reloads reserved", "reloads_reserved"), ("reloads admitted", "reloads_admitted"),
        ("reloads aborted", "reloads_aborted"), ("waiters released by the ttl", "reloads_expired"),
        ("reload wait, mean (ticks)", "reload_wait_ticks.mean"), ("reload wait, max (ticks)", "reload_wait_ticks.max"),
    ]),
]
_BY_NAME = ("faults_injected", "transitions_by_name")  # tables of their own: one row per fault, per transition


def grouped_tables(summary: dict[str, Any]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The summary as titled tables of (label, key, value); every key appears once."""
    flat = dict(flat_rows({k: v for k, v in summary.items() if k not in _BY_NAME}))
    used: set[str] = set()
    out: list[tuple[str, list[tuple[str, str, str]]]] = []
    for title, items in GROUPS:
        if title == "L3" and not summary["config"]["L3"]:
            used.update(k for _, k in items)
            continue
        rows = [(label, k, flat[k]) for label, k in items if k in flat]
        used.update(k for _, k, _ in rows)
        out.append((title, rows))
    for key, title in (("faults_injected", "Faults injected"), ("transitions_by_name", "Transitions by name")):
        rows = [(name, f"{key}.{name}", str(n)) for name, n in summary.get(key, {}).items()]
        out.append((title, rows or [("none", key, "0")]))
    # with more than one namespace (docs/sim.md, "Tenants"): isolated and shared, per namespace
    tenants = [(k.removeprefix("tenants.").replace(".", ", ").replace("_", " "), k, v) for k, v in flat.items() if k.startswith("tenants.")]
    if tenants:
        used.update(k for _, k, _ in tenants)
        out.insert(3, ("Tenants: hit rates isolated and shared", tenants))
    rest = [(k, k, v) for k, v in flat.items() if k not in used]
    if rest:
        out.append(("Other", rest))
    return out


def _serving_headline(s: dict[str, Any]) -> str:
    """What the cache saved: prefill tokens per tier and the TTFT estimate (docs/sim.md,
    "Bytes and serving figures"); empty for a summary without them."""
    if "ttft_ms" not in s:
        return ""
    t, f, m = s["tokens_saved"], s["ttft_ms"], s["serving"]["model"]
    return (f'<p class="headline">prefill tokens saved <b>{t["total"]:,}</b> of {s["tokens_total"]:,} (L1 {t["l1"]:,}, '
            f'L2 {t["l2"]:,}, L3 {t["l3"]:,}); TTFT estimate <b>{f["mean"]:,.1f} ms</b> mean, {f["p99"]:,.1f} ms p99 '
            f'({html.escape(m["name"])}{"" if m["given"] else ", the default model"}; an estimate from assumed rates)</p>')


def _tenant_headline(s: dict[str, Any]) -> str:
    """With more than one namespace: the hit rate isolated and shared, and their difference."""
    t = s.get("tenants")
    if t is None:
        return ""
    return (f'\n<p class="headline">{t["namespaces"]} namespaces: block hit rate isolated <b>{t["isolated"]["hit_rate_blocks"]:.4f}</b>, '
            f'shared {t["shared"]["hit_rate_blocks"]:.4f}; the price of isolation <b>{t["price_of_isolation"]["blocks"]:.4f}</b> of the blocks</p>')


def render_html(result: SimResult, steps: list[tuple[str, str, str]] | None = None, title: str | None = None) -> str:
    """The report: headline, plots, the summary's tables; with `steps` ((step, result,
    time) rows, as `kvsm run` has them), a table of them first."""
    s = result.summary
    plots = render_plots(result)
    captions = {
        "hit_rate.png": "Block hit rate: over the last 5% of the run's prompt pages (moving) and since the start (cumulative).",
        "occupancy.png": "Pages in use in each tier, as a fraction of its capacity.",
        "lanes.png": "Each rank's device lane (and, with L3, each rank's disk) in use.",
    }
    imgs = "\n".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        f"<figcaption>{html.escape(captions.get(name, name))}</figcaption></figure>"
        for name, data in plots.items()
    )
    tables = "\n".join(
        f'<section><h3>{html.escape(title)}</h3><table>\n'
        + "\n".join(f'<tr><th>{html.escape(label)}</th><td>{html.escape(v)}</td><td class="key"><code>{html.escape(k)}</code></td></tr>' for label, k, v in rows)
        + "\n</table></section>"
        for title, rows in grouped_tables(s)
    )
    title = title or f"kvsm sim: {s['workload']['name']}, seed {s['seed']}"
    step_table = "" if not steps else (
        "<h2>Steps</h2>\n<table>\n<tr><th>step</th><th>result</th><th>time</th></tr>\n"
        + "\n".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in steps)
        + "\n</table>"
    )
    l3 = f" + L3 {s['pages_hit_l3']}" if s["config"]["L3"] else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
th, td {{ text-align: left; padding: 0.15em 1em 0.15em 0; border-bottom: 1px solid #ddd; font-size: 0.9em; }}
th {{ font-weight: 500; color: #444; min-width: 16em; }}
td.key code {{ color: #888; font-size: 0.85em; }}
img {{ max-width: 100%; }}
figcaption {{ color: #555; font-size: 0.9em; }}
.headline {{ font-size: 1.2em; }}
.tables {{ display: flex; flex-wrap: wrap; gap: 0 3em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="headline">block hit rate <b>{s['hit_rate_blocks']:.4f}</b> (L1 {s['pages_hit_l1']} + L2 {s['pages_hit_l2']}{l3} of
{s['pages_total']} pages), token hit rate <b>{s['hit_rate_tokens']:.4f}</b>, {s['requests']} requests on {s['config']['R']} ranks,
{s['transitions']} transitions, {s['simulated_ms'] / 1000:.1f} s simulated in {s['seconds']} s.</p>
{_serving_headline(s)}{_tenant_headline(s)}
{step_table}
<h2>Plots</h2>
{imgs}
<h2>Summary</h2>
<div class="tables">
{tables}
</div>
</body></html>
"""


def write_report(result: SimResult, path: str | Path, steps: list[tuple[str, str, str]] | None = None, title: str | None = None) -> Path:
    return write_atomic(path, render_html(result, steps, title).encode())
