"""What one run of a campaign is, derived from its number alone.

A campaign's choices (`Space`: the configs, tier sets, fault mixes, schedule and
injected defect it was given) and a run's number (its seed) decide everything about
the run, swarm-style (each run draws its own features, Groce et al., ISSTA 2012):
which config, tiers and fault mix (with the default `swarm` mix, which fault kinds are
on and at what rate), which workload and how many requests, the page capacities (tiny
ones included), the rank count, the victim order, and the config's knobs (`SETTINGS`:
prepared backups, the commit call, thresholds, the L3 limits, and with
`knobs = reference` the fidelity knobs' reference values). The same space and number
give the same `RunSpec` on every machine, and `command(spec)` is the `kvsm sim` command
that reproduces the run alone. A run that does not walk may also spread its workload
over tenants (`TENANT_SHARE`), drawn apart.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..bounds import MAX_GENERATED_REQUESTS
from ..config import KNOB_VALUES, KNOBS, REFERENCE_KNOBS, Config, ConfigError, load_config
from ..sim import FaultSpecError, Faults, SimError, SimOptions, load_workload
from ..sim.faults import KINDS
from ..sim.generators import CONFIG_PROMPTS
from ..sim.options import TIERS, format_setting, parse_schedule, prepare

CONFIGS = ("small", "default", "l3")
TIER_SETS = TIERS
# `--faults swarm` (the default): each run turns each fault kind on with probability 1/2,
# at a rate drawn from the kind's own (disk only with L3)
SWARM = "swarm"
FAULT_MIXES = (SWARM,)
# the mixes campaigns drew before swarm runs: one per fault kind, and one with every kind
FIXED_MIXES = (
    "none",
    "slow:0.1",
    "stall:0.05",
    "abort:0.1",
    "burst:0.05",
    "disk:0.01",
    "slow:0.05,stall:0.02,abort:0.05,burst:0.02,disk:0.005",
)
WORKLOADS = ("system-prompts", "multi-turn", "long-doc", "thrash", "synthetic")
# Capacities a run draws, as how many of its average prompts a tier holds (None: the
# config's own pages): small ones make every tier evict, large ones let reloads and
# load-backs happen. The worker turns them into pages from the run's workload
# (`resolve`), so that they mean the same for two-page and hundred-page prompts.
# (repeated values are drawn more often: pools that evict without refusing most requests)
L1_PROMPTS = (None, 0.25, 0.5, 1, 2, 4, 4, 8, 8, 16)  # device pages of all lanes together
L2_PROMPTS = (None, 0.5, 1, 4, 16)
L3_PROMPTS = (None, 1, 2, 8, 32)
RANKS = (None, 1, 2, 4)
EVICTIONS = (None, "lru", "slru")


SWARM_RATES = {"slow": (0.02, 0.1, 0.3), "stall": (0.01, 0.05, 0.2), "abort": (0.02, 0.05, 0.1),
               "burst": (0.02, 0.1), "disk": (0.002, 0.01, 0.05)}
# Config fields a run draws (None: the config's own), and for which tier sets; each
# fidelity knob of `kvsm.config.KNOBS` joins with its non-default values when the
# campaign's `knobs` is `reference` (they model the reference's findings: runs that
# take them fail by design).
SETTINGS: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("prepared_backups", (None, False, True), "l1,l2"),
    ("commit_call", (None, "fixed", "atomic"), "l1"),
    ("policy", (None, "write_back"), "l1,l2"),
    ("write_threshold", (None, 1, 2, 4), "l1,l2"),
    ("load_back_threshold", (None, 1, 16, 64), "l1,l2"),
    ("reload_ttl", (None, 1, 2, 8), "l1,l2,l3"),
    ("spill_inflight", (None, 1, 2, 4), "l1,l2,l3"),
    ("reload_inflight", (None, 1, 2), "l1,l2,l3"),
    ("spill_queue_cap", (None, 1, 2, 8), "l1,l2,l3"),
    # the reference's variants of the host tier (docs/model.md): a match that carries its
    # host hit to the load-back, and the write-back policy's synchronous write-back of a
    # load-back's device victims
    ("carry_host_hit", (None, True), "l1,l2"),
    ("write_back_evict", (None, "sync"), "l1,l2"),
)
# The knobs: the fidelity knobs (each with the reference's value and the fixed one,
# `kvsm.config.REFERENCE_KNOBS`) and prepared backups (the reference's production path).
# A config that sets one away from its default keeps it in every run (`_draw_settings`).
KNOB_FIELDS = tuple(REFERENCE_KNOBS) + ("prepared_backups",)
_SETTING_TIERS = {key: needs for key, _, needs in SETTINGS}
_WALK_SETTINGS = frozenset(KNOB_FIELDS + ("commit_call", "policy", "carry_host_hit", "write_back_evict"))
KNOB_MODES = ("fixed", "reference")
# with `knobs = reference`, the reference's disk key (finding 7) where the run has L3:
# drawn last, so that it moves no other draw
L3_KEY_DRAW = ("l3_key", (None, "tokens"), "l1,l2,l3")
# `--schedule swarm` (the default): a run walks one of the campaign's TLC models
# (`WALK_SHARE` of the runs, `walk_models`, `walk_run`) or takes the random schedule, with
# a bias drawn from its number. Half: the walks reach the orders the simulator's runs
# almost never take (a load-back's write-back evicting host leaves, a reload of a node
# whose anchor changed), the random schedule what only a real workload and a clock give
# (slow and stalled copies, bursts, hundred-page prompts, four ranks).
SWARM_SCHEDULE = "swarm"
SCHEDULE = SWARM_SCHEDULE
WALK_SHARE = 0.5
# a walk run's requests are this many times the run's drawn count: a walk has no time,
# each request is a few of its steps, and what it finds needs a request to come back
# after its pages were evicted, spilled and reloaded (a walk of `small` takes about 13
# steps a request)
WALK_REQUESTS = 16
# One walk run in two (drawn from the walk's own stream, after its model) takes
# `WALK_LIFT`: rollbacks and free host evictions as likely as a request's steps. The
# models' walk weights keep both rare, so that requests come back to host copies and
# load them back; but an order such as a host eviction then a rollback (`EvictHost>
# Rollback`, `Rollback>CommitCall`) needs both, and no run with the models' weights
# takes it in hundreds.
WALK_LIFT_SHARE = 0.5
WALK_LIFT = ("walk_weights", "EvictHost:1,Rollback:1")
# One walk run in two (the walk stream's last draw) holds `WALK_WIDE_PAGES` more device
# pages per lane than its model (`kvsm sim --l1-pages`): the models' one page per lane
# leaves one node on the device, so an eviction never chooses between two victims, and
# the victim order (slru's protection of twice-hit nodes, the order's first) is never
# compared with the spec's.
WALK_WIDE_SHARE = 0.5
WALK_WIDE_PAGES = 1
# Tenants (docs/sim.md, "Tenants"): one run in two whose workload is not its config's
# prompts (drawn from its own stream `kvsm-campaign-tenants:<seed>`, so that it moves no
# other draw) spreads its requests over `TENANTS` namespaces (`kvsm sim --tenants N`),
# `TENANT_MIXES` of them on prompt families every tenant shares (`--tenant-mix X`): the
# same block ids in several namespaces, where a tier whose key ignores the namespace
# breaks invariant 15 Isolation. A walk keeps its model's prompts, and their namespaces
# where the model has them (`tenants`): another spread would be another model.
TENANT_SHARE = 0.5
TENANTS = (2, 3, 8)
TENANT_MIXES = (0.5, 1.0)


class SpaceError(ValueError):
    """A campaign option that cannot run; the message names the option and why."""


@dataclass(frozen=True)
class Space:
    """A campaign's choices; `tiers_for[config]` are the tier sets that config can run."""

    configs: tuple[str, ...] = CONFIGS
    tiers: tuple[str, ...] = TIER_SETS
    faults: tuple[str, ...] = FAULT_MIXES
    bug: str = "none"
    workloads: tuple[str, ...] = WORKLOADS
    requests: tuple[int, int] = (8, 48)
    tiers_for: tuple[tuple[str, tuple[str, ...]], ...] = ()
    schedule: str = SCHEDULE
    knobs: str = "fixed"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tiers_for"] = {c: list(t) for c, t in self.tiers_for}
        return d


