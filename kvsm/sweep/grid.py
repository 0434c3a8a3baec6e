"""A sweep's grid: each `kvsm sim` option's list of values (`Axes`), the points they
cross into (`Point`, each one `kvsm sim` run), and what a Dask worker runs for a point
(`run_point`).

A list is comma-separated; `--tiers`, whose one value has commas, is repeated instead
(`--tiers l1 --tiers l1,l2`), and inside one value of `--faults` `+` stands for the comma
(`--faults none,slow:0.1+abort:0.05`). An axis that does not apply to a tier set is not crossed
with it: a point with `--tiers l1` has no `--l2-pages`, one without L3 no `--l3-pages`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shlex
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable

from ..bounds import MAX_RANKS
from ..campaign.store import Results
from ..config import BUGS, EVICTIONS, ConfigError, load_config
from ..sim import STOPS, FaultSpecError, Faults, SimError, SimOptions, WorkloadError, simulate, stop_record
from ..sim.options import REPLICAS, TIERS, parse_schedule, prepare
from ..sim.shape import ShapeError, check_rate, load_model, parse_size
from ..sim.tenants import MAX_TENANTS
from ..sim.trace import Workload


class GridError(ValueError):
    """A list value or a point that cannot run: the message names the option and the value."""


class SweepResults(Results):
    """`DIR/results.jsonl` of a sweep: one line per point, named by its key."""

    KEY = "point"
    KEY_TYPE = str
    CHOICES = "sweep.json"
    WHAT = "sweep"


# What a sweep records in DIR/sweep.json: the same for every sweep, so that --resume
# takes any grid (a point is named by all of its options, so an old line never stands
# for a point of other options).
CHOICES = {"command": "kvsm sweep", "point": "sha256 of the point's kvsm sim options, 16 hex digits"}


def _int(lo: int, hi: int | None = None) -> Callable[[str, str], int]:
    def parse(option: str, text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise GridError(f"{option} {text!r}: not an integer") from None
        if v < lo or (hi is not None and v > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise GridError(f"{option} {text!r}: must be {bound}")
        return v

    return parse


def _choice(allowed: tuple[str, ...], shown: tuple[str, ...] | None = None) -> Callable[[str, str], str]:
    def parse(option: str, text: str) -> str:
        v = text.replace("+", ",")
        if v not in allowed:
            raise GridError(f"{option} {text!r}: must be one of {' | '.join(shown or allowed)}")
        return v

    return parse


def _text(option: str, text: str) -> str:
    return text


def _faults(option: str, text: str) -> str:
    spec = text.replace("+", ",")
    try:
        return str(Faults.parse(spec))
    except FaultSpecError as e:
        raise GridError(f"{option} {text!r}: {e.reason}") from None


def _schedule(option: str, text: str) -> str:
    """A value of `kvsm sim --schedule`, checked by its own parser (a name, or `random:B`);
    `random:B` written with its bias as a float, so that `random:0.5` and `random:.50`
    are one point (the same run)."""
    try:
        name, bias = parse_schedule(text)
    except SimError as e:
        raise GridError(str(e)) from None  # names the option and the value
    return name if bias is None else f"{name}:{bias!r}"


def _fraction(option: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise GridError(f"{option} {text!r}: must be a fraction in [0, 1]")
    return v


def _model(option: str, text: str) -> str:
    try:
        load_model(text)
    except ShapeError as e:
        raise GridError(str(e)) from None
    return text


def _size(option: str, text: str) -> str:
    try:
        parse_size(option, text)
    except ShapeError as e:
        raise GridError(str(e)) from None
    return text


def _rate(option: str, text: str) -> float:
    try:
        v = float(text)
        check_rate(option, v)
    except (ValueError, ShapeError):
        raise GridError(f"{option} {text!r}: must be a positive number") from None
    return v


# (SimOptions field, option, parser), in the order the grid crosses them
AXES: tuple[tuple[str, str, Callable[[str, str], Any]], ...] = (
    ("workload", "--workload", _text),
    ("config", "--config", _text),
    ("bug", "--bug", _choice(BUGS)),
    ("replicas", "--replicas", _choice(REPLICAS)),
    ("schedule", "--schedule", _schedule),
    ("tiers", "--tiers", _choice(TIERS)),
    ("ranks", "--ranks", _int(1, MAX_RANKS)),
    ("requests", "--requests", _int(1)),
    ("page_tokens", "--page-tokens", _int(1)),
    ("model", "--model", _model),
    ("eviction", "--eviction", _choice(EVICTIONS)),
    ("faults", "--faults", _faults),
    ("prefill_tps", "--prefill-tps", _rate),
    ("l2_gbps", "--l2-gbps", _rate),
    ("l3_gbps", "--l3-gbps", _rate),
    ("reload_ttl_s", "--reload-ttl-s", _rate),
    ("tenant_mix", "--tenant-mix", _fraction),
    ("tenants", "--tenants", _int(1, MAX_TENANTS)),
    ("seed", "--seed", _int(0, 2**63 - 1)),
    ("l3_pages", "--l3-pages", _int(0)),
    ("l3_size", "--l3-size", _size),
    ("l2_pages", "--l2-pages", _int(0)),
    ("l2_size", "--l2-size", _size),
    ("l1_pages", "--l1-pages", _int(0)),
    ("l1_size", "--l1-size", _size),
)
# options added after sweeps had named their points: left out of a point's name while
# not given, so that a point keeps the name it had before them
_NAMED_WHEN_GIVEN = ("model", "l1_size", "l2_size", "l3_size", "prefill_tps", "l2_gbps", "l3_gbps", "reload_ttl_s", "tenants", "tenant_mix")
OPTION = {name: option for name, option, _ in AXES}
# the capacity axes a sweep plots against: (field, the resolved config's field, label)
CAPACITIES = (
    ("l1_pages", "L1", "L1 pages per rank lane"),
    ("l2_pages", "L2", "L2 pages (shared host)"),
    ("l3_pages", "L3", "L3 pages per rank disk"),
    ("l1_size", "L1", "L1 pages per rank lane (of --l1-size)"),
    ("l2_size", "L2", "L2 pages, shared host (of --l2-size)"),
    ("l3_size", "L3", "L3 pages per rank disk (of --l3-size)"),
)


# A sweep's default `--replicas`: the fastest level that still compares the ranks'
# replicas (`kvsm sim` keeps `every`; docs/sim.md, "Ranks and divergence")
SWEEP_REPLICAS = "agreement"


@dataclass(frozen=True)
class Point:
    """One `kvsm sim` run of the sweep: its options (None: `kvsm sim`'s default; but
    `replicas`, whose sweep default is `SWEEP_REPLICAS`)."""

    workload: str = "synthetic"
    config: str = "default"
    bug: str | None = None
    replicas: str = SWEEP_REPLICAS
    schedule: str = "auto"
    tiers: str = "l1,l2"
    ranks: int | None = None
    requests: int | None = None
    page_tokens: int | None = None
    eviction: str | None = None
    faults: str = "none"
    seed: int = 0
    l3_pages: int | None = None
    l2_pages: int | None = None
    l1_pages: int | None = None
    check: bool = False
    model: str | None = None
    l1_size: str | None = None
    l2_size: str | None = None
    l3_size: str | None = None
    prefill_tps: float | None = None
    l2_gbps: float | None = None
    l3_gbps: float | None = None
    reload_ttl_s: float | None = None
    tenants: int | None = None
    tenant_mix: float | None = None

    @property
    def key(self) -> str:
        d = asdict(self)
        if d["replicas"] == SWEEP_REPLICAS:
            # how a point is checked, not what it simulates (its results are the same at
            # every level): named only when not the default, so that points keep the
            # names they had before the option
            del d["replicas"]
        for name in _NAMED_WHEN_GIVEN:
            if d[name] is None:
                del d[name]
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"point": self.key, **asdict(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Point":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def options(self) -> SimOptions:
        d = asdict(self)
        return SimOptions(**d)

    def command(self) -> str:
        """The `kvsm sim --json` command that runs this point alone."""
        args = ["kvsm", "sim", "--workload", self.workload, "--config", self.config, "--seed", str(self.seed), "--tiers", self.tiers]
        for name in ("requests", "ranks", "page_tokens", "l1_pages", "l2_pages", "l3_pages", "eviction", "bug", *_NAMED_WHEN_GIVEN):
            v = getattr(self, name)
            if v is not None:
                args += [OPTION[name], str(v)]
        if self.faults != "none":
            args += ["--faults", self.faults]
        if self.schedule != "auto":
            args += ["--schedule", self.schedule]
        if self.check:
            args.append("--check")
        if self.replicas != "every":
            args += ["--replicas", self.replicas]
        args.append("--json")
        return " ".join(shlex.quote(a) for a in args)


@dataclass(frozen=True)
class Axes:
    """Each option's values, in the order given (an option not given: `kvsm sim`'s default)."""

    values: tuple[tuple[str, tuple[Any, ...]], ...]
    check: bool = False

    def given(self) -> dict[str, tuple[Any, ...]]:
        return dict(self.values)

    def varying(self) -> list[str]:
        """The options with more than one value."""
        return [name for name, vs in self.values if len(vs) > 1]

    def shape(self) -> list[tuple[str, int]]:
        """The options with more than one value and how many each has: the grid is their
        product (before the points a tier set has no tier for are merged)."""
        return [(OPTION[name], len(vs)) for name, vs in self.values if len(vs) > 1]

    def size(self) -> int:
        """How many points the grid has at most: the product of `shape()`, counted
        without making the points."""
        return math.prod(n for _, n in self.shape())

    def points(self) -> list[Point]:
        """Every combination of the values, without the axes a tier set has no tier for;
        each point once, in the order of the options in `AXES` (the last varies fastest)."""
        names = [name for name, _ in self.values]
        seen: dict[str, Point] = {}
        for combo in itertools.product(*(vs for _, vs in self.values)):
            p = Point(**dict(zip(names, combo)), check=self.check)
            if p.tiers == "l1":
                p = replace(p, l2_pages=None, l2_size=None)
            if p.tiers != "l1,l2,l3":
                p = replace(p, l3_pages=None, l3_size=None)
            if p.tenants in (None, 1):  # one tenant shares with no other
                p = replace(p, tenant_mix=None)
            seen.setdefault(p.key, p)
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        return {OPTION[name]: list(vs) for name, vs in self.values} | {"--check": self.check}


def parse_axes(given: dict[str, str | None], check: bool = False) -> Axes:
    """The lists of the options given (`given[field]`: the option's text, None when not
    given); a bad value is a `GridError` naming the option and the value."""
    values = []
    for name, option, parse in AXES:
        text = given.get(name)
        default = getattr(Point(), name)
        if text is None:
            values.append((name, (default,)))
            continue
        items = tier_sets(text) if name == "tiers" else text.split(",")
        if any(not t for t in items):
            raise GridError(f"{option} {text!r}: an empty value in the list")
        vs = tuple(dict.fromkeys(parse(option, t) for t in items))
        values.append((name, vs))
    axes = Axes(tuple(values), check)
    d = axes.given()
    for tier in ("l1", "l2", "l3"):
        if given.get(f"{tier}_pages") is not None and given.get(f"{tier}_size") is not None:
            raise GridError(f"--{tier}-size {given[f'{tier}_size']}: give --{tier}-pages or --{tier}-size, not both")
    if given.get("l2_size") is not None and d["tiers"] == ("l1",):
        raise GridError(f"--l2-size {given['l2_size']}: no point has an L2 tier (--tiers l1)")
    if given.get("l3_size") is not None and "l1,l2,l3" not in d["tiers"]:
        raise GridError(f"--l3-size {given['l3_size']}: no point has an L3 tier (add --tiers l1,l2,l3)")
    if given.get("tenant_mix") is not None and all(n in (None, 1) for n in d["tenants"]):
        raise GridError(f"--tenant-mix {given['tenant_mix']}: no point has more than one tenant (add --tenants N with N > 1)")
    if given.get("l2_pages") is not None and d["tiers"] == ("l1",):
        raise GridError(f"--l2-pages {given['l2_pages']}: no point has an L2 tier (--tiers l1)")
    if given.get("l3_pages") is not None and "l1,l2,l3" not in d["tiers"]:
        raise GridError(f"--l3-pages {given['l3_pages']}: no point has an L3 tier (add --tiers l1,l2,l3)")
    return axes


def check_size(axes: Axes, ceiling: int) -> None:
    """A `GridError` naming the grid's product when it has more points than `ceiling`
    (`--max-points`), before any point is made."""
    shape, size = axes.shape(), axes.size()
    if size <= ceiling:
        return
    counts = " x ".join(f"{n:,}" for _, n in shape)
    product = f"{counts} = {size:,}" if len(shape) > 1 else counts
    options = " x ".join(option for option, _ in shape)
    raise GridError(f"the grid is {product} points ({options}), more than the ceiling {ceiling:,}; --max-points lifts it")


def check_points(points: list[Point], on_each: Callable[[], None] | None = None) -> None:
    """Prepare every point as `kvsm sim` would (config, workload, overrides) before any
    runs; the first that cannot run is a `GridError` naming it and why. `on_each()` is
    called after each point (progress)."""
    for p in points:
        try:
            prepare(p.options())
        except (SimError, ConfigError, WorkloadError, FaultSpecError) as e:
            raise GridError(f"the point {label(p)}: {e}") from None
        if on_each is not None:
            on_each()


def tier_sets(values: str | list[str] | tuple[str, ...]) -> list[str]:
    """`--tiers`, given once per tier set (`--tiers l1 --tiers l1,l2`). A value with `+` is
    read in the form sweeps took first, still accepted: sets, comma-separated, `+` joining
    the tiers of one (`l1,l1+l2`)."""
    out = []
    for v in [values] if isinstance(values, str) else values:
        for t in v.split(",") if "+" in v else [v]:
            if t.replace("+", ",") not in TIERS:
                raise GridError(f"--tiers {v!r}: not a tier set; give l1 | l1,l2 | l1,l2,l3, and repeat --tiers for several (--tiers l1 --tiers l1,l2)")
            out.append(t.replace("+", ","))
    return out


def show(name: str, v: Any) -> str:
    """A value as the sweep's lists write it (`+` for the comma inside a fault mix)."""
    if v is None:
        return "-"
    return str(v).replace(",", "+") if name == "faults" else str(v)


