"""The spec as a campaign's second implementation (`kvsm campaign --validate`).

A run that breaks no invariant may still have taken a step the spec would not: a
different victim, a hit not recomputed, a deficit one page short. TLC decides it
(`kvsm.tla.validate`): it follows the run's log, each step the spec's action with the
log's arguments, and compares every variable with the model's next state.

- Which runs: `--validate` is `none`, `all`, `failed` (the runs that failed anyway:
  TLC names the first step the spec refuses, which may come before the invariant broke)
  or a percent of the runs, chosen by the run's seed alone (`share`), so that a
  run is validated or not whatever the worker, the order of results or `--resume`.
- Where: the worker keeps a selected run's log and sends it back with the result; the
  campaign collects the logs and has TLC follow them in batches (`Validator`, through
  one function, `validate_runs`), while the workers go on with the other runs.
- A rejection fails an ok run with the signature `spec:WHAT@ACTION` (WHAT: `not taken`,
  the spec's action is not enabled in the model's state; `other state`, it leads to
  another state), `at` the step. Such a run is shrunk on a worker (`shrink_task`): its
  log, cut after the rejected step, then steps removed as `kvsm.campaign.shrink` removes
  them, each candidate followed by TLC again, within `--shrink-seconds`. A run that had
  failed already keeps its signature and gets TLC's verdict beside it.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .run import Budget, Failure, Outcome
from .scratch import scratch_dir
from .spec import RunSpec, command
from .successors import successors_failure, successors_runs

MODES = ("none", "all", "failed")
# the default share of runs validated (docs/campaign.md, "The spec as a second
# implementation": what a run's validation costs against the run)
DEFAULT = "10%"
# a batch is validated when it has this many logs, or this many transitions
BATCH_LOGS = 16
BATCH_STEPS = 100_000


class ValidateOptionError(ValueError):
    """A `--validate` value that is none of the modes nor a percent."""


def parse_mode(text: str) -> str:
    """`--validate`'s value as the campaign records it: `none`, `all`, `failed`, or a
    percent written `P%` (`25` and `25%` alike, 0 to 100)."""
    t = text.strip().lower()
    if t in MODES:
        return t
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%?", t)
    if m is None:
        raise ValidateOptionError(f"--validate {text!r}: expected all, failed, none or a percent of the runs (such as 25% or 25)")
    p = float(m.group(1))
    if p > 100:
        raise ValidateOptionError(f"--validate {text!r}: a percent of the runs is at most 100")
    return f"{p:g}%"


def share(seed: int) -> float:
    """Where the run `seed` falls in [0, 1), from its number alone: Fibonacci hashing
    (the seed times 2**64 over the golden ratio, modulo 2**64), whose values for any
    run of consecutive seeds spread evenly, so that P% of the seeds A..B is P% of them
    within one or two runs (a cryptographic hash takes 3 of 0..39 at 15%, or 9)."""
    return ((seed * 0x9E3779B97F4A7C15) % 2**64) / 2**64


def selected(mode: str, seed: int, failed: bool) -> bool:
    """Whether the run `seed` (which failed, or not) is validated under `mode`."""
    if mode == "all":
        return True
    if mode == "failed":
        return failed
    if mode.endswith("%"):
        return share(seed) < float(mode[:-1]) / 100
    return False


def tlc_missing() -> str | None:
    """Why TLC cannot run here (no Java, no tla2tools.jar, no spec), or None."""
    from ..tla.errors import TLCError, TLCUnavailable
    from ..tla.location import find_jar, find_java, spec_dir

    try:
        find_java()
    except TLCUnavailable:
        return "no Java"
    try:
        find_jar()
        spec_dir()
    except (TLCUnavailable, TLCError) as e:
        return str(e)
    return None


def successors_wanted(mode: str, spec: RunSpec) -> bool:
    """Whether local conform compares the successors of the states of run `spec`
    (`kvsm.campaign.successors`): every walk run, under any mode but `none`."""
    return mode != "none" and spec.schedule == "walk"


def log_uses(out: Outcome, spec: RunSpec, mode: str) -> list[str]:
    """What the campaign does with a finished run's log: `successors` (local conform,
    an ok walk run's) and `trace` (TLC follows it): every run under `all`, a failed
    one under `failed`; under a percent, the runs it selects but for the walks that
    local conform takes, whose long logs would cost TLC five times as much."""
    failed = out.status == "failed" and out.failure is not None
    uses = []
    if out.status == "ok" and successors_wanted(mode, spec):
        uses.append("successors")
    if selected(mode, spec.seed, failed) and not (mode.endswith("%") and uses):
        uses.append("trace")
    return uses


def run_log(out: Outcome, seed: int, mode: str, uses: Sequence[str] | None = None) -> str | None:
    """The log the campaign checks for a finished run (`log_uses`; by default, when
    `mode` selects the run for TLC to follow): an ok run's own log; a failed run's
    transitions up to its failure. None otherwise (a run over its budget, or one that
    failed on its initial state)."""
    failed = out.status == "failed" and out.failure is not None
    if uses is None:
        uses = ["trace"] if selected(mode, seed, failed) else []
    if not uses:
        return None
    if out.status == "ok":
        return out.log
    if failed and out.failure.at > 0 and out.config is not None:
        from .shrink import log_text

        return log_text(out.config, seed, out.transitions[: out.failure.at], {"campaign": {"seed": seed}})[0]
    return None


# ---- TLC's verdicts --------------------------------------------------------------------------------


def verdict(res: Any) -> dict[str, Any]:
    """What a run's record keeps of a `ValidateResult`."""
    v: dict[str, Any] = {"ok": res.ok, "steps": res.steps, "seconds": round(res.seconds, 3)}
    if res.first_rejected is not None:
        r = res.first_rejected
        v["rejected"] = {"step": r["step"], "line": r["line"], "transition": r["transition"], "name": r["name"],
                         "reason": res.rejection["reason"], "variables": res.rejection["variables"]}
    if res.model_rejected is not None:
        v["model_rejected"] = res.model_rejected
    if res.digest_mismatch is not None:
        v["digest_mismatch"] = res.digest_mismatch
    return v


