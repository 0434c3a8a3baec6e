"""What a run is asked to do (`SimOptions`), the timing model's constants (`Timing`),
and how the options become a model `Config` and a workload."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..bounds import MAX_DEVICE_PAGES
from ..config import EVICTIONS, Config, ConfigError, builtin_file, builtin_names, load_config
from .faults import Faults
from .generators import CONFIG_PROMPTS
from .shape import DEFAULT_MODEL, PRESETS, L2_GBPS, L3_GBPS, PREFILL_TPS, Serving, ShapeError, check_rate, load_model, size_pages
from .tenants import check_tenants, namespaces, shared, with_tenants
from .trace import MOONCAKE_BLOCK_TOKENS, NAMESPACE_FIELD, Workload, split_pages
from .workload import load_workload

TIERS = ("l1", "l1,l2", "l1,l2,l3")
# `--replicas`, the default first (kept here so that the options import nothing of the run)
REPLICAS = ("every", "agreement", "off")
SCHEDULES = ("auto", "serial", "timed", "random", "walk")
# the schedules without a clock (no timing constants in the log, no simulated time)
CLOCKLESS = ("serial", "walk")
# The random schedule's bias (how often it takes another enabled step than the timed
# order's: postpones a rank's completions, reorders a tick's steps, interleaves a commit
# round with writes, skips a collective), drawn from the seed unless given (random:B).
BIASES = (0.05, 0.15, 0.3, 0.5)
# `--schedule walk`: per fault kind of `--faults`, the model's transition it stands for
# (taken only when the kind is asked for) and the one it stands against (for its weight
# where the config's walks leave it out)
WALK_FAULTS = {"abort": ("Abort", "Finish"), "disk": ("DiskFail", "DiskRecover")}
# Config fields `--set` may not change: those with options of their own, the exploration
# bounds and the model's prompts (the simulator's workload replaces them).
_NOT_SETTABLE = frozenset(("name", "R", "P", "L1", "L2", "L3", "eviction", "bug", "payloads", "max_requests", "max_live", "max_disk_faults", "prompts"))


class SimError(ValueError):
    """Options that cannot run; the message names the option and the reason."""


@dataclass(frozen=True)
class Timing:
    """The timed schedule's clock, in simulated milliseconds. One scheduler iteration
    runs per tick that has work; decoding takes one tick per output token."""

    tick_ms: int = 20  # one iteration = one decode step
    prefill_tokens_per_ms: float = 40.0  # forward-pass throughput for the missed pages
    write_ms_per_page: float = 2.0  # one rank copies one of its pages device -> host
    load_ms_per_page: float = 2.0  # one rank loads one of its pages host -> device
    write_jitter: float = 0.5  # a write's duration is drawn in [1 - j, 1 + j] x nominal
    write_timeout_ms: int = 2000  # a backup still pending this long is rolled back
    write_back_wait_ms: int = 5000  # a write_back insert waits this long for room
    # L3: each rank copies its pages of a spilled object out of the shared slab into
    # staging, then its disk writes them; a reload is one disk read per rank. A rank's
    # disk serves its writes and reads in submit order.
    gather_ms_per_page: float = 0.25  # one rank copies one of its pages slab -> staging
    disk_write_ms_per_page: float = 1.0  # one rank writes one of its pages to its disk
    disk_read_ms_per_page: float = 1.0  # one rank reads one of its pages from its disk into the slab
    disk_jitter: float = 0.5  # a disk operation's duration is drawn in [1 - j, 1 + j] x nominal

    def tick_at(self, ms: float) -> int:
        """The first tick that starts at or after simulated time `ms`."""
        return math.ceil(ms / self.tick_ms)

    def after(self, tick: int, ms: float) -> int:
        """The tick of an event that tick `tick` started and that ends at time `ms`: the
        first tick at or after `ms`, and never `tick` itself."""
        return max(tick + 1, self.tick_at(ms))

    def to_json(self, l3: bool = True) -> dict[str, Any]:
        """The constants as the log header records them (the disk's only with L3)."""
        d = asdict(self)
        if not l3:
            for k in _L3_TIMING:
                del d[k]
        return d


_L3_TIMING = ("gather_ms_per_page", "disk_write_ms_per_page", "disk_read_ms_per_page", "disk_jitter")


@dataclass(frozen=True)
class SimOptions:
    workload: str = "synthetic"
    config: str = "default"
    ranks: int | None = None
    seed: int = 0
    requests: int | None = None  # first N requests of a trace; N generated requests
    tiers: str = "l1,l2"
    page_tokens: int | None = None  # the config's P; default: the workload's block size
    l1_pages: int | None = None  # device pages per rank lane; 0 = enough for the whole workload
    l2_pages: int | None = None  # shared host pages; 0 = enough for the whole workload
    l3_pages: int | None = None  # disk pages per rank (config L3); 0 = enough for the whole workload
    eviction: str | None = None
    faults: str = "none"
    schedule: str = "auto"  # auto | serial | timed | random | random:B (B: the bias, in [0, 1])
    timing: Timing = field(default_factory=Timing)
    check: bool = False  # check every invariant after every transition (kvsm.checking)
    bug: str | None = None  # an injected defect of the model (docs/defects.md); None: the config's own
    # config fields set by `--set KEY=VALUE` (`parse_setting`), in the order given
    settings: tuple[tuple[str, Any], ...] = ()
    # how often the ranks' replicas are kept and compared: every | agreement | off
    # (`kvsm.sim.cluster`, docs/sim.md); the log is the same at every level
    replicas: str = "every"
    # bytes and serving figures (`kvsm.sim.shape`, docs/sim.md "Bytes and serving figures")
    model: str | None = None  # a preset name or a TOML file; None: DEFAULT_MODEL stands in for the figures
    l1_size: str | None = None  # a size with a unit per rank lane, instead of l1_pages
    l2_size: str | None = None  # the shared host pool's size, instead of l2_pages
    l3_size: str | None = None  # a size per rank disk, instead of l3_pages
    prefill_tps: float | None = None  # prefill tokens per second per rank (default shape.PREFILL_TPS)
    l2_gbps: float | None = None  # host -> device GB/s per rank (default shape.L2_GBPS)
    l3_gbps: float | None = None  # disk -> host GB/s per rank (default shape.L3_GBPS)
    reload_ttl_s: float | None = None  # the config's reload_ttl in seconds of simulated time
    # tenants (`kvsm.sim.tenants`, docs/sim.md "Tenants"): the workload spread over this
    # many namespaces (None: 1, the workload as it is), a fraction tenant_mix (None: 1) of
    # the requests on prompts the tenants share
    tenants: int | None = None
    tenant_mix: float | None = None


@dataclass(frozen=True)
class Prepared:
    cfg: Config
    workload: Workload
    faults: Faults
    schedule: str  # "serial", "timed" or "random"
    l2: bool  # whether the host tier is in use
    l3: bool  # whether the disk tier is in use
    bias: float | None = None  # the random schedule's bias, when given (None: drawn from the seed)
    replicas: str = "every"  # SimOptions.replicas
    serving: Serving = field(default_factory=lambda: Serving(PRESETS[DEFAULT_MODEL]))  # the shape and rates of the figures
    # with more than one namespace: the same requests all in namespace 0, the baseline the
    # isolated run (`workload`) is priced against; None otherwise
    shared: Workload | None = None


def config_file(name_or_path: str) -> Path | None:
    """The file `load_config(name_or_path)` reads: a built-in config's TOML in the package,
    or the path itself (None for an empty name)."""
    if not name_or_path:
        return None
    if name_or_path in builtin_names():
        return Path(str(builtin_file(name_or_path)))
    return Path(name_or_path)


def parse_setting(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` of `--set`: true/false a bool, an integer an int, anything else a string
    (the config checks the field and its value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SimError(f"--set {text!r}: expected KEY=VALUE, e.g. --set prepared_backups=true")
    if key in _NOT_SETTABLE or key not in Config.__dataclass_fields__:
        settable = sorted(k for k in Config.__dataclass_fields__ if k not in _NOT_SETTABLE)
        raise SimError(f"--set {text!r}: '{key}' is not a config field --set can change (one of {', '.join(settable)})")
    value: Any = raw
    if key == "walk_weights":
        walk_weights(raw)  # checked here; kept as given, so that it is written back the same
        return key, raw
    if raw in ("true", "false"):
        value = raw == "true"
    elif raw.lstrip("-").isdigit():
        value = int(raw)
    return key, value


def walk_weights(raw: str) -> dict[str, float]:
    """`--set walk_weights=NAME:W,...`: walk weights of transition families, each
    replacing the config's (the others are kept); a walk schedule's only."""
    from ..bounds import MAX_WALK_WEIGHT
    from ..transitions import NAMES

    out: dict[str, float] = {}
    for item in raw.split(","):
        name, sep, w = item.partition(":")
        try:
            weight = float(w)
        except ValueError:
            weight = -1.0
        if not sep or name not in NAMES or not 0.0 <= weight <= MAX_WALK_WEIGHT:
            raise SimError(f"--set walk_weights={raw}: '{item}' must be NAME:WEIGHT, a transition name and a weight in [0, {MAX_WALK_WEIGHT:g}]")
        out[name] = weight
    return out


def format_setting(key: str, value: Any) -> str:
    """The `--set` argument that gives `key` the value `value`."""
    v = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f"{key}={v}"


def parse_schedule(text: str) -> tuple[str, float | None]:
    """`--schedule`: a name, or `random:B` with the bias B in [0, 1]."""
    name, sep, b = text.partition(":")
    if name not in SCHEDULES or (sep and name != "random"):
        raise SimError(f"--schedule must be one of {' | '.join(SCHEDULES)} | random:B, got {text!r}")
    if not sep:
        return name, None
    try:
        bias = float(b)
    except ValueError:
        bias = -1.0
    if not 0.0 <= bias <= 1.0:
        raise SimError(f"--schedule {text}: the bias B of random:B must be a number in [0, 1]")
    return name, bias


def _positive(name: str, v: int | None, lo: int) -> None:
    if v is not None and v < lo:
        raise SimError(f"{name} must be >= {lo}, got {v}")


def prepare(opts: SimOptions) -> Prepared:
    """Load the config and workload and apply the overrides; errors are `SimError`s (or
    the config's and workload's own errors, which name their file and line)."""
    if opts.tiers not in TIERS:
        if "l3" in opts.tiers.split(",") and "l2" not in opts.tiers.split(","):
            # a reload lands in the shared host pool and a spill copies out of it
            raise SimError(f"--tiers {opts.tiers}: L3 needs L2 (reloads land in, and spills copy out of, the shared host pool)")
        raise SimError(f"--tiers must be one of {' | '.join(TIERS)}, got {opts.tiers!r}")
    schedule, bias = parse_schedule(opts.schedule)
    if opts.replicas not in REPLICAS:
        raise SimError(f"--replicas must be one of {' | '.join(REPLICAS)}, got {opts.replicas!r}")
    if opts.eviction is not None and opts.eviction not in EVICTIONS:
        raise SimError(f"--eviction must be one of {' | '.join(EVICTIONS)}, got {opts.eviction!r}")
    _positive("--ranks", opts.ranks, 1)
    _positive("--requests", opts.requests, 1)
    _positive("--page-tokens", opts.page_tokens, 1)
    _positive("--l1-pages", opts.l1_pages, 0)
    _positive("--l2-pages", opts.l2_pages, 0)
    _positive("--l3-pages", opts.l3_pages, 0)
    faults = Faults.parse(opts.faults)
    l3 = opts.tiers == "l1,l2,l3"
    if opts.l2_pages is not None and opts.tiers == "l1":
        raise SimError("--l2-pages needs an L2 tier (--tiers l1,l2 or l1,l2,l3), got --tiers l1")
    if opts.l3_pages is not None and not l3:
        raise SimError(f"--l3-pages needs --tiers l1,l2,l3, got --tiers {opts.tiers}")
    if faults.disk and not l3:
        raise SimError(f"--faults disk:{faults.disk:g} needs --tiers l1,l2,l3 (there is no disk to fail)")
    for tier in ("l1", "l2", "l3"):
        if getattr(opts, f"{tier}_pages") is not None and getattr(opts, f"{tier}_size") is not None:
            raise SimError(f"--{tier}-size {getattr(opts, f'{tier}_size')}: give --{tier}-pages or --{tier}-size, not both")
    if opts.l2_size is not None and opts.tiers == "l1":
        raise SimError("--l2-size needs an L2 tier (--tiers l1,l2 or l1,l2,l3), got --tiers l1")
    if opts.l3_size is not None and not l3:
        raise SimError(f"--l3-size needs --tiers l1,l2,l3, got --tiers {opts.tiers}")
    base = load_config(opts.config)
    R = opts.ranks if opts.ranks is not None else base.R
    try:
        for option in ("--prefill-tps", "--l2-gbps", "--l3-gbps"):
            check_rate(option, getattr(opts, option[2:].replace("-", "_")))
        shape = load_model(opts.model) if opts.model is not None else PRESETS[DEFAULT_MODEL]
        serving = Serving(
            shape,
            given=opts.model is not None,
            prefill_tps=opts.prefill_tps if opts.prefill_tps is not None else PREFILL_TPS,
            l2_gbps=opts.l2_gbps if opts.l2_gbps is not None else L2_GBPS,
            l3_gbps=opts.l3_gbps if opts.l3_gbps is not None else L3_GBPS,
        )
        # a trace's and a generator's blocks are 512 tokens, config-prompts' the config's P
        block = base.P if opts.workload == CONFIG_PROMPTS else MOONCAKE_BLOCK_TOKENS
        P = opts.page_tokens if opts.page_tokens is not None else block
        if block % P:
            raise SimError(f"--page-tokens {P}: must divide the workload's block size {block} (a page is a whole part of one block)")
        page_bytes = shape.bytes_per_token * P

        def pages(tier: str, given: int | None) -> int | None:
            text = getattr(opts, f"{tier}_size")
            return size_pages(f"--{tier}-size", text, page_bytes, shape, P) if text is not None else given

        l1_given, l2_given, l3_given = pages("l1", opts.l1_pages), pages("l2", opts.l2_pages), pages("l3", opts.l3_pages)
    except ShapeError as e:
        raise SimError(str(e)) from None
    L1 = l1_given if l1_given is not None else base.L1
    if opts.l1_size is not None and R * L1 > MAX_DEVICE_PAGES:
        raise SimError(f"--l1-size {opts.l1_size}: {L1:,} pages per rank, {R * L1:,} on {R} ranks, more than the bound {MAX_DEVICE_PAGES:,} device pages")
    # a generator sizes itself by the device's blocks (pages of P tokens, P / block of a block each)
    workload = load_workload(opts.workload, opts.requests, opts.seed, device_pages=max(1, R * (L1 or base.L1) * P // block), config=base)
    workload, baseline = _tenants(opts, workload)
    if P != workload.block_tokens:
        try:
            workload = split_pages(workload, P)
            baseline = split_pages(baseline, P) if baseline is not None else None
        except ValueError as e:
            raise SimError(f"--page-tokens {P}: {e}") from None
    l2 = opts.tiers in ("l1,l2", "l1,l2,l3")
    if schedule == "auto":
        schedule = "serial" if (not l2 and R == 1) else "timed"
    serial = schedule == "serial"
    if serial and l3:
        # spills and reloads are asynchronous per-rank work; the serial schedule has no time for them
        raise SimError("--tiers l1,l2,l3 needs the timed schedule (or random), got --schedule serial")
    if L1 == 0:
        # every page a request ever holds, per lane: position k of a request is in lane k mod R
        L1 = 1 + sum(-(-(len(r.hash_ids) + (0 if serial else workload.out_pages(r))) // R) for r in workload.requests)
        if R * L1 > MAX_DEVICE_PAGES:
            raise SimError(
                f"--l1-pages 0: the whole workload needs {L1} pages per lane, {R * L1} on {R} ranks, more than the bound "
                f"{MAX_DEVICE_PAGES} device pages; give --l1-pages a number"
            )
    L2 = l2_given if l2_given is not None else base.L2
    if L2 == 0:
        L2 = 1 + sum(len(r.hash_ids) for r in workload.requests)
    # without the tier the simulator never spills, so the config's L3 is switched off
    L3 = 0
    if l3:
        L3 = l3_given if l3_given is not None else base.L3
        if L3 == 0:
            # every prompt page on every rank's disk: more than any rank can ever own
            L3 = 1 + sum(len(r.hash_ids) for r in workload.requests)
    data = base.to_json()
    data.update(
        R=R,
        P=P,
        L1=L1,
        L2=L2,
        L3=L3,
        # the simulator creates requests as the workload says and draws disk faults from
        # the seed; exploration bounds do not apply
        max_requests=0,
        max_live=0,
        max_disk_faults=0,
        prompts=[],
        walk_weights={},
    )
    if schedule == "walk":
        # the model's own walk (`kvsm.sim.walker`): the config's walk weights and its
        # bound on requests alive at once; the fault kinds of `--faults` that are
        # transitions of the model are taken only when asked for, whatever their rate
        # (no clock: slow, stall and burst mean nothing to a walk)
        weights = dict(base.walk_weights)
        for kind, (family, per) in WALK_FAULTS.items():
            rate = getattr(faults, kind)
            # asked for: the config's weight, or where its walks leave the family out, the
            # rate times the weight of what the fault stands against (an abort against a
            # finish: about that share of the requests aborted)
            weights[family] = (weights.get(family, 1.0) or rate * weights.get(per, 1.0)) if rate else 0.0
        data.update(walk_weights=weights, max_live=base.max_live)
    if opts.eviction is not None:
        data["eviction"] = opts.eviction
    if opts.bug is not None:
        data["bug"] = opts.bug
    for key, value in opts.settings:
        data[key] = dict(data["walk_weights"]) | walk_weights(value) if key == "walk_weights" else value
    if opts.reload_ttl_s is not None:
        if any(k == "reload_ttl" for k, _ in opts.settings):
            raise SimError(f"--reload-ttl-s {opts.reload_ttl_s:g}: give --reload-ttl-s or --set reload_ttl=TICKS, not both")
        if not (math.isfinite(opts.reload_ttl_s) and opts.reload_ttl_s > 0):
            raise SimError(f"--reload-ttl-s {opts.reload_ttl_s}: must be a positive number of seconds")
        # a reload's ttl counts the ticks (Timing.tick_ms each) it holds its waiters
        data["reload_ttl"] = max(1, math.ceil(opts.reload_ttl_s * 1000 / opts.timing.tick_ms))
    try:
        cfg = Config.from_json(data, where=f"config '{opts.config}' with the command's overrides")
    except ConfigError as e:
        raise SimError(str(e)) from None
    if cfg.policy == "write_back" and not l2:
        # an unbacked leaf can leave L1 only through L2 under write_back: nothing could ever be evicted
        raise SimError(f"config '{opts.config}' has policy write_back, which needs --tiers l1,l2")
    # a walk steps the cluster's state alone: each step compares the ranks' own decisions
    # itself (invariant 13), and there is no per-rank event for a replica to apply
    replicas = "off" if schedule == "walk" else opts.replicas
    return Prepared(cfg=cfg, workload=workload, faults=faults, schedule=schedule, l2=l2, l3=l3, bias=bias, replicas=replicas, serving=serving, shared=baseline)


def _tenants(opts: SimOptions, w: Workload) -> tuple[Workload, Workload | None]:
    """The workload with `--tenants` (each request in its namespace: the model keeps
    namespaces apart), and with more than one namespace, the shared baseline
    (`kvsm.sim.tenants`)."""
    n = opts.tenants if opts.tenants is not None else 1
    try:
        check_tenants(n, opts.tenant_mix)
    except ValueError as e:
        raise SimError(str(e)) from None
    if opts.tenant_mix is not None and n == 1:
        raise SimError(f"--tenant-mix {opts.tenant_mix:g}: needs --tenants N with N > 1")
    if n > 1:
        if any(r.ns for r in w.requests):
            raise SimError(f"--tenants {n}: the trace {w.source} names its own namespaces (field '{NAMESPACE_FIELD}')")
        w = with_tenants(w, n, opts.tenant_mix if opts.tenant_mix is not None else 1.0, opts.seed)
    if len(namespaces(w)) < 2:
        return w, None
    return w, shared(w)
