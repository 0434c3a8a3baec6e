"""A sweep over several seeds, aggregated: the seed never names a curve. A curve's point
at one capacity is the mean over the seeds that ran it, with their range (min to max):
the plots draw the mean and shade the range, the knee is the mean curve's, and
`results_seeds.csv` has one row per point without its seed (`results.csv` keeps one row
per point and seed, the raw data).

The legend of a plot is bounded (`LEGEND_MAX` entries): beyond it, the first curves are
named and one entry says how many more there are (every curve and its knee is in the
report's knee table).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..output import write_csv_rows
from .grid import Axes, Point, label

SEED = "seed"
LEGEND_MAX = 10
SEEDS_CSV = "results_seeds.csv"
# the columns of a raw row that are a point's bookkeeping, not a measure
_NOT_MEASURES = ("point", "status", "command", "worker", "workers", "seconds", "attempts", "error")


@dataclass(frozen=True)
class Agg:
    """One capacity of a curve: the pages the runs had, the mean of the measure over the
    seeds, its range, and how many seeds ran."""

    x: float
    mean: float
    lo: float
    hi: float
    n: int


def aggregate(recs: list[dict[str, Any]], field: str, config_key: str, measure: Callable[[dict[str, Any]], float]) -> list[Agg]:
    """A curve's records (the points that differ only in the capacity `field` and the
    seed) as one `Agg` per value of `field`, in the order of the pages the runs had (the
    resolved config's `config_key`; where seeds resolve one value differently, as `0` on
    a drawn workload may, the largest)."""
    by: dict[Any, list[dict[str, Any]]] = {}
    for r in recs:
        by.setdefault(r["options"][field], []).append(r)
    out = []
    for rs in by.values():
        ys = [float(measure(r)) for r in rs]
        out.append(Agg(max(r["sim"]["config"][config_key] for r in rs), statistics.fmean(ys), min(ys), max(ys), len(ys)))
    return sorted(out, key=lambda a: a.x)


def curves(axes: Axes, records: list[dict[str, Any]], field: str, config_key: str) -> dict[str, list[dict[str, Any]]]:
    """The ok records that have the capacity `field`, by curve: the other varying options
    but the seed (their `kvsm sim` flags) name it; each curve sorted by the pages the run
    had (a curve over several seeds has several records at one capacity)."""
    others = [n for n in axes.varying() if n not in (field, SEED)]
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        p = Point.from_json(rec["options"])
        if rec.get("status") != "ok" or getattr(p, field) is None:
            continue
        out.setdefault(label(p, others) if others else "all points", []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r["sim"]["config"][config_key])
    return out


def seeds_of(recs: list[dict[str, Any]]) -> int:
    """How many seeds the records have."""
    return len({r["options"].get(SEED) for r in recs})


def bounded_legend(handles: list[Any], labels: list[str], limit: int = LEGEND_MAX) -> tuple[list[Any], list[str]]:
    """At most `limit` entries: the first `limit - 1` curves and one that counts the rest."""
    if len(labels) <= limit:
        return handles, labels
    from matplotlib.lines import Line2D  # noqa: PLC0415

    rest = len(labels) - (limit - 1)
    more = Line2D([], [], ls="none", marker="none")
    return handles[: limit - 1] + [more], labels[: limit - 1] + [f"... and {rest} more curves (report.html, Knees)"]


def legend_columns(labels: list[str], width_inches: float) -> int:
    """Columns of a legend below a figure `width_inches` wide that fit its longest label
    (at about 0.075 inch a character in a small font), 1 to 4."""
    longest = max((len(s) for s in labels), default=1)
    return max(1, min(4, len(labels), int(width_inches // (0.075 * longest + 0.6))))


def knee_lines(knees: list[dict[str, Any]]) -> list[str]:
    """One line per curve: its knee by every measure (the mean curve's over seeds)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for k in knees:
        by.setdefault((k["axis"], k["curve"]), []).append(k)
    out = []
    for (axis, curve), ks in by.items():
        parts = "; ".join(f"{k['measure']} {k['knee_pages']} pages, {k['hit_rate']:.4f} (best {k['best']:.4f})" for k in ks)
        n = ks[0].get("seeds", 1)
        out.append(f"knee of {axis} ({curve}): {parts}" + (f"; mean of {n} seeds" if n > 1 else ""))
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def seed_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Raw CSV rows (one per point and seed, the ok ones) as one row per point without
    its seed: its options, `seeds` (the seeds, space-separated), then for every numeric
    measure `NAME.mean`, `NAME.min` and `NAME.max` over the seeds."""
    groups: dict[tuple, list[dict[str, str]]] = {}
    options: list[str] = []
    for row in rows:
        if row.get("status") != "ok":
            continue
        if not options:  # the option columns: from the first one to `check`
            names = list(row)
            options = names[names.index("status") + 1 : names.index("check") + 1]
        key = tuple(row.get(o, "") for o in options if o != SEED)
        groups.setdefault(key, []).append(row)
    out = []
    for rs in groups.values():
        first = rs[0]
        agg: dict[str, str] = {o: first.get(o, "") for o in options if o != SEED}
        agg["seeds"] = " ".join(r.get(SEED, "") for r in rs)
        measures = [c for c in first if c not in options and c not in _NOT_MEASURES and c != f"sim.{SEED}"]
        for c in measures:
            if c.startswith("sim.config."):  # the resolved config: the point's, not a measure
                agg[c] = first.get(c, "")
                continue
            ys = [_number(r.get(c, "")) for r in rs]
            if not ys or any(y is None for y in ys):
                continue  # text, or a field some seed has not
            vals = [y for y in ys if y is not None]
            agg[f"{c}.mean"] = f"{statistics.fmean(vals):.6g}"
            agg[f"{c}.min"] = f"{min(vals):.6g}"
            agg[f"{c}.max"] = f"{max(vals):.6g}"
        out.append(agg)
    return out


def write_seeds_csv(rows: list[dict[str, str]], path: Path) -> Path:
    """`results_seeds.csv`: `seed_rows(rows)`, the columns in the order they first appear."""
    return write_csv_rows(seed_rows(rows), path)
