"""Local conform: the spec's and the Python model's successors of given model states.

`kvsm conform` compares the complete state graphs of a small model; local conform
compares the same labelled edges `(state, action, next state)`, but only out of the
states it is given: those a simulator's log passes through (`kvsm validate
--successors`, the campaign's walk runs). It sees what following a log cannot: a
transition the model wrongly disables (the log never takes it, so every logged step
is still one of the spec's) or wrongly enables, and a next state that no log took.

One TLC process computes the successors of many states. The module (`local_module`)
extends a trace module (`kvsm.tla.trace`) whose stretches are the given states, each
written whole (`Firsts[i]`), with no step; an extra variable `root` is the index of
the state TLC starts from: `Init` is every given state (`root \\in 1 .. N`), and each
of the spec's actions, with the parameters `Next` quantifies over, is taken only from
a state with `root > 0`, setting `root' = 0`. So TLC expands each given state one
step and its successors not at all; the graph it dumps (`-dump dot,actionlabels`)
holds exactly the given states' edges, labelled with their actions. Both sides map
into the canonical form of `kvsm.tla.conform` (`canon_model`, `canon_spec_var`) and
the edges out of each state are compared as sets of `(action, next state)`.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ..config import Config
from ..state import ClusterState
from ..transitions import successors
from .canon import SPEC_VARIABLES, Canon, ContentNames, MappingError, readable
from .compact import Tokens
from .conform import Interner, _changes
from .encoder import Encoder
from .errors import TLCError
from .graph import read_dot
from .models import DEFINED_DEFAULTS, ModelConfig, constant_bindings
from .runner import run_tlc
from .specmap import canon_model, canon_spec_var
from .trace import MODULE, SPEC_PARAMS, _wrap, module_text_many, trace_config
from .values import parse_value, state_parts

LOCAL = "KVLocal"
PREFIX = "Loc_"  # the prefix of the local module's actions (their dot labels)
# The domain each spec parameter ranges over: `Next`'s, where a request id and a node
# id are those the state holds: every action of a request is enabled only for a request
# of `requests` or `reload_candidates`, every action of a node only for a node of
# `nodes` or `pending` (each begins with that guard), and quantifying over `Next`'s
# unbounded ids would evaluate each action for every id below the largest.
DOMAINS = {"rid": "LocRids", "node": "LocNodes", "at": "SplitOffsets", "rank": "Ranks", "ok": "BOOLEAN", "fits": "BOOLEAN"}


# Constants that shape how a state is written and read back (the trace module's
# helpers and the encoder read them), the prompts and the request ids `LocRids` ranges
# over: equal for the states of one module. The others (the knobs, the defect, the
# device's pages: each state is written by an encoder of its own config) may differ
# from state to state: each set of them is a copy of the spec (`variant_modules`).
SHAPE = ("R", "P", "L2", "L3", "Prompts", "MaxRequests")


def group_key(cfg: Config) -> str:
    """States whose configs have one key share a TLC process: the same `SHAPE` and
    payloads (how a state is read back)."""
    b = constant_bindings(cfg)
    return repr((cfg.payloads, sorted((k, v) for k, v in b.items() if k in SHAPE)))


SPEC_MODULES = ("KVTree", "KVCache")  # KVCache extends KVTree; each declares constants


def variant_modules(k: int, bindings: dict[str, str]) -> dict[str, str]:
    """Copies of the spec's modules (`KVTree_k`, `KVCache_k`) in which every constant,
    and every constant KVCache defines with a default, is a definition of its value in
    `bindings` (`constant_bindings`; an unbound default keeps its definition). An
    instance of a module with constant parameters would do, but TLC evaluates a
    constant definition once for all the instances of its module, with the first
    one's constants: a copy is a module of its own."""
    from .location import spec_dir

    out = {}
    for name in SPEC_MODULES:
        text = (spec_dir() / f"{name}.tla").read_text()
        text, n = re.subn(rf"^(-+\s*MODULE\s+){name}\b", rf"\g<1>{name}_{k}", text, count=1, flags=re.M)
        if n != 1:
            raise TLCError(f"spec/{name}.tla: no module header")
        for other in SPEC_MODULES:
            if other != name:
                text = re.sub(rf"^(EXTENDS\b.*)\b{other}\b", rf"\g<1>{other}_{k}", text, flags=re.M)
        m = re.search(r"^CONSTANTS\b(.*?)(?=^\s*$|^[A-Z]+\b)", text, flags=re.M | re.S)
        if m is None:
            raise TLCError(f"spec/{name}.tla: no CONSTANTS declaration")
        declared = re.findall(r"^\s*([A-Za-z]\w*)\s*,?", re.sub(r"\\\*[^\n]*", "", m.group(1)), flags=re.M)
        missing = [c for c in declared if c not in bindings]
        if missing:
            raise TLCError(f"spec/{name}.tla: constant {missing[0]} has no value in the config")
        defs = "".join(f"{c} == {bindings[c]}\n" for c in declared)
        text = text[: m.start()] + defs + text[m.end():]
        for c, v in bindings.items():
            text = re.sub(rf"^{c} == .*$", lambda _: f"{c} == {v}", text, flags=re.M) if c in DEFINED_DEFAULTS else text
        out[f"{name}_{k}"] = text
    return out