def make_space(
    configs: list[str] | None = None,
    tiers: list[str] | None = None,
    faults: list[str] | None = None,
    bug: str = "none",
    requests: tuple[int, int] = (8, 48),
    workloads: list[str] | None = None,
    schedule: str = SCHEDULE,
    knobs: str = "fixed",
) -> Space:
    """Check every choice before any run starts: each config loads and accepts the
    injected defect `bug` (the config's own refusal otherwise), each tier set and fault
    mix parses, and each config has a tier set it can run."""
    configs = list(configs or CONFIGS)
    tiers = list(tiers or TIER_SETS)
    faults = list(faults or FAULT_MIXES)
    if not configs:
        raise SpaceError("-c/--config: no config given")
    for t in tiers:
        if t not in TIER_SETS:
            raise SpaceError(f"--tiers {t!r}: must be one of {' | '.join(TIER_SETS)}")
    if schedule != SWARM_SCHEDULE:
        try:
            parse_schedule(schedule)
        except SimError as e:
            raise SpaceError(f"{e} (or {SWARM_SCHEDULE}, a campaign's own)") from None
    if knobs not in KNOB_MODES:
        raise SpaceError(f"--knobs {knobs!r}: must be one of {' | '.join(KNOB_MODES)}")
    for f in faults:
        if f == SWARM:
            continue
        try:
            Faults.parse(f)
        except FaultSpecError as e:
            raise SpaceError(str(e)) from None
    lo, hi = requests
    if not 1 <= lo <= hi:
        raise SpaceError(f"--requests {lo}..{hi}: need 1 <= MIN <= MAX")
    if hi > MAX_GENERATED_REQUESTS:  # kvsm sim -n's bound, which each run's workload has
        raise SpaceError(f"--requests {lo}..{hi}: MAX is more than {MAX_GENERATED_REQUESTS}, the most requests a run makes (kvsm sim -n's bound)")
    for w in workloads or WORKLOADS:
        if w not in WORKLOADS:
            raise SpaceError(f"workload {w!r}: must be one of {', '.join(WORKLOADS)}")
    tiers_for = []
    for c in configs:
        try:
            cfg = load_config(c)
            cfg.with_bug(bug, f"config '{c}' with --bug {bug}")
        except ConfigError as e:
            raise SpaceError(str(e)) from None
        ok = []
        for t in tiers:
            try:
                prepare(SimOptions(workload="system-prompts", requests=1, config=c, tiers=t, bug=bug,
                                   schedule="random" if schedule == SWARM_SCHEDULE else schedule))
            except SimError:
                continue  # e.g. a write_back config cannot run without L2
            ok.append(t)
        if not ok:
            raise SpaceError(f"config '{c}' can run none of the tier sets {', '.join(tiers)}")
        tiers_for.append((c, tuple(ok)))
    space = Space(tuple(configs), tuple(tiers), tuple(faults), bug, tuple(workloads or WORKLOADS), (lo, hi), tuple(tiers_for), schedule, knobs)
    walked = walk_models(space) if schedule == SWARM_SCHEDULE else ()
    if walked and hi * WALK_REQUESTS > MAX_GENERATED_REQUESTS:
        raise SpaceError(f"--requests {lo}..{hi}: a walk run of --schedule {SWARM_SCHEDULE} (configs {', '.join(walked)}) makes {WALK_REQUESTS} times MAX, "
                         f"{hi * WALK_REQUESTS} requests, more than {MAX_GENERATED_REQUESTS} (kvsm sim -n's bound); MAX is at most {MAX_GENERATED_REQUESTS // WALK_REQUESTS} here")
    return space


