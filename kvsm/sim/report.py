"""Plots (PNG, matplotlib's headless Agg backend) and a self-contained HTML report.

Every file is written beside its destination and renamed into place, so a failure
leaves no partial file and never clobbers an existing one half-way.
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from ..log import OutputError
from .runner import SimResult


def _atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a hidden temporary file beside it; an error names
    `path` (never the temporary file, which is removed) and is an `OutputError`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise OutputError(path, e.strerror or str(e)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file private; give it the permissions a plain open would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise OutputError(path, e.strerror or str(e)) from None
    except BaseException:
        os.unlink(tmp)
        raise


def _axis(result: SimResult) -> tuple[list[float], str]:
    if result.summary["schedule"] == "timed":
        return [s.t_ms / 1000 for s in result.samples], "simulated time (s)"
    return [float(s.requests) for s in result.samples], "requests served"


def render_plots(result: SimResult) -> dict[str, bytes]:
    """PNG bytes by file name: `hit_rate.png` and `occupancy.png`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    x, xlabel = _axis(result)
    title = f"{result.summary['workload']['name']}, seed {result.summary['seed']}"
    out: dict[str, bytes] = {}

    fig = Figure(figsize=(8, 4), dpi=100)
    ax = fig.add_subplot()
    ax.plot(x, [s.window_hit_rate for s in result.samples], lw=0.8, alpha=0.6, label="per interval")
    ax.plot(x, [s.hit_rate for s in result.samples], lw=2, label="cumulative")
    ax.set_ylim(0, 1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("block hit rate (all tiers)")
    ax.set_title(f"Hit rate: {title}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    out["hit_rate.png"] = _png(fig)

    fig = Figure(figsize=(8, 4), dpi=100)
    ax = fig.add_subplot()
    ax.plot(x, [s.l1_used for s in result.samples], label="L1 (device)")
    tiers = result.summary["tiers"].split(",")
    if "l2" in tiers:
        ax.plot(x, [s.l2_used for s in result.samples], label="L2 (shared host)")
    if "l3" in tiers:
        ax.plot(x, [s.l3_used for s in result.samples], label="L3 (disks of all ranks)")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("pages in use (fraction of capacity)")
    ax.set_title(f"Tier occupancy: {title}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    out["occupancy.png"] = _png(fig)
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
        _atomic_write(p, data)
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


def render_html(result: SimResult) -> str:
    s = result.summary
    plots = render_plots(result)
    rows = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in flat_rows(s))
    imgs = "\n".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(data).decode()}"></figure>'
        for name, data in plots.items()
    )
    title = f"kvsm sim: {s['workload']['name']}, seed {s['seed']}"
    l3 = f" + L3 {s['pages_hit_l3']}" if s["config"]["L3"] else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 60em; }}
table {{ border-collapse: collapse; }}
th, td {{ text-align: left; padding: 0.15em 1em 0.15em 0; border-bottom: 1px solid #ddd; font-size: 0.9em; }}
th {{ font-weight: 500; color: #444; }}
img {{ max-width: 100%; }}
.headline {{ font-size: 1.2em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="headline">block hit rate <b>{s['hit_rate_blocks']:.4f}</b> (L1 {s['pages_hit_l1']} + L2 {s['pages_hit_l2']}{l3} of
{s['pages_total']} pages), token hit rate <b>{s['hit_rate_tokens']:.4f}</b>, {s['requests']} requests,
{s['transitions']} transitions in {s['seconds']} s.</p>
<h2>Plots</h2>
{imgs}
<h2>Summary</h2>
<table>
{rows}
</table>
</body></html>
"""


def write_report(result: SimResult, path: str | Path) -> Path:
    p = Path(path)
    _atomic_write(p, render_html(result).encode())
    return p
