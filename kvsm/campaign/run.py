"""One run: the simulation of a `RunSpec` with every invariant checked and every
replica compared, its log replayed, its coverage collected, and a failure classified.
A Dask worker runs it through `kvsm.campaign.worker.run_task`, which also shrinks a
failure into the case's files that the campaign writes.

A run fails when one of these detectors fires; `(detector, what, transition)` is its
signature, which groups failures:

- `invariant`: `kvsm.checking.Checker` found a violated invariant (what: "3 Locks");
- `divergence`: a rank's replica took other steps or reached another digest
  (`SimDivergence`);
- `held`: a request a reload holds was not released within the reload's ttl (as many
  `ReloadExpire`s as `reload_ttl`), or was still held at the end (what: "HeldReleased");
- `replay`: replaying the run's log did not reproduce its digests (what: the reason);
- `crash`: the simulator or the model raised anything else (what: the exception type);
- `spec`: TLC did not follow the run's log (`kvsm.campaign.validation`, `--validate`):
  what is `not taken` (the spec's action is not enabled) or `other state`.

A run that exceeds its time or transition budget ends with status `budget`.
"""

from __future__ import annotations


import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checking import Checker, Finding
from ..replay import replay
from ..sim import SimDivergence, simulate
from ..state import ClusterState, initial_state
from ..transitions import Transition
from .coverage import Coverage
from .scratch import scratch_dir
from .spec import RunSpec

DETECTORS = ("invariant", "divergence", "held", "replay", "crash", "spec")


@dataclass(frozen=True)
class Budget:
    """Per run: wall seconds and log transitions (0 = unbounded); `shrink_seconds` is the
    time a failing run may spend shrinking; `validate`, which runs' logs go to TLC
    (`kvsm.campaign.validation`: none, all, failed or a percent such as 25%)."""

    seconds: float = 300.0
    transitions: int = 500_000
    shrink_seconds: float = 120.0
    validate: str = "none"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seconds": self.seconds, "transitions": self.transitions, "shrink_seconds": self.shrink_seconds}
        if self.validate != "none":
            d["validate"] = self.validate
        return d


class _OverBudget(Exception):
    pass