# where a record's summary holds the value a point ran with when its option was not given
_USED = {"ranks": ("config", "R"), "requests": ("requests",), "page_tokens": ("config", "P"), "eviction": ("config", "eviction"),
         "l1_pages": ("config", "L1"), "l2_pages": ("config", "L2"), "l3_pages": ("config", "L3"),
         "reload_ttl_s": ("config", "reload_ttl_s"), "model": ("serving", "model", "name"), "prefill_tps": ("serving", "prefill_tps"),
         "l2_gbps": ("serving", "l2_gbps"), "l3_gbps": ("serving", "l3_gbps"), "tenant_mix": ("tenants", "tenant_mix")}


def used_value(name: str, rec: dict[str, Any]) -> Any:
    """The value of option `name` that the record's point ran with: the option's when
    given, else what its run resolved (the config's R, L1, ..., the model's name, the
    config's defect); None where the point has no such tier or size, or its run stopped
    before a summary."""
    opts = rec.get("options", {})
    v = opts.get(name)
    if v is not None:
        return v
    tiers = str(opts.get("tiers", "")).split(",")
    if (name.startswith("l2_") and "l2" not in tiers) or (name.startswith("l3_") and "l3" not in tiers):
        return None
    if name == "tenants":  # one tenant: the workload as it is
        return 1
    if name == "bug":
        try:
            return load_config(opts.get("config", "default")).bug
        except (ConfigError, OSError):
            return None
    d: Any = rec.get("sim") or {}
    for k in _USED.get(name, ("-",)):
        d = d.get(k) if isinstance(d, dict) else None
    return d


