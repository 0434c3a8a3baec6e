"""`kvsm conform`: the spec and the Python model must have the same state graph.

TLC enumerates every reachable state of a model and dumps the complete graph
(`-dump dot,actionlabels`: every state as TLA+ text, every edge labelled with its
action's name); the Python model explores the same constants breadth-first
(`kvsm.explore`). Both graphs are mapped into the canonical form of
`kvsm.tla.specmap` and compared as sets: the states, and the labelled edges
`(state, action, next state)`. An edge that only one side has and whose source state
both sides reach is a *divergence*: that side's transition of that name does
something the other's does not. The examples show the earliest divergences first.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..config import Config
from ..explore import Graph, explore
from .errors import TLCError
from .graph import read_dot
from .location import spec_dir
from .models import ModelConfig, load_model, module_definitions, read_cfg, with_bug
from .runner import graph_workers, run_tlc
from .trace import SPEC_PARAMS
from .canon import Canon, ContentNames, SPEC_VARIABLES, readable
from .specmap import canon_model, canon_spec_var
from .values import parse_value, state_parts


class Interner:
    """Canonical states <-> small integers, shared by both graphs.

    A new state is stored with its variables' values shared: each value, and each
    element of a set or tuple value, is kept once, whatever the states that have it
    (most states differ from their neighbours in a few rows), which keeps a graph of
    millions of states about ten times smaller than its states built apart."""

    def __init__(self) -> None:
        self.ids: dict[Canon, int] = {}
        self.canon: list[Canon] = []
        self._values: list[dict[Any, Any]] = [{} for _ in Canon._fields]
        self._elements: list[dict[Any, Any]] = [{} for _ in Canon._fields]

    def __call__(self, c: Canon) -> int:
        i = self.ids.get(c)
        if i is None:
            c = Canon(*map(self._shared, self._values, self._elements, c))
            i = self.ids[c] = len(self.canon)
            self.canon.append(c)
        return i

    @staticmethod
    def _shared(values: dict[Any, Any], elements: dict[Any, Any], v: Any) -> Any:
        w = values.get(v)
        if w is None:
            if type(v) in (frozenset, tuple) and v:
                v = type(v)(elements.setdefault(x, x) for x in v)
            w = values[v] = v
        return w


class Edge(NamedTuple):
    """A labelled edge of a state graph: `action` leads from state `src` to state `dst`."""

    src: int
    action: str
    dst: int


@dataclass
class StateGraph:
    initial: int
    states: set[int] = field(default_factory=set)
    edges: set[Edge] = field(default_factory=set)
    seconds: float = 0.0


def graph_config(cfg: Path | ModelConfig, where: str = "", bug: str | None = None) -> ModelConfig:
    """The model's constants with INIT Init and NEXT Next and nothing to check: the
    complete graph is wanted, and state constraints would cut it short (a VIEW, which
    only merges states for checking, is left out). With an
    injected defect `bug`, `Bug` is bound to it and the next-state relation is the
    cut one of `cut_module`."""
    mc = read_cfg(cfg) if isinstance(cfg, Path) else cfg
    where = where or str(cfg)
    for kw in ("CONSTRAINTS", "ACTION_CONSTRAINTS", "SYMMETRY"):
        if mc.names(kw):
            raise TLCError(f"{where}: has {kw}; conform compares complete state graphs, which {kw} would change")
    out = ModelConfig(constants=dict(mc.constants), sections={"INIT": ["Init"], "NEXT": ["Next"]})
    if bug is not None:
        out = with_bug(out, bug)
        out.sections["NEXT"] = ["CutNext"]
    return out


CUT = "Cut_"  # the prefix of the cut module's actions (their dot labels)
# The domain each spec parameter ranges over in `Next`.
PARAM_DOMAINS = {"rid": "RequestIds", "node": "NodeIds", "at": "SplitOffsets", "rank": "Ranks", "ok": "BOOLEAN", "fits": "BOOLEAN"}


def cut_module(stem: str) -> str:
    """A module extending model `stem` whose next-state relation `CutNext` takes every
    action of `Next` from a state where `Healthy` holds (every invariant the Python
    model checks), and none from a state where it does not: the graph of a model with
    an injected defect up to the states where the defect breaks it, which is what
    `explore(cut=True)` explores. A broken state stays in the graph, without the steps
    out of it, which the defect has left undefined. Each action `X` is `Cut_X`, so
    that TLC labels its edges with a name `tlc_graph` maps back to `X`."""
    lines = [f"---- MODULE {stem}_cut ----", f"EXTENDS {stem}"]
    names = []
    # Healthy first, though TLC then evaluates it once per action and state: after the
    # action it would cost one evaluation per step taken (a third of the time under
    # duplicate_ack), but an action is not defined on every broken state (under
    # evict_pending TLC fails applying a function outside its domain)
    for name, params in SPEC_PARAMS.items():
        if name == "Arrive":
            body = "Healthy /\\ \\E p \\in Prompts : Arrive(next_rid, p.pages, p.out_pages, PromptNs(p))"
        elif params:
            try:
                binders = ", ".join(f"{x} \\in {PARAM_DOMAINS[x]}" for x in params)
            except KeyError as e:
                raise TLCError(f"conform --bug: no domain for {name}'s parameter {e}") from None
            body = f"Healthy /\\ \\E {binders} : {name}({', '.join(params)})"
        else:
            body = f"Healthy /\\ {name}"
        lines.append(f"{CUT}{name} == {body}")
        names.append(f"{CUT}{name}")
    lines.append("CutNext == " + " \\/ ".join(names))
    lines.append("====")
    return "\n".join(lines) + "\n"


def tlc_graph(
    module: Path,
    cfg: Path | ModelConfig,
    config: Config,
    intern: Interner,
    workers: int | None = None,
    extra_modules: dict[str, str] | None = None,
    view: bool = False,
) -> StateGraph:
    """TLC's complete state graph of a model, its states interned as canonical states.
    With `view`, the graph TLC explores under StampView (spec/KVView.tla): one state
    of each class, an edge from it for each of its edges, to the state that stands for
    the successor's class. The view is a bisimulation (tests/test_view.py), so a
    scenario this graph has is one the complete graph has. `workers`: TLC's threads,
    by default one per CPU for a complete graph (`kvsm.tla.runner.graph_workers`) and
    one under the view (the state TLC keeps of a class is the first it reaches)."""
    if workers is None:
        workers = 1 if view else graph_workers()
    t0 = time.perf_counter()
    name = cfg.name if isinstance(cfg, Path) else module.stem
    with tempfile.TemporaryDirectory(prefix="kvsm-conform-") as tmp:
        dot = Path(tmp) / "graph.dot"
        bug = None if config.bug == "none" else config.bug
        gc = graph_config(cfg, name, bug)
        if view:
            if bug is not None:
                raise TLCError(f"{name}: a graph under the view is of a model without a defect")
            viewed = f"{module.stem}_view"
            gc.sections["VIEW"] = ["StampView"]
            extra = {**(extra_modules or {}), viewed: f"---- MODULE {viewed} ----\nEXTENDS {module.stem}, KVView\n====\n"}
            if module.stem not in extra and module.parent.resolve() != spec_dir().resolve():
                extra[module.stem] = module.read_text()
            res = run_tlc(Path(f"{viewed}.tla"), gc, workers=workers, dump_dot=dot, keep_output=False, extra_modules=extra)
        elif bug is None:
            res = run_tlc(module, gc, workers=workers, dump_dot=dot, keep_output=False, extra_modules=extra_modules)
        else:
            # the model's module under the cut module: the cut module extends it
            base = (extra_modules or {}).get(module.stem)
            cut = f"{module.stem}_cut"
            extra = {**(extra_modules or {}), cut: cut_module(module.stem), module.stem: base if base is not None else module.read_text()}
            res = run_tlc(Path(f"{cut}.tla"), gc, workers=workers, dump_dot=dot, keep_output=False, extra_modules=extra)
        if res.violation is not None:
            raise TLCError(f"TLC reported {res.violation.property} while dumping the graph of {name}")
        by_fp: dict[str, int] = {}
        raw_edges: list[tuple[str, str, str]] = []
        parts_cache: dict[tuple[str, str], Any] = {}
        initial: int | None = None
        for kind, item in read_dot(dot):
            if kind == "edge":
                raw_edges.append(item)
                continue
            fp, text = item
            comps = {}
            for name, vtext in state_parts(text):
                key = (name, vtext)
                comp = parts_cache.get(key)
                if comp is None:
                    comp = parts_cache[key] = canon_spec_var(name, parse_value(vtext), config)
                comps[name] = comp
            sid = intern(Canon(*(comps[n] for n in SPEC_VARIABLES)))
            by_fp[fp] = sid
            if initial is None:
                initial = sid  # TLC writes the initial state first
    if initial is None:
        raise TLCError(f"TLC's graph of {name} has no state")
    g = StateGraph(initial)
    g.states = set(by_fp.values())
    for src, dst, label in raw_edges:
        g.edges.add(Edge(src=by_fp[src], action=label.removeprefix(CUT), dst=by_fp[dst]))
    g.seconds = time.perf_counter() - t0
    return g


def model_graph(config: Config, intern: Interner, explored: Graph | None = None) -> StateGraph:
    """The Python model's graph of `config` as canonical state ids; `explored` reuses an
    exploration of that config already made (`kvsm.explore.explore`)."""
    t0 = time.perf_counter()
    ex = explored if explored is not None else explore(config, check=False, cut=config.bug != "none")
    first = next(iter(ex.states))  # explore inserts the initial state first
    if explored is None:  # ours: each state let go once it has its id (a large graph's peak)
        ex.parents.clear()
        ids = {}
        while ex.states:
            d, s = ex.states.popitem()
            ids[d] = intern(canon_model(s))
    else:
        ids = {d: intern(canon_model(s)) for d, s in ex.states.items()}
    g = StateGraph(ids[first])
    g.states = set(ids.values())
    g.edges = {Edge(src=ids[a], action=name, dst=ids[b]) for a, name, b in ex.edges}
    g.seconds = time.perf_counter() - t0
    return g


@dataclass
class ConformResult:
    tlc_states: int
    model_states: int
    tlc_edges: int
    model_edges: int
    only_in_tlc: dict[str, Any]
    only_in_model: dict[str, Any]
    examples: list[dict[str, Any]]
    seconds: dict[str, float]

    @property
    def equal(self) -> bool:
        return not (self.only_in_tlc["states"] or self.only_in_tlc["edges"] or self.only_in_model["states"] or self.only_in_model["edges"])

    def to_json(self) -> dict[str, Any]:
        return {
            "tlc_states": self.tlc_states,
            "model_states": self.model_states,
            "tlc_edges": self.tlc_edges,
            "model_edges": self.model_edges,
            "only_in_tlc": self.only_in_tlc,
            "only_in_model": self.only_in_model,
            "examples": self.examples,
            "seconds": self.seconds,
        }


def _depths(g: StateGraph) -> dict[int, int]:
    out = {g.initial: 0}
    succ: dict[int, list[int]] = {}
    for e in g.edges:
        succ.setdefault(e.src, []).append(e.dst)
    q = deque([g.initial])
    while q:
        a = q.popleft()
        for b in succ.get(a, ()):
            if b not in out:
                out[b] = out[a] + 1
                q.append(b)
    return out


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in after.items() if before.get(k) != v}


def compare(tlc: StateGraph, model: StateGraph, intern: Interner, names: ContentNames, max_examples: int = 5) -> ConformResult:
    both = tlc.states & model.states
    only_t_edges = tlc.edges - model.edges
    only_m_edges = model.edges - tlc.edges

    def side(states: set[int], edges: set) -> dict[str, Any]:
        diverging = Counter(e.action for e in edges if e.src in both)
        return {"states": len(states), "edges": len(edges), "diverging": dict(sorted(diverging.items()))}

    examples: list[dict[str, Any]] = []
    if tlc.initial != model.initial:
        examples.append(
            {
                "kind": "initial state",
                "tlc": readable(intern.canon[tlc.initial], names),
                "model": readable(intern.canon[model.initial], names),
            }
        )
    depth = _depths(model) if (only_t_edges or only_m_edges) else {}
    groups: dict[tuple[str, int, str], list[int]] = {}
    for where, edges in (("tlc", only_t_edges), ("model", only_m_edges)):
        for e in edges:
            if e.src in both:
                groups.setdefault((where, e.src, e.action), []).append(e.dst)
    other_targets: dict[tuple[str, int, str], list[int]] = {}
    if groups:
        for where, edges in (("tlc", tlc.edges), ("model", model.edges)):
            for e in edges:
                other_targets.setdefault((where, e.src, e.action), []).append(e.dst)
    for where, s, a in sorted(groups, key=lambda k: (depth.get(k[1], 1 << 30), k[2], k[0], k[1]))[: max(0, max_examples - len(examples))]:
        other = "model" if where == "tlc" else "tlc"
        before = readable(intern.canon[s], names)
        examples.append(
            {
                "kind": "divergence",
                "action": a,
                "side": where,
                "from": before,
                "to": [_changes(before, readable(intern.canon[d], names)) for d in sorted(groups[(where, s, a)])],
                "other_side_to": [
                    _changes(before, readable(intern.canon[d], names)) for d in sorted(other_targets.get((other, s, a), []))
                ],
            }
        )
    return ConformResult(
        tlc_states=len(tlc.states),
        model_states=len(model.states),
        tlc_edges=len(tlc.edges),
        model_edges=len(model.edges),
        only_in_tlc=side(tlc.states - model.states, only_t_edges),
        only_in_model=side(model.states - tlc.states, only_m_edges),
        examples=examples,
        seconds={"tlc": round(tlc.seconds, 2), "model": round(model.seconds, 2)},
    )


def _check_node_ids(module: Path, top: int) -> None:
    """A shipped model bounds the node ids its actions quantify over (`MC_NodeIds ==
    1 .. k`, which its own check verifies with `MC_NodeIdsCovered`); conform runs TLC
    with nothing to check, so a bound the model outgrows would only show as edges
    that TLC lacks. Say so plainly instead."""
    text = module_definitions(module).get("MC_NodeIds")
    if text is None:
        return
    m = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", text.strip())
    if m is None:
        return
    if top > int(m.group(2)):
        raise TLCError(
            f"{module}: MC_NodeIds is {text.strip()}, but the Python model of this config creates node id {top}; "
            f"raise the bound to 1 .. {top} (TLC would not quantify over the larger ids)"
        )


def conform(
    model_name: str,
    workers: int | None = None,
    tlc: tuple[StateGraph, Interner] | None = None,
    bug: str | None = None,
    explored: Graph | None = None,
) -> ConformResult:
    """Compare TLC's graph of a model (`ci`, a .cfg path, or a kvsm config: a TOML path
    or a built-in config name, for which the TLC model is generated) with the Python
    model's. `tlc` reuses a TLC graph already read (with its interner), e.g. across
    tests, and `explored` an exploration of the model's config already made (both must
    be of the model named: nothing checks that they are). A generated model's bound on
    node ids is the largest id the Python model's exploration creates (a spec that
    creates more shows as states only TLC has). With
    `bug`, both sides carry that injected defect, each graph cut where the defect breaks
    the model. `workers`: TLC's threads (default: one per CPU; the graph does not
    depend on them)."""
    m = load_model(model_name, properties=False, bug=bug)
    config = m.config
    if tlc is not None:
        tg, intern = tlc
        mg = model_graph(config, intern, explored)
    else:
        intern = Interner()
        mg = model_graph(config, intern, explored)
        top = max((n.id for s in mg.states for n in intern.canon[s].nodes), default=0)
        if m.generated:
            m = load_model(model_name, properties=False, node_ids=max(1, top), bug=bug)
        else:
            _check_node_ids(m.module, top)
        tg = tlc_graph(m.module, m.cfg, config, intern, workers, m.extra_modules)
    names = ContentNames()
    for p in config.prompts:
        names.add(p.pages, p.ns)
    t0 = time.perf_counter()
    res = compare(tg, mg, intern, names)
    res.seconds["compare"] = round(time.perf_counter() - t0, 2)
    return res