@dataclass(frozen=True)
class RunSpec:
    """One run: every `kvsm sim` option it needs, and its number (its seed)."""

    seed: int
    config: str
    tiers: str
    faults: str
    workload: str
    requests: int | None
    ranks: int | None = None
    l1_pages: int | None = None
    l2_pages: int | None = None
    l3_pages: int | None = None
    eviction: str | None = None
    bug: str = "none"
    # tier sizes in average prompts (L1, L2, L3), turned into the pages above by `resolve`
    prompts: tuple[float | None, float | None, float | None] | None = None
    schedule: str = "auto"  # `kvsm sim --schedule` (records before swarm runs: auto)
    settings: tuple[tuple[str, Any], ...] = ()  # config fields, as `kvsm sim --set`
    tenants: int | None = None  # `kvsm sim --tenants` (None: the workload as it is)
    tenant_mix: float | None = None  # `kvsm sim --tenant-mix`, with tenants

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompts"] = list(self.prompts) if self.prompts is not None else None
        d["settings"] = dict(self.settings)
        for k in ("tenants", "tenant_mix"):  # a run without tenants: the record it always had
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RunSpec":
        d = dict(d)
        if d.get("prompts") is not None:
            d["prompts"] = tuple(d["prompts"])
        d["settings"] = tuple((d.get("settings") or {}).items())
        return cls(**d)

    def options(self, check: bool = False, workload: str | None = None) -> SimOptions:
        """The simulator's options (`workload` replaces the workload by a trace file, whose
        requests are then all simulated, each in the namespace the file gives it: no
        tenants spread); tier sizes in prompts are resolved first."""
        if self.prompts is not None:
            return resolve(self).options(check, workload)
        return SimOptions(
            workload=workload or self.workload,
            config=self.config,
            ranks=self.ranks,
            seed=self.seed,
            requests=None if workload else self.requests,
            tiers=self.tiers,
            l1_pages=self.l1_pages,
            l2_pages=self.l2_pages,
            l3_pages=self.l3_pages,
            eviction=self.eviction,
            faults=self.faults,
            check=check,
            bug=self.bug,
            schedule=self.schedule,
            settings=self.settings,
            tenants=None if workload else self.tenants,
            tenant_mix=None if workload else self.tenant_mix,
        )