def spec_failure(v: dict[str, Any]) -> Failure | None:
    """The failure a verdict makes of an ok run (None when TLC followed the log)."""
    if v.get("error"):
        return Failure("spec", "error", "-", v["error"], 0)
    r = v.get("rejected")
    if r is not None:
        what = "not taken" if r["reason"].startswith("the spec does not take") else "other state"
        differ = f"; variables that differ: {', '.join(r['variables'])}" if r["variables"] else ""
        return Failure("spec", what, r["name"], f"TLC: step {r['step']} (log line {r['line']}) {r['transition']}: {r['reason']}{differ}", r["step"])
    for key, what in (("model_rejected", "model rejected"), ("digest_mismatch", "digest mismatch")):
        m = v.get(key)
        if m is not None:
            return Failure("spec", what, m["transition"].split("(")[0], f"log line {m['line']}: {m}", max(0, m["line"] - 1))
    return None


def _one(path: Path) -> dict[str, Any]:
    from ..tla.validate import validate

    try:
        return verdict(validate(path, workers=1))
    except Exception as e:  # noqa: BLE001 - TLC could not decide (a state the spec cannot hold, a TLC error): said as such, and the campaign goes on
        return {"ok": False, "steps": 0, "seconds": 0.0, "error": f"{type(e).__name__}: {e}"[:2000]}


def validate_runs(logs: Sequence[tuple[int, str]], workers: int) -> dict[int, dict[str, Any]]:
    """TLC's verdict (`verdict`) on each `(seed, log text)`. Every validation of a
    campaign goes through here: `validate_many` follows the logs of one config in
    shared TLC processes, up to `workers` at once. Should it fail as a whole (a log
    whose state the spec cannot hold, a TLC error), each log is decided on its own, so
    that the error is the verdict of the log that caused it."""
    from ..tla.runner import stop_all
    from ..tla.validate import validate_many

    with tempfile.TemporaryDirectory(prefix="kvsm-validate-", dir=scratch_dir()) as d:
        paths = []
        for seed, text in logs:
            p = Path(d) / f"run-{seed}.jsonl"
            p.write_text(text)
            paths.append((seed, p))
        try:
            try:
                results = validate_many([p for _, p in paths], workers=max(1, workers))
                return {seed: verdict(r) for (seed, _), r in zip(paths, results)}
            except Exception:  # noqa: BLE001 - decided log by log below, each error its log's own
                pass
            return {seed: _one(p) for seed, p in paths}
        except BaseException:  # interrupted: TLC stops
            stop_all()
            raise