def used(name: str, rec: dict[str, Any]) -> str:
    """`used_value` as the sweep's lists write it (`-`: none)."""
    return show(name, used_value(name, rec))


def used_grid(axes: Axes, records: list[dict[str, Any]]) -> dict[str, Any]:
    """`Axes.to_json` with, for each option not given, the values its points ran with."""
    out = axes.to_json()
    for name, vs in axes.values:
        if vs == (None,):
            out[OPTION[name]] = list(dict.fromkeys(used_value(name, r) for r in records)) or [None]
    return out


def label(p: Point, names: list[str] | None = None) -> str:
    """The point's options as `kvsm sim` flags (only `names`, when given)."""
    shown = names if names is not None else [n for n, _, _ in AXES]
    parts = []
    for n in shown:
        v = getattr(p, n)
        if v is not None and (names is not None or v != getattr(Point(), n)):
            parts.append(f"{OPTION[n]} {show(n, v)}")
    return " ".join(parts) or "(the defaults)"


# ---- on a worker --------------------------------------------------------------------------


def tier_hits(request_hits: list[tuple[int, int, int, int]], workload: Workload) -> dict[str, int]:
    """Hit tokens by the tier that served them: a request's hit tokens are its first
    `min(hits * block tokens, prompt tokens)`, L1's pages first, then L2's, then L3's (so
    the three add up to `kvsm sim`'s `tokens_hit`)."""
    bt = workload.block_tokens
    out = {"l1": 0, "l2": 0, "l3": 0}
    for index, h1, h2, h3 in request_hits:
        n = workload.requests[index].input_length
        a, b, c = min(h1 * bt, n), min((h1 + h2) * bt, n), min((h1 + h2 + h3) * bt, n)
        out["l1"] += a
        out["l2"] += b - a
        out["l3"] += c - b
    return out