def derive(space: Space, seed: int) -> RunSpec:
    """The run numbered `seed` of the campaign `space` (a pure function of both)."""
    spec = _draw(space, seed)
    if space.schedule != SWARM_SCHEDULE:
        return _draw_tenants(spec)
    # (drawn apart, so that a run that does not walk is the run its number always gave)
    walk = random.Random(f"kvsm-campaign-walk:{seed}")
    models = walk_models(space)
    if walk.random() >= WALK_SHARE or not models:
        return _draw_tenants(replace(spec, schedule="random"))
    # a walk run walks one of the campaign's models, its other features drawn for that model
    config = walk.choice(models)
    run = walk_run(_draw(replace(space, configs=(config,)), seed), space)
    if run.schedule == "walk" and walk.random() < WALK_LIFT_SHARE:
        run = replace(run, settings=run.settings + (WALK_LIFT,))
    if run.schedule == "walk" and walk.random() < WALK_WIDE_SHARE:
        run = replace(run, l1_pages=load_config(config).L1 + WALK_WIDE_PAGES)
    return run


def _draw_tenants(spec: RunSpec) -> RunSpec:
    """`spec`, spread over tenants in `TENANT_SHARE` of the runs whose workload is not the
    config's prompts (from the run's own tenants stream: no other draw moves)."""
    rng = random.Random(f"kvsm-campaign-tenants:{spec.seed}")
    on = rng.random() < TENANT_SHARE
    n, mix = rng.choice(TENANTS), rng.choice(TENANT_MIXES)
    if not on or spec.workload == CONFIG_PROMPTS:
        return spec
    return replace(spec, tenants=n, tenant_mix=mix)