class Validator:
    """The campaign's side: records of selected runs (each with its `log`) collected and
    validated a batch at a time (BATCH_LOGS logs or BATCH_STEPS transitions, and what is
    left at the end). A decided record has `validation` (the verdict); an ok run that TLC
    rejected is `failed` with the spec's failure and keeps its `log` for shrinking."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pending: list[dict[str, Any]] = []
        self.steps = 0

    def add(self, rec: dict[str, Any], left: int | None = None) -> list[dict[str, Any]]:
        """Collect `rec`; validate the batch once it is full, unless fewer than
        `BATCH_LOGS` runs are `left`: the last flush takes them with it, one TLC start
        per model at the campaign's end instead of two."""
        self.pending.append(rec)
        self.steps += rec.get("transitions", 0)
        full = len(self.pending) >= BATCH_LOGS or self.steps >= BATCH_STEPS
        if full and (left is None or left >= BATCH_LOGS):
            return self.flush()
        return []

    def flush(self) -> list[dict[str, Any]]:
        recs, self.pending, self.steps = self.pending, [], 0
        if not recs:
            return []
        uses = {r["seed"]: r.pop("log_for", ["trace"]) for r in recs}
        ready = {r["seed"]: r.pop("local_states", None) for r in recs}  # replayed on the workers
        got = validate_runs([(r["seed"], r["log"]) for r in recs if "trace" in uses[r["seed"]]], self.workers)
        local = successors_runs([(r["seed"], r["log"]) for r in recs if "successors" in uses[r["seed"]]], self.workers, prepared=ready)
        for rec in recs:
            f = None
            if "trace" in uses[rec["seed"]]:
                v = rec["validation"] = got[rec["seed"]]
                f = spec_failure(v) if rec["status"] == "ok" else None
            if "successors" in uses[rec["seed"]]:
                lv = rec["successors"] = local[rec["seed"]]
                if f is None and rec["status"] == "ok":
                    f = successors_failure(lv, rec.get("command", ""))
            if f is not None:
                rec["status"], rec["failure"] = "failed", f.to_json()
            if f is None or f.what == "error":
                rec.pop("log")
        return recs


# ---- shrinking a rejected log ------------------------------------------------------------------------


@dataclass
class ShrinkJob:
    """A run TLC rejected, sent to a worker to be shrunk (`run_all(..., key="job")`)."""

    record: dict[str, Any]
    log: str

    def to_json(self) -> dict[str, Any]:
        return {"job": f"shrink-{self.record['seed']}", "record": self.record, "log": self.log}


def shrink_task(job: dict[str, Any], budget_json: dict[str, Any] | None) -> dict[str, Any]:
    """What a worker runs for a `ShrinkJob`: the record with its case's files."""
    t0 = time.perf_counter()
    rec = dict(job["record"])
    budget = Budget(**(budget_json or {}))
    rec["case_files"] = shrink_rejected(RunSpec.from_json(rec["spec"]), budget, job["log"], rec["failure"])
    rec["seconds"] = round(rec.get("seconds", 0.0) + time.perf_counter() - t0, 3)
    return {"job": job["job"], "record": rec}


def _steps_verdict(cfg: Any, seed: int, steps: Sequence[Any], d: str) -> dict[str, Any]:
    from .shrink import log_text

    p = Path(d) / "candidate.jsonl"
    p.write_text(log_text(cfg, seed, steps, {})[0])
    return _one(p)


