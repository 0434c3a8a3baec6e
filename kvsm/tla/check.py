"""`kvsm check`: TLC checks a model of the spec (its invariants and the liveness
properties), exhaustively or along random behaviours, and a violation's trace becomes
a kvsm log.

The model is a shipped one (`ci`, `deep`, `l3`, `l3-small`, `reference`), a `.cfg` beside its module, or one
generated from a kvsm config (a TOML path or a built-in config name,
`kvsm.tla.models.load_model`). A generated model bounds the node ids `Next`
quantifies over; when a state exceeds the bound (`MC_NodeIdsCovered`), the check is
run again with twice the bound, so the bound never cuts the state space short.

`--simulate` runs TLC's random simulation instead (`-simulate num=N -depth D -seed S`):
N behaviours of at most D states from the initial state, each step drawn at random
among the enabled ones, every invariant checked in every state. It is for configs too
large to exhaust (the default config's four ranks and real page counts). A config
whose arrivals never end (`max_requests = 0`) is bound to D arrivals, which no
behaviour of D states exceeds, and node ids to two per step (an Insert that splits
creates two nodes, no step more).

TLC prints each state of a counterexample and the name of its action, not the action's
arguments. The log needs both, so each step is matched against the Python model:
among the model's enabled transitions of that name, the one whose successor maps onto
the state TLC printed (`kvsm.tla.specmap`). The log's digests are the model's, so
`kvsm replay --check` replays it; for an invariant of the model (1-7, 10) it stops at
the same violation.

With an injected defect (`bug`), the spec's `Bug` constant is bound to it and the log is
made by the Python model with the same defect (its header names it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from ..log import Header, LogWriter
from ..output import OutputError
from ..state import initial_state
from ..transitions import successors
from .models import ModelConfig, load_model
from .output import Violation
from .runner import TLCResult, run_tlc
from .specmap import canon_model, canon_spec

NODE_IDS_INVARIANT = "MC_NodeIdsCovered"


class TraceError(RuntimeError):
    """A TLC trace the Python model cannot follow (the two disagree)."""


@dataclass
class CheckResult:
    model: str
    tlc: TLCResult
    log: Path | None
    log_error: str | None = None  # why the trace could not become a log
    simulate: dict[str, int] | None = None  # num, depth, seed of a simulation
    node_ids: int | None = None  # a generated model's bound on node ids
    bug: str = "none"  # the injected defect the spec and the model were checked with

    @property
    def ok(self) -> bool:
        return self.tlc.violation is None

    def to_json(self) -> dict[str, Any]:
        v = self.tlc.violation
        t = self.tlc
        out: dict[str, Any] = {
            "model": self.model,
            "bug": self.bug,
            "distinct_states": t.distinct_states,
            "states_generated": t.states_generated,
            "depth": t.depth,
            "seconds": round(t.seconds, 2),
            "cpu_seconds": round(t.cpu_seconds, 2) if t.cpu_seconds is not None else None,
            "peak_rss_mb": round(t.peak_rss / 2**20) if t.peak_rss is not None else None,
            "violation": None
            if v is None
            else {
                "property": v.property,
                "kind": v.kind,
                "steps": max(0, len(v.trace) - 1),
                "log": str(self.log) if self.log else None,
                **({"log_error": self.log_error} if self.log_error else {}),
            },
        }
        if self.node_ids is not None:
            out["node_ids"] = self.node_ids
        if self.simulate is not None:
            out["simulate"] = dict(self.simulate)
            out["behaviours"] = t.traces
            out["states_per_second"] = round((t.states_generated or 0) / t.seconds, 1) if t.seconds else None
            out["behaviours_per_second"] = round((t.traces or 0) / t.seconds, 2) if t.seconds and t.traces else None
        return out


def trace_to_log(violation: Violation, cfg: Config, path: Path, model: str) -> Path:
    """Write a TLC counterexample as a kvsm log (source "tlc")."""
    trace = violation.trace
    if not trace or trace[0].action != "Init":
        raise TraceError(f"TLC's trace of {violation.property} does not start at the initial state")
    state = initial_state(cfg)
    if canon_model(state) != canon_spec(trace[0].state, cfg):
        raise TraceError("the model's initial state differs from the spec's; run `kvsm conform`")
    extra: dict[str, Any] = {"model": model, "property": violation.property, "kind": violation.kind}
    if violation.loop_to is not None:
        # the log's last transition returns to the state after this step (0 = initial)
        extra["loops_back_to_step"] = violation.loop_to - 1
    if violation.stutters:
        extra["stutters_forever"] = True
    header = Header(config=cfg, seed=None, source="tlc", initial_digest=state.digest(), extra=extra)
    with LogWriter(path, header) as w:
        for k, step in enumerate(trace[1:], start=1):
            target = canon_spec(step.state, cfg)
            nxt = next(((t, s) for t, s in successors(state, (step.action,)) if canon_model(s) == target), None)
            if nxt is None:
                raise TraceError(
                    f"step {k} of TLC's trace: the model has no {step.action} transition to the state TLC reached; "
                    "run `kvsm conform` on this model"
                )
            t, state = nxt
            w.write(t, state)
    return path


def _without_properties(mc: ModelConfig) -> ModelConfig:
    sections = {k: list(v) for k, v in mc.sections.items() if k != "PROPERTIES"}
    return ModelConfig(constants=dict(mc.constants), sections=sections)


def check(
    model: str,
    workers: int = 1,
    log_path: Path | None = None,
    simulate: dict[str, int] | None = None,
    timeout: float | None = None,
    bug: str | None = None,
    properties: bool = True,
) -> CheckResult:
    """Run TLC on a model (see `kvsm.tla.models.load_model`) with the invariants and
    properties it checks (with `properties=False`, its invariants only), or with
    `simulate` = {num, depth, seed} TLC's random simulation with its invariants; on a
    violation, write its trace as a log to `log_path` (default
    `out/tlc-<model>-<property>.jsonl`). Past `timeout` seconds TLC is stopped
    (`kvsm.tla.runner.TLCTimeout`, with its last progress). With `bug`, the spec and
    the model both carry that injected defect (the log's name says it)."""
    properties = properties and simulate is None  # a simulation checks invariants only
    if simulate is None:
        m = load_model(model, properties=properties, bug=bug)
    else:
        depth = simulate["depth"]
        m = load_model(model, properties=False, node_ids=2 * depth + 1, depth=depth, bug=bug)
    if not m.generated and not properties:  # a shipped model's bounds hold; only its liveness properties go
        m.cfg = _without_properties(m.model_config())
        if simulate is not None and m.config.max_requests == 0:
            m.cfg.constants["MaxRequests"] = ("=", str(simulate["depth"]))
    while True:
        res = run_tlc(m.module, m.cfg, workers=workers, extra_modules=m.extra_modules, simulate=simulate, timeout=timeout)
        v = res.violation
        if m.generated and simulate is None and v is not None and v.kind == "invariant" and v.property == NODE_IDS_INVARIANT:
            m = load_model(model, properties=properties, node_ids=2 * (m.node_ids or 1), bug=bug)
            continue
        break
    out = CheckResult(model, res, None, simulate=simulate, node_ids=m.node_ids, bug=m.config.bug)
    if res.violation is None:
        return out
    name = "".join(ch if ch.isalnum() else "-" for ch in res.violation.property)
    stem = Path(m.label).stem if m.generated else (m.cfg.stem if isinstance(m.cfg, Path) else m.module.stem)
    tag = "" if m.config.bug == "none" else f"-{m.config.bug}"
    log = log_path or Path("out") / f"tlc-{re.sub(r'[^A-Za-z0-9_.-]', '-', stem)}{tag}-{name}.jsonl"
    try:
        trace_to_log(res.violation, m.config, log, model)
    except (TraceError, OutputError) as e:  # the violation is still reported, without its log
        out.log_error = str(e)
        return out
    out.log = log
    return out