def _draw(space: Space, seed: int) -> RunSpec:
    """The features of run `seed`, drawn from its number (`derive`, before its schedule)."""
    rng = random.Random(f"kvsm-campaign:{seed}")
    config = rng.choice(space.configs)
    tiers = rng.choice(dict(space.tiers_for)[config])
    mix = rng.choice(space.faults)
    faults = _swarm_faults(rng, tiers) if mix == SWARM else _fit_faults(mix, tiers)
    workload = rng.choice(space.workloads)
    requests = rng.randint(*space.requests)
    ranks = rng.choice(RANKS)
    l1 = rng.choice(L1_PROMPTS)
    l2 = rng.choice(L2_PROMPTS) if tiers != "l1" else None
    l3 = rng.choice(L3_PROMPTS) if tiers == "l1,l2,l3" else None
    eviction = rng.choice(EVICTIONS)
    settings = _draw_settings(rng, space, config, tiers)
    return RunSpec(seed, config, tiers, faults, workload, requests, ranks, eviction=eviction, bug=space.bug,
                   prompts=(l1, l2, l3), schedule=space.schedule, settings=settings)


def walk_models(space: Space) -> tuple[str, ...]:
    """The campaign's configs that are models TLC checks (a prompt list and a bound on
    requests: `small`, `l3`, not `default`, whose pools no walk of its prompts fills in a
    run's length), whose own tier set the campaign runs: those a walk run walks."""
    out = []
    for c in space.configs:
        cfg = load_config(c)
        if cfg.prompts and cfg.max_requests > 0 and _own_tiers(cfg) in dict(space.tiers_for)[c]:
            out.append(c)
    return tuple(out)


def _own_tiers(cfg: Config) -> str:
    return "l1,l2,l3" if cfg.L3 else "l1,l2" if cfg.L2 else "l1"


def walk_run(spec: RunSpec, space: Space) -> RunSpec:
    """Run `spec` as a walk of its config's own model (`kvsm sim --schedule walk
    --workload config-prompts`): the config's prompts, pools, ranks and tiers (those of
    TLC's model), with the run's drawn faults (aborts and disk faults are transitions of
    the walk), victim order and variants (`_WALK_SETTINGS`: the knobs, the commit call,
    the policy; not the thresholds and L3 limits the model's sizes were chosen with),
    and `WALK_REQUESTS` times its requests.
    A config without prompts, or whose own tiers the campaign does not run, takes the
    random schedule instead."""
    cfg = load_config(spec.config)
    own = _own_tiers(cfg)
    if not cfg.prompts or own not in dict(space.tiers_for)[spec.config]:
        return replace(spec, schedule="random")
    faults = spec.faults if own == "l1,l2,l3" else _fit_faults(spec.faults, own)
    settings = tuple((k, v) for k, v in spec.settings if k in _WALK_SETTINGS and len(own) >= len(_SETTING_TIERS.get(k, "l1")))
    return replace(spec, tiers=own, faults=faults, workload=CONFIG_PROMPTS, requests=(spec.requests or 1) * WALK_REQUESTS,
                   ranks=None, prompts=None, schedule="walk", settings=settings)


def _swarm_faults(rng: random.Random, tiers: str) -> str:
    """Each fault kind on with probability 1/2, at a drawn rate (disk only with L3)."""
    items = []
    for kind in KINDS:
        on = rng.random() < 0.5
        rate = rng.choice(SWARM_RATES.get(kind, (0.05,)))
        if on and (kind != "disk" or tiers == "l1,l2,l3"):
            items.append(f"{kind}:{rate:g}")
    return ",".join(items) or "none"