class _Violation(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__("; ".join(finding.violations))
        self.finding = finding


class _Held(Exception):
    def __init__(self, message: str, transition: str) -> None:
        super().__init__(message)
        self.transition = transition


@dataclass
class Failure:
    detector: str
    what: str  # the invariant, "HeldReleased", the replay reason or the exception type
    transition: str  # the name of the transition where it was found ("-" before any)
    message: str
    at: int  # the log transition (1-based) after which it was found; 0 = the initial state

    @property
    def signature(self) -> str:
        return signature(self.detector, self.what, self.transition)

    def to_json(self) -> dict[str, Any]:
        return {"signature": self.signature, "detector": self.detector, "what": self.what,
                "transition": self.transition, "message": self.message, "at": self.at}


def signature(detector: str, what: str, transition: str) -> str:
    return f"{detector}:{what}@{transition}" if what else f"{detector}@{transition}"


@dataclass
class Outcome:
    """One execution of the simulator on a spec (possibly with a shrunk workload)."""

    status: str  # "ok" | "failed" | "budget"
    transitions: list[Transition] = field(default_factory=list)
    failure: Failure | None = None
    summary: dict[str, Any] | None = None
    coverage: dict[str, Any] | None = None
    budget: str | None = None
    config: Any = None
    log: str | None = None  # the log's text, when asked for (`keep_log`) and the run is ok


def execute(spec: RunSpec, budget: Budget, workload: str | None = None, collect: bool = True, replay_log: bool = True,
            keep_log: bool = False) -> Outcome:
    """Simulate `spec` (its workload replaced by the trace file `workload` when given),
    checking every invariant after every transition; with `replay_log`, replay the log
    it wrote; with `collect`, gather coverage; with `keep_log` (and `replay_log`), keep
    the text of an ok run's log (`Outcome.log`)."""
    opts = spec.options(workload=workload)
    captured: list[Transition] = []
    cov = Coverage() if collect else None
    box: dict[str, Any] = {}
    held: dict[int, int] = {}
    t0 = time.perf_counter()
    limit_s, limit_n = budget.seconds, budget.transitions

    def on_transition(t: Transition, s: ClusterState) -> None:
        ck = box.get("checker")
        if ck is None:
            s0 = initial_state(s.config)
            ck = box["checker"] = Checker(s0)
            box["prev"] = s0
            box["config"] = s.config
            found = ck.start(0)
            if found is not None:
                raise _Violation(found)
        captured.append(t)
        found = ck.step(t, s, len(captured))
        if found is not None:
            raise _Violation(found)
        if s.reloads or held:
            _track_held(held, t, s)
        if cov is not None:
            cov.after(t, box["prev"], s)
        box["prev"] = s
        n = len(captured)
        if limit_n and n > limit_n:
            raise _OverBudget(f"more than {limit_n} transitions")
        if n % 256 == 0 and limit_s and time.perf_counter() - t0 > limit_s:
            raise _OverBudget(f"more than {limit_s:g} s")

    def on_progress(done: int, total: int) -> None:
        if limit_s and time.perf_counter() - t0 > limit_s:
            raise _OverBudget(f"more than {limit_s:g} s")

    out = Outcome("ok", captured)
    with tempfile.TemporaryDirectory(prefix="kvsm-run-", dir=scratch_dir()) as d:
        log = Path(d) / "run.jsonl"
        try:
            res = simulate(opts, log if replay_log else None, on_progress, on_transition)
            ck = box.get("checker")
            if ck is not None:
                found = ck.finish()
                if found is not None:
                    raise _Violation(found)
            still = sorted(w for op in res.final_state.reloads for w in op.waiters)
            if still:
                raise _Held(f"requests {still[:5]} are still held by a reload at the end of the run", captured[-1].name if captured else "-")
            out.summary = res.summary
            if replay_log:
                out.failure = _replay_failure(log, res.summary["final_digest"], captured, spec.bug)
                if keep_log and out.failure is None:
                    out.log = log.read_text()
        except _OverBudget as e:
            out.status, out.budget = "budget", str(e)
        except _Violation as e:
            f = e.finding
            first = f.violations[0]
            m = re.match(r"(\d+ \w+): ", first)
            out.failure = Failure("invariant", m.group(1) if m else "?", f.transition.name if f.transition else "-", first, f.at)
        except _Held as e:
            out.failure = Failure("held", "HeldReleased", e.transition, str(e), len(captured))
        except SimDivergence as e:
            expected = str(e.step.get("expected", "-"))
            out.failure = Failure("divergence", "", expected.split("(")[0] or "-", str(e), int(e.step.get("transition", len(captured)) or 0))
        except Exception as e:  # noqa: BLE001 - anything else the model or the simulator raised is a finding
            out.failure = Failure("crash", type(e).__name__, captured[-1].name if captured else "-", f"{type(e).__name__}: {e}"[:2000], len(captured))
    if out.failure is not None:
        out.status = "failed"
    out.config = box.get("config")
    if cov is not None:
        ck = box.get("checker")
        faults = (out.summary or {}).get("faults_injected", {})
        out.coverage = cov.to_json(faults, ck.stats.to_json()["invariants"] if ck is not None else {})
    return out


def _track_held(held: dict[int, int], t: Transition, s: ClusterState) -> None:
    """HeldReleased, bounded: a request is held through at most `reload_ttl` ReloadExpires."""
    now = {w for op in s.reloads for w in op.waiters}
    for rid in [r for r in held if r not in now]:
        del held[rid]
    for rid in now:
        held.setdefault(rid, 0)
    if t.name == "ReloadExpire":
        ttl = s.config.reload_ttl
        for rid in now:
            held[rid] += 1
            if held[rid] > ttl:
                raise _Held(f"request {rid} is still held after {held[rid]} ReloadExpire steps (reload_ttl {ttl})", t.name)


def _replay_failure(log: Path, final_digest: str, captured: list[Transition], bug: str = "none") -> Failure | None:
    # the log is replayed as the run wrote it: with the run's injected defect
    res = replay(log, bug=bug)
    if res.first_mismatch is not None:
        line = res.first_mismatch["line"]
        reason = res.first_mismatch["reason"]
        kind = "digest mismatch" if "digest mismatch" in reason else ("rejected" if "rejected" in reason else "unreadable")
        t = captured[line - 2].name if 2 <= line < len(captured) + 2 else "-"
        return Failure("replay", kind, t, f"line {line}: {reason}", max(0, line - 1))
    if res.final_digest != final_digest:
        return Failure("replay", "final digest", captured[-1].name if captured else "-",
                       f"replay ends at digest {res.final_digest}, the run at {final_digest}", len(captured))
    return None