def local_module(count: int, prompts: str, variants: int = 1, of: Sequence[int] = ()) -> str:
    """The module that expands `count` given states (the trace module's `Firsts`) one
    step with every action of `Next`. With several `variants`, state i's actions are
    those of `V{of[i]}`, an instance of a copy of the spec with its own constants
    (`variant_modules`): runs with other knobs share one TLC process."""
    lines = [f"---- MODULE {LOCAL} ----", f"EXTENDS {MODULE}", "VARIABLE root", "",
             f"LocPrompts == {prompts}",
             "LocRids == {r \\in DOMAIN requests \\cup DOMAIN reload_candidates : r \\in RequestIds}",
             "LocNodes == {n \\in DOMAIN nodes \\cup pending : n \\in NodeIds}",
             "",
             f"LocInit == root \\in 1 .. {count} /\\ SetTo(Firsts[root]) /\\ cursor = 0 /\\ bad = {{}} /\\ stretch = 0",
             "Step == root > 0 /\\ root' = 0 /\\ UNCHANGED <<cursor, bad, stretch>>", ""]
    if variants > 1:
        lines += [f"V{k} == INSTANCE KVCache_{k}" for k in range(1, variants + 1)]
        lines += [_wrap("Variant == <<" + ", ".join(map(str, of)) + ">>"), ""]

    def call(op: str) -> str:
        if variants == 1:
            return op
        return "(" + " \\/ ".join(f"(Variant[root] = {k} /\\ V{k}!{op})" for k in range(1, variants + 1)) + ")"

    names = []
    for name, params in SPEC_PARAMS.items():
        if name == "Arrive":
            body = "\\E p \\in Prompts : " + call("Arrive(next_rid, p.pages, p.out_pages, PromptNs(p))")
        elif params:
            binders = ", ".join(f"{x} \\in {DOMAINS[x]}" for x in params)
            body = f"\\E {binders} : " + call(f"{name}({', '.join(params)})")
        else:
            body = call(name)
        lines.append(f"{PREFIX}{name} == Step /\\ {body}")
        names.append(f"{PREFIX}{name}")
    lines.append("LocNext == " + " \\/ ".join(names))
    lines.append("====")
    return "\n".join(lines) + "\n"


def local_config(cfg: Config) -> ModelConfig:
    """The constants of `cfg` (as a trace module binds them), the prompts through
    `LocPrompts` (a set of records, which a .cfg cannot write)."""
    mc = trace_config(cfg)
    consts = dict(mc.constants)
    consts["Prompts"] = ("<-", "LocPrompts")
    return ModelConfig(constants=consts, sections={"INIT": ["LocInit"], "NEXT": ["LocNext"]})


@dataclass
class Difference:
    """An edge out of given state `index` that only one side has."""

    index: int  # the given state's position in the call's `states`
    side: str  # "model" or "spec": the side that has the edge
    action: str
    to: dict[str, Any]  # what the edge changes (readable)
    other_side_to: list[dict[str, Any]] = field(default_factory=list)  # the other side's edges of that action

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "side": self.side, "action": self.action, "to": self.to, "other_side_to": self.other_side_to}


@dataclass
class LocalResult:
    states: int  # given states compared (distinct)
    spec_edges: int
    model_edges: int
    differences: list[Difference]  # the first of each state with any, in the order of `states`
    seconds: dict[str, float]

    @property
    def ok(self) -> bool:
        return not self.differences