def _draw_settings(rng: random.Random, space: Space, config: str, tiers: str) -> tuple[tuple[str, Any], ...]:
    """The config fields this run sets (`SETTINGS`, and the fidelity knobs with
    `knobs = reference`), each only where the run's tier set uses it. A knob
    (`KNOB_FIELDS`) the config sets away from its default is the config's choice and is
    kept (the `reference` profile's reference values, `l3`'s atomic commit call): a draw
    never replaces it (the value is still drawn, so that every other draw of the run
    stays the same)."""
    cfg = load_config(config)
    kept = {k for k in KNOB_FIELDS if getattr(cfg, k) != Config.__dataclass_fields__[k].default}
    table = list(SETTINGS)
    if space.knobs == "reference":
        table += [(k, (None,) + tuple(v for v in KNOB_VALUES if v != "fixed"), "l1") for k in KNOBS]
        table.append(("commit_call", (None, "reference"), "l1"))
        table.append(L3_KEY_DRAW)
    out: dict[str, Any] = {}
    for key, values, needs in table:
        v = rng.choice(values)
        if v is None or len(tiers) < len(needs) or getattr(cfg, key, None) == v or key in kept:
            continue
        if key == "policy" and (tiers == "l1" or out.get("prepared_backups")):
            continue  # write_back needs L2; prepared backups are write-through's
        if key == "prepared_backups" and cfg.policy != "write_through":
            continue
        out[key] = v
    return tuple(out.items())


def resolve(spec: RunSpec) -> RunSpec:
    """`spec` with its tier sizes in pages: `prompts` times the average prompt of its
    workload (per lane for L1), at least one page."""
    if spec.prompts is None:
        return spec
    k1, k2, k3 = spec.prompts
    cfg = load_config(spec.config)
    R = spec.ranks or cfg.R
    reqs = load_workload(spec.workload, spec.requests, spec.seed, device_pages=R * cfg.L1).requests
    mean = sum(len(r.hash_ids) for r in reqs) / max(1, len(reqs))

    def pages(k: float | None, per: int = 1) -> int | None:
        return None if k is None else max(1, -(-int(k * mean) // per))

    return replace(spec, l1_pages=pages(k1, R), l2_pages=pages(k2), l3_pages=pages(k3), prompts=None)


def _fit_faults(spec: str, tiers: str) -> str:
    """A fault mix without its disk faults where the run has no disk."""
    f = Faults.parse(spec)
    if f.disk and tiers != "l1,l2,l3":
        f = replace(f, disk=0.0)
    return str(f)


def command(spec: RunSpec, workload: str | None = None) -> str:
    """The `kvsm sim` command that runs `spec` alone, every invariant checked."""
    o = spec.options(workload=workload)
    args = ["kvsm", "sim", "--workload", o.workload, "--config", o.config, "--seed", str(o.seed), "--tiers", o.tiers]
    if o.requests is not None:
        args += ["--requests", str(o.requests)]
    for flag, v in (("--ranks", o.ranks), ("--l1-pages", o.l1_pages), ("--l2-pages", o.l2_pages), ("--l3-pages", o.l3_pages), ("--eviction", o.eviction)):
        if v is not None:
            args += [flag, str(v)]
    if o.tenants is not None:
        args += ["--tenants", str(o.tenants), "--tenant-mix", f"{o.tenant_mix:g}"]
    if o.faults != "none":
        args += ["--faults", o.faults]
    if o.schedule != "auto":
        args += ["--schedule", o.schedule]
    for key, value in o.settings:
        args += ["--set", format_setting(key, value)]
    if spec.bug != "none":
        args += ["--bug", spec.bug]
    args.append("--check")
    return " ".join(shlex.quote(a) for a in args)


def seeds_of(runs: int | None, seeds: str | None) -> range:
    """`--runs N` (seeds 0..N-1) or `--seeds A..B` (inclusive)."""
    if runs is not None and seeds is not None:
        raise SpaceError("give --runs or --seeds, not both")
    if seeds is None:
        n = 100 if runs is None else runs
        if n < 1:
            raise SpaceError(f"--runs must be >= 1, got {n}")
        return range(n)
    a, sep, b = seeds.partition("..")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise SpaceError(f"--seeds {seeds!r}: expected A..B with integers A <= B") from None
    if not sep or lo > hi or lo < 0:
        raise SpaceError(f"--seeds {seeds!r}: expected A..B with integers 0 <= A <= B")
    return range(lo, hi + 1)