def _judge(what: str, extra: dict[str, Any]) -> Any:
    """The failure TLC finds in a candidate log `(cfg, seed, steps, dir)`: following it,
    or for a `successors` failure, local conform at its last state (the workload's
    header, `extra`, names the prompts it compares `Arrive` with)."""
    if what != "successors":
        return lambda cfg, seed, steps, d: spec_failure(_steps_verdict(cfg, seed, steps, d))

    def judge(cfg: Any, seed: int, steps: Sequence[Any], d: str) -> Failure | None:
        from .shrink import log_text

        v = successors_runs([(seed, log_text(cfg, seed, steps, extra)[0])], last=True)[seed]
        return successors_failure(v)

    return judge


def shrink_rejected(spec: RunSpec, budget: Budget, text: str, failure: dict[str, Any]) -> dict[str, str]:
    """The case of a log TLC rejected: the log cut after the rejected step, then steps
    removed (`ddmin`, a request's or a node's steps first, references re-resolved) while
    TLC still rejects the last step with the same signature, until no single step can
    go or `budget.shrink_seconds` is spent."""
    from ..log import read_log
    from ..resolve import references, replay_kept
    from ..sim.options import prepare
    from ..state import Rejected, initial_state
    from .shrink import _request_groups, ddmin, log_text, trace_text

    t0 = time.perf_counter()
    deadline = t0 + budget.shrink_seconds
    sig = failure["signature"]
    replays = 0
    with tempfile.TemporaryDirectory(prefix="kvsm-shrink-", dir=scratch_dir()) as d:
        p = Path(d) / "run.jsonl"
        p.write_text(text)
        header, stream = read_log(p)
        cfg = header.config
        whole = [t for _, _, t, _ in stream]
        local = failure["what"] == "successors"  # found at the state after step `at`, which may be the first
        transitions = whole[: failure["at"] if local else max(1, failure["at"])]
        judge = _judge(failure["what"], {k: v for k, v in header.extra.items() if k == "workload"})
        best = list(transitions)
        s0 = initial_state(cfg)
        refs = references(cfg, transitions)

        def fails(keep: list[int]) -> list[int] | None:
            nonlocal replays
            taken = [(i, t) for i, t, after in replay_kept(s0, transitions, refs, keep) if not isinstance(after, Rejected)]
            if not taken:
                return None
            replays += 1
            f = judge(cfg, spec.seed, [t for _, t in taken], d)
            if f is None or f.signature != sig or f.at < 1:
                return None
            best[:] = [t for _, t in taken[: f.at]]
            return [i for i, _ in taken[: f.at]]

        local_min = False
        if transitions and time.perf_counter() < deadline:

            def groups(keep: list[int]) -> list[list[int]]:
                return _request_groups([transitions[i] for i in keep])

            _, local_min = ddmin(list(range(len(transitions))), fails, deadline, groups=groups)
    extra = {"campaign": {"seed": spec.seed, "signature": sig, "shrunk": True}}
    if local and "workload" in header.extra:  # (the prompts `Arrive` is compared with)
        extra["workload"] = header.extra["workload"]
    case, n = log_text(cfg, spec.seed, best, extra)
    requests = list(prepare(spec.options()).workload.requests)
    sidecar = {
        "signature": sig,
        "detector": "spec",
        "what": failure["what"],
        "transition": failure["transition"],
        "message": failure["message"],
        "seed": spec.seed,
        "spec": spec.to_json(),
        "command": command(spec),
        "replay": None,
        "validate": "kvsm validate --successors --last case.jsonl" if local else "kvsm validate case.jsonl",
        "cwd": "the case's directory",
        "original": {"command": command(spec), "requests": spec.requests, "transitions": len(whole)},
        "shrunk": {
            "requests": len(requests),
            "transitions": n,
            "workload_reproduced": False,
            "workload_local_minimum": False,
            "workload_shrunk": False,
            "log_shrunk": True,
            "log_local_minimum": local_min,
            "runs": 0,
            "replays": replays,
            "seconds": round(time.perf_counter() - t0, 3),
        },
    }
    return {"case.jsonl": case, "workload.jsonl": trace_text(requests), "case.json": json.dumps(sidecar, indent=2) + "\n"}