def hit_rates(summary: dict[str, Any], tokens: dict[str, int]) -> dict[str, float]:
    """Block and token hit rates, of all tiers and of each."""
    pages, toks = summary["pages_total"], summary["tokens_total"]
    out = {"blocks": summary["hit_rate_blocks"], "tokens": summary["hit_rate_tokens"]}
    for t in ("l1", "l2", "l3"):
        out[f"blocks_{t}"] = round(summary[f"pages_hit_{t}"] / pages, 6) if pages else 0.0
        out[f"tokens_{t}"] = round(tokens[t] / toks, 6) if toks else 0.0
    return out


def run_point(spec_json: dict[str, Any], _budget_json: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a Dask worker runs for one point: the simulation `kvsm sim` would run. The
    record: `point`, `options`, `command`, `status` (`ok` or `stopped`), `sim` (what
    `kvsm sim --json` prints: the summary, or `{"stopped": ...}`), `hit_rate` and
    `tokens_hit` (per tier), `transitions`, `worker`, `seconds`."""
    from ..campaign.worker import _worker_name

    t0 = time.perf_counter()
    p = Point.from_json(spec_json)
    box: dict[str, Any] = {}
    rec: dict[str, Any] = {"point": p.key, "options": asdict(p), "command": p.command()}
    try:
        res = simulate(p.options(), on_start=lambda prep: box.setdefault("prep", prep))
    except STOPS as e:
        rec.update(status="stopped", sim={"stopped": stop_record(e, p.seed)}, transitions=0)
    else:
        tokens = tier_hits(res.request_hits, box["prep"].workload)
        rec.update(status="ok", sim=res.summary, hit_rate=hit_rates(res.summary, tokens), tokens_hit=tokens,
                   tokens_saved=res.summary["tokens_saved"], ttft_ms=res.summary["ttft_ms"], transitions=res.summary["transitions"])
    rec["worker"] = _worker_name()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