def local_conform(cfg: Config, states: Sequence[ClusterState], arrivals: Sequence[tuple[tuple[int, ...], int]] = (),
                  timeout: float | None = None) -> LocalResult:
    """Compare the spec's successors of each of `states` with the model's: states of
    configs of `cfg`'s `group_key` (the runs of one model), each expanded under its
    own config's constants (one copy of the spec per set, `variant_modules`).
    `arrivals`: the `(tokens, namespace)` of every arrival that led to
    them (the page contents they hold are prefixes of these). A state the spec cannot
    hold raises `MappingError`; TLC's failure `TLCError`."""
    t0 = time.perf_counter()
    tok = Tokens()
    for tokens, ns in list(arrivals) + [(tuple(p.pages), p.ns) for p in cfg.prompts]:
        tok.add(tuple(tokens))
        if ns:
            tok.add_ns(tuple(tokens), ns)
    if any(group_key(s.config) != group_key(cfg) for s in states):
        raise ValueError("local conform: the given states have other constants than the config's")
    variants: dict[str, int] = {}
    of = [variants.setdefault(repr(sorted(constant_bindings(s.config).items())), len(variants) + 1) for s in states]
    encoders: dict[int, Encoder] = {}  # each variant's: a state is written with its own device's pages
    intern = Interner()
    model: list[dict[tuple[str, int], None]] = []
    firsts = []
    for s, k in zip(states, of):
        enc = encoders.setdefault(k, Encoder(s.config, tok))
        firsts.append((enc.whole(s), [], False))
        model.append({(t.name, intern(canon_model(s2))): None for t, s2 in successors(s)})
    roots = [intern(canon_model(s)) for s in states]
    t_model = time.perf_counter() - t0
    if not states:
        return LocalResult(0, 0, 0, [], {"model": round(t_model, 3), "tlc": 0.0})
    modules = {MODULE: module_text_many(firsts, tok, set(tok.used)),
               LOCAL: local_module(len(states), constant_bindings(cfg)["Prompts"], len(variants), of)}
    if len(variants) > 1:
        for b, k in variants.items():
            some = states[of.index(k)].config
            modules.update(variant_modules(k, constant_bindings(some)))
    t1 = time.perf_counter()
    spec: list[set[tuple[str, int]]] = [set() for _ in states]
    with tempfile.TemporaryDirectory(prefix="kvsm-local-") as d:
        dot = Path(d) / "local.dot"
        # The JIT's first tier only: a run this short spent half its CPU compiling
        # (128 states of `small`: 1.6 s of CPU, 1.1 of them starting TLC; 468: 2.7 s
        # against 5.1 with both tiers). The serial collector: one thread, small heap.
        res = run_tlc(Path(f"{LOCAL}.tla"), local_config(cfg), workers=1, dump_dot=dot, keep_output=False,
                      extra_modules=modules, timeout=timeout, jvm=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"))
        if res.violation is not None:
            raise TLCError(f"TLC reported {res.violation.property} while computing successors")
        by_fp: dict[str, int] = {}
        root_of: dict[str, int] = {}
        cache: dict[tuple[str, str], Any] = {}
        edges: list[tuple[str, str, str]] = []
        for kind, item in read_dot(dot):
            if kind == "edge":
                edges.append(item)
                continue
            fp, st = item
            comps: dict[str, Any] = {}
            root = 0
            for name, vtext in state_parts(st):
                if name == "root":
                    root = int(vtext)
                    continue
                if name not in SPEC_VARS:
                    continue
                key = (name, vtext)
                comp = cache.get(key)
                if comp is None:
                    comp = cache[key] = canon_spec_var(name, parse_value(vtext), cfg)
                comps[name] = comp
            by_fp[fp] = intern(Canon(*(comps[n] for n in SPEC_VARIABLES)))
            if root:
                root_of[fp] = root
    for fp, r in root_of.items():
        if by_fp[fp] != roots[r - 1]:
            raise MappingError(f"state {r - 1}: the spec's reading of the model's state is another state")
    for src, dst, label in edges:
        r = root_of.get(src)
        if r is not None:
            spec[r - 1].add((label.removeprefix(PREFIX), by_fp[dst]))
    t_tlc = time.perf_counter() - t1
    names = ContentNames()
    for p in cfg.prompts:
        names.add(p.pages, p.ns)
    for tokens, ns in arrivals:
        names.add(tuple(tokens), ns)
    diffs: list[Difference] = []
    for i, (m, sp) in enumerate(zip(model, spec)):
        mset = set(m)
        only = [("model", e) for e in sorted(mset - sp)] + [("spec", e) for e in sorted(sp - mset)]
        if not only:
            continue
        side, (action, dst) = only[0]
        before = readable(intern.canon[roots[i]], names)
        other = sp if side == "model" else mset
        diffs.append(Difference(i, side, action, _changes(before, readable(intern.canon[dst], names)),
                                [_changes(before, readable(intern.canon[d2], names)) for a, d2 in sorted(other) if a == action]))
    return LocalResult(len(states), sum(len(s) for s in spec), sum(len(m) for m in model), diffs,
                       {"model": round(t_model, 3), "tlc": round(t_tlc, 3), "tlc_process": round(res.seconds, 3), "tlc_cpu": round(res.cpu_seconds or 0.0, 3)})


SPEC_VARS = frozenset(SPEC_VARIABLES)

# ---- the states of a log -------------------------------------------------------------------------

# The states of a log compared at most: a walk of `small` passes through about as many
# distinct states as it takes steps (its request ids and clock only grow), and each
# costs TLC about 3 ms and the model 1 ms, so a long log is sampled (`log_states`).
SAMPLE = 128


@dataclass
class LogStates:
    """The states of a log that local conform compares: `steps[i]` is the number of
    steps after which the log is in `states[i]` (0: the initial state)."""

    config: Config
    steps: list[int]
    states: list[ClusterState]
    arrivals: list[tuple[tuple[int, ...], int]]
    length: int  # the log's steps (up to the first the model rejects)


def compared_config(header: Any) -> Config:
    """The config whose successors are compared: the log's, with the prompts of its
    named config when it has none and its workload is that config's prompts (a walk's
    `--workload config-prompts`: the log's config then leaves the prompts out, but they
    are what arrives, so `Arrive` is compared with them on both sides)."""
    cfg = header.config
    workload = (header.extra or {}).get("workload") or {}
    if cfg.prompts or workload.get("name") != "config-prompts":
        return cfg
    from ..config import ConfigError, load_config

    try:
        named = load_config(cfg.name)
    except (ConfigError, OSError):
        return cfg
    return replace(cfg, prompts=named.prompts)


def spread_sample(names: Sequence[str], limit: int, rng: Any) -> set[int]:
    """`limit` of the states 0 .. len(names) of a log whose steps are `names` (state i
    is the one step i + 1 leaves from), spread over what is taken from them: the states
    are grouped by the transition their log takes next (the last state alone), and the
    groups give one state each in turn, each group's in an order `rng` draws, the
    smallest groups first, until `limit`. A transition the log takes a few times among
    hundreds of others is compared where it was enabled, where a uniform sample of 128
    states of a 600-step walk misses most such states (a reload's claim, an eviction
    with two candidates)."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(list(names) + [""]):
        groups.setdefault(name, []).append(i)
    order = sorted(groups.values(), key=lambda g: (len(g), g[0]))
    for g in order:
        rng.shuffle(g)
    want: set[int] = set()
    k = 0
    while len(want) < limit:
        for g in order:
            if k < len(g) and len(want) < limit:
                want.add(g[k])
        k += 1
    return want


def log_states(path: str | Path, limit: int | None = SAMPLE, last: bool = False) -> LogStates:
    """The states a log passes through, replayed by the model: all of them when they
    are at most `limit` (None: no limit), else `limit` of them spread over the
    transitions taken from them (`spread_sample`), drawn by a generator seeded with
    the log's seed (the same log, the same states,
    in a campaign and in `kvsm validate --successors`); a state the log passes through
    twice is compared once. `last`: the last
    state only (a shrunk case's, whose difference is there). A log that cannot be read
    raises `LogError`."""
    import random

    from ..log import read_log
    from ..state import Rejected, initial_state
    from ..transitions import apply, arrive_ns

    header, stream = read_log(path)
    cfg = compared_config(header)
    items = [t for _, _, t, _ in stream]
    n = len(items) + 1  # states: after 0 .. len(items) steps
    if last:
        want = {n - 1}
    elif limit is None or n <= limit:
        want = set(range(n))
    else:
        want = spread_sample([t.name for t in items], limit, random.Random(f"kvsm-local:{header.seed}"))
    s = initial_state(cfg)
    out = LogStates(cfg, [], [], [], len(items))
    seen: set[str] = set()

    def keep(i: int, st: ClusterState) -> None:
        d = st.digest()
        if d not in seen:
            seen.add(d)
            out.steps.append(i)
            out.states.append(st)

    if 0 in want:
        keep(0, s)
    top = max(want)
    for i, t in enumerate(items, start=1):
        if i > top:
            break
        if t.name == "Arrive":
            out.arrivals.append((tuple(t.arg("tokens")), arrive_ns(t)))
        try:
            s = apply(s, t)
        except Rejected:
            out.length = i - 1
            break
        if i in want:
            keep(i, s)
    return out


def local_log(path: str | Path, limit: int | None = SAMPLE, last: bool = False) -> tuple[LogStates, LocalResult]:
    """Local conform at the states of the log at `path` (`log_states`). A log that
    cannot be read raises `LogError`; one with a state the spec cannot hold, or that
    the model rejects before any state is compared, `MappingError` naming the log."""
    ls = log_states(path, limit, last)
    if last and ls.length and not ls.steps:
        raise MappingError(f"{path}: the model rejects step {ls.length + 1}, so the log has no last state to compare")
    try:
        return ls, local_conform(ls.config, ls.states, ls.arrivals)
    except MappingError as e:
        raise MappingError(f"{path}: a state of the log has no counterpart in the spec: {e}") from None
