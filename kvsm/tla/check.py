"""`kvsm check`: TLC checks a model of the spec (its invariants and the liveness
property), and a violation's trace becomes a kvsm log.

TLC prints each state of a counterexample and the name of the action that reached
it, not the action's arguments. The log needs both, so each step is matched against
the Python model: among the model's enabled transitions of that name, the one whose
successor maps onto the state TLC printed (`kvsm.tla.specmap`). The log's digests are the
model's, so `kvsm replay --check` replays it; for an invariant of the model (1-7, 10)
it stops at the same violation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError
from ..log import Header, LogWriter, OutputError
from ..state import initial_state
from ..transitions import successors
from .errors import TLCError
from .models import ModelConfig, config_of_model, read_cfg, with_bug
from .runner import TLCResult, Violation, model_paths, run_tlc
from .specmap import canon_model, canon_spec


class TraceError(RuntimeError):
    """A TLC trace the Python model cannot follow (the two disagree)."""


@dataclass
class CheckResult:
    model: str
    tlc: TLCResult
    log: Path | None
    log_error: str | None = None  # why the trace could not become a log
    bug: str = "none"  # the injected defect the spec and the model were checked with

    @property
    def ok(self) -> bool:
        return self.tlc.violation is None

    def to_json(self) -> dict[str, Any]:
        v = self.tlc.violation
        return {
            "bug": self.bug,
            "distinct_states": self.tlc.distinct_states,
            "states_generated": self.tlc.states_generated,
            "depth": self.tlc.depth,
            "seconds": round(self.tlc.seconds, 2),
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
    header = Header(cfg, None, "tlc", state.digest(), extra)
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


def check(model: str, workers: int = 1, log_path: Path | None = None, bug: str | None = None) -> CheckResult:
    """Run TLC on a model (`ci`, `deep` or a .cfg path) with the invariants and
    properties its cfg names, with the spec's `Bug` constant bound to `bug` when one is
    named; on a violation, write its trace as a log to `log_path` (default
    `out/tlc-<model>[-<bug>]-<property>.jsonl`), made by the Python model with the same
    defect (its header names it)."""
    module, cfg_path = model_paths(model)
    cfg = config_of_model(module, cfg_path)
    mc: Path | ModelConfig = cfg_path
    if bug is not None and bug != cfg.bug:
        cfg = config_with_bug(cfg, bug, str(cfg_path))
        mc = with_bug(read_cfg(cfg_path), bug)
    res = run_tlc(module, mc, workers=workers)
    if res.violation is None:
        return CheckResult(model, res, None, bug=cfg.bug)
    name = "".join(ch if ch.isalnum() else "-" for ch in res.violation.property)
    tag = "" if cfg.bug == "none" else f"-{cfg.bug}"
    log = log_path or Path("out") / f"tlc-{cfg_path.stem}{tag}-{name}.jsonl"
    try:
        trace_to_log(res.violation, cfg, log, model)
    except (TraceError, OutputError) as e:  # the violation is still reported, without its log
        return CheckResult(model, res, None, str(e), bug=cfg.bug)
    return CheckResult(model, res, log, bug=cfg.bug)


def config_with_bug(cfg: Config, bug: str, where: str) -> Config:
    try:
        return Config.from_json({**cfg.to_json(), "bug": bug}, where=f"{where} with bug {bug}")
    except ConfigError as e:
        raise TLCError(str(e)) from None
