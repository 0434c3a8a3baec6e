"""`kvsm validate`: TLC decides whether a log is a behaviour of the spec.

The Python model replays the log and computes every state. The log is cut into
segments (one when it is short); each becomes a trace module (`kvsm.tla.trace`) that
starts from the model's state before the segment's first step, mapped onto the spec's
variables, and gives each step with what the model's step changed. TLC follows each
segment in a process of its own, up to `workers` at once: it takes the spec's action
the step names, with the log's arguments, and compares every variable with the
model's next state. Consecutive segments share one state (the last of one is the
first of the next), so every step is checked from the model's state before it, and
the segments together check the whole log. The first segment starts from the spec's
`Init`, which must be the model's initial state.

A step is rejected when the spec's action is not enabled in the model's state
before it (TLC deadlocks there) or when the spec's state after it differs from the
model's (the trace module's invariant `TraceOk` names the variables that differ).
The first rejected step of the log is the first one of the earliest segment that has
one. If the model itself rejects a step (its guard is false), the log's trace ends
with that step, unconstrained: TLC then says whether the spec allows it.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..log import LogError, read_log

from ..replay import model_config
from ..state import Rejected, initial_state
from ..transitions import Transition, apply, arrive_ns
from .models import ModelConfig, refuse_unmodelled
from .location import spec_dir
from .runner import TLCResult, run_tlc, stop_all
from .canon import MappingError
from .compact import Tokens
from .delta import DeltaEncoder
from .trace import MODULE, SPEC_PARAMS, module_text, step_record, trace_config

__all__ = ["SPEC_PARAMS", "ValidateResult", "TraceModules", "run_segment", "validate", "plan_segments", "MIN_SEGMENT_STEPS"]

# Below this many steps a segment is not worth its own TLC process: starting the JVM
# and parsing the spec cost about as much as following this many default-config steps.
MIN_SEGMENT_STEPS = 2000

# What a step costs TLC, relative to the cheapest, to cut segments of equal cost: TLC
# evaluates the spec's action on the default config's pools (measured on the bundled
# trace on 4 ranks with benchmarks/validate_profile.py, spec/README.md): a load-back's
# owner-lane planner about 40 ms, a Reserve's first fit and an Insert's room and
# allocation about 2.3 ms, any other step (with its share of parsing and comparing)
# about 0.7 ms.
STEP_WEIGHT = {"LoadBack": 57.0, "Reserve": 4.3, "Insert": 4.3}


@dataclass
class SegmentResult:
    index: int
    first_step: int  # 1-based number of its first step in the log
    steps: int
    tlc: TLCResult | None = None
    rejected_step: int | None = None  # 1-based, in the log; 0 = the initial state
    reason: str | None = None
    variables: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        t = self.tlc
        return {
            "segment": self.index,
            "first_step": self.first_step,
            "steps": self.steps,
            "seconds": round(t.seconds, 2) if t else None,
            "cpu_seconds": round(t.cpu_seconds, 2) if t and t.cpu_seconds is not None else None,
            "peak_rss_mb": round(t.peak_rss / 2**20) if t and t.peak_rss is not None else None,
        }


@dataclass
class ValidateResult:
    log: str
    steps: int  # transitions in the log (up to the first the model rejects)
    matched: int  # transitions the spec took
    ok: bool
    first_rejected: dict[str, Any] | None  # the first step the spec does not allow
    model_rejected: dict[str, Any] | None  # the first step the Python model does not allow
    digest_mismatch: dict[str, Any] | None  # the first line whose digest the model does not reproduce
    tlc: TLCResult | None  # the TLC run of the segment that decided (the rejecting one, else the last)
    rejection: dict[str, Any] | None = None  # why the first rejected step is: reason, variables, segment
    segments: list[SegmentResult] = field(default_factory=list)
    seconds: float = 0.0  # the whole validation, wall clock: replay, modules and TLC
    model_seconds: float = 0.0  # replaying the log and writing the trace modules

    @property
    def transitions_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "log": self.log,
            "ok": self.ok,
            "steps": self.steps,
            "matched": self.matched,
            "first_rejected": self.first_rejected,
            "rejection": self.rejection,
            "model_rejected": self.model_rejected,
            "digest_mismatch": self.digest_mismatch,
            "distinct_states": sum(s.tlc.distinct_states or 0 for s in self.segments if s.tlc),
            "seconds": round(self.seconds, 2),
            "model_seconds": round(self.model_seconds, 2),
            "transitions_per_second": round(self.transitions_per_second, 1),
            "segments": [s.to_json() for s in self.segments],
        }


def plan_segments(names: list[str], workers: int, segments: int | None = None) -> list[tuple[int, int]]:
    """Half-open ranges of step indices (0-based), consecutive and of about equal cost
    (STEP_WEIGHT of the steps' transitions): `segments` of them, or one per worker for
    a log long enough that each has at least MIN_SEGMENT_STEPS."""
    steps = len(names)
    if segments is None:
        segments = max(1, min(workers, steps // MIN_SEGMENT_STEPS))
    segments = max(1, min(segments, steps)) if steps else 1
    total = sum(STEP_WEIGHT.get(n, 1.0) for n in names)
    bounds, acc, k = [0], 0.0, 1
    for i, n in enumerate(names):
        acc += STEP_WEIGHT.get(n, 1.0)
        if k < segments and acc >= total * k / segments and i + 1 < steps:
            bounds.append(i + 1)
            k += 1
    while len(bounds) < segments:  # fewer cuts than asked (tiny logs): split the longest
        i = max(range(len(bounds)), key=lambda i: (bounds[i + 1] if i + 1 < len(bounds) else steps) - bounds[i])
        end = bounds[i + 1] if i + 1 < len(bounds) else steps
        bounds.insert(i + 1, (bounds[i] + end) // 2)
    bounds.append(steps)
    return [(bounds[i], bounds[i + 1]) for i in range(segments)]


def _outcome(seg: SegmentResult, res: TLCResult, from_init: bool) -> None:
    """Where TLC stopped in a segment, from the cursor and `bad` it printed (its
    traces are printed through the VIEW `<<cursor, bad>>`)."""
    seg.tlc = res
    v = res.violation
    if v is None:
        return
    if not v.trace:
        raise RuntimeError(f"TLC reported {v.property} without a trace while validating segment {seg.index}")
    last = v.trace[-1].state
    cursor, bad = last["view"] if "view" in last else (last["cursor"], last["bad"])
    if v.kind == "deadlock":
        seg.rejected_step = seg.first_step + cursor - 1
        seg.reason = "the spec does not take this step from the model's state before it"
    elif v.kind == "invariant" and v.property == "TraceOk":
        seg.variables = sorted(bad)
        if len(v.trace) == 1:
            seg.rejected_step = 0 if from_init else seg.first_step
            seg.reason = "the model's initial state is not the spec's Init" if from_init else "the segment's first state is wrong"
        else:
            seg.rejected_step = seg.first_step + cursor - 2
            seg.reason = "the spec's state after this step differs from the model's"
    else:
        raise RuntimeError(f"TLC reported {v.property} while validating segment {seg.index}; the trace module is wrong")


class TraceModules:
    """A log replayed by the Python model and cut into segments, each written as a trace
    module: iterate it for `(SegmentResult, module text)`, one segment at a time (the
    module of a segment is written when the iteration reaches it, so that TLC can follow
    one while the next is written). `config` is the trace modules' TLC config. After
    the iteration: `steps` and `lines`, the transitions replayed and their log lines,
    `model_rejected` and `digest_mismatch` as in `ValidateResult`, and `seconds`, the
    time spent replaying and writing."""

    def __init__(self, path: str, workers: int, segments: int | None, bug: str | None) -> None:
        self.path = path
        header, stream = read_log(path)
        cfg = header.config
        refuse_unmodelled(cfg, f"{path}: the log's config")
        self.state = initial_state(cfg)
        if self.state.digest() != header.initial_digest:
            raise LogError(path, 1, f"initial digest {header.initial_digest} != {self.state.digest()} of the config's initial state", malformed=False)
        self.items = list(stream)
        spec_dir()  # fail early, with the reason, when the spec cannot be found
        self.tok = Tokens()
        for _, _, t, _ in self.items:
            if t.name == "Arrive":
                self.tok.add(tuple(t.arg("tokens")))
                if arrive_ns(t):
                    self.tok.add_ns(tuple(t.arg("tokens")), arrive_ns(t))
        self.enc = DeltaEncoder(cfg, self.tok)
        self.config = trace_config(model_config(header, bug, path))
        self.plan = plan_segments([t.name for _, _, t, _ in self.items], workers, segments)
        self.steps: list[Transition] = []
        self.lines: list[int] = []
        self.model_rejected: dict[str, Any] | None = None
        self.digest_mismatch: dict[str, Any] | None = None
        self.seconds = 0.0

    def __iter__(self) -> Iterator[tuple[SegmentResult, str]]:
        p, items, tok, enc = self.path, self.items, self.tok, self.enc
        state = self.state
        for index, (a, b) in enumerate(self.plan):
            m0 = time.perf_counter()
            tok.used = set()
            seg = SegmentResult(index=index, first_step=a + 1, steps=0)
            try:
                init = enc.whole(state)
            except MappingError as e:
                raise LogError(p, items[a][0] - 1 if a else 1, f"the model's state has no counterpart in the spec: {e}") from None
            rows: list[str] = []
            for lineno, _, t, digest in items[a:b]:
                self.steps.append(t)
                self.lines.append(lineno)
                try:
                    nxt = apply(state, t)
                except Rejected as e:
                    self.model_rejected = {"line": lineno, "transition": str(t), "reason": str(e)}
                    rows.append(step_record(t, tok, None))
                    break
                if self.digest_mismatch is None and nxt.digest() != digest:
                    self.digest_mismatch = {"line": lineno, "transition": str(t), "log": digest, "model": nxt.digest()}
                try:
                    rows.append(step_record(t, tok, enc.delta(state, nxt)))
                except MappingError as e:
                    raise LogError(p, lineno, f"the model's state after {t} has no counterpart in the spec: {e}") from None
                state = nxt
            seg.steps = len(rows)
            text = module_text(init, rows, tok, from_init=(a == 0))
            self.seconds += time.perf_counter() - m0
            yield seg, text
            if self.model_rejected is not None:
                return


def run_segment(text: str, config: ModelConfig, steps: int) -> TLCResult:
    """TLC follows one trace module of `steps` steps. The serial collector: a segment's
    heap is its Steps constant and one state, and parallel collectors would multiply the
    memory of parallel segments. TLC follows it in its simulation mode: one behaviour as
    long as the segment (every state has one successor, the step's), with no
    fingerprint of each state to take and keep (a fifth of TLC's time here)."""
    return run_tlc(
        Path(f"{MODULE}.tla"), config, workers=1, deadlock=True, extra_modules={MODULE: text}, view=True,
        jvm=("-XX:+UseSerialGC",), simulate={"num": 1, "depth": steps + 1, "seed": 0},
    )


def validate(path: str | Path, workers: int | None = None, segments: int | None = None, bug: str | None = None,
             on_segment: Callable[[int, int], None] | None = None) -> ValidateResult:
    """Decide with TLC whether the log at `path` is a behaviour of the spec, in up to
    `workers` TLC processes at once (default: one per CPU) over `segments` stretches
    of the log (default: see `plan_segments`). A log that cannot be read (malformed
    line, unknown transition) raises `LogError`; a config the spec does not model
    raises `TLCError`. The spec has the injected defect `bug` (the correct spec by
    default, whatever defect the log was written with); the Python model replays the
    log as it was written (with the defect its header names) to compute its states."""
    t0 = time.perf_counter()
    p = str(path)
    workers = max(1, workers or os.cpu_count() or 1)
    modules = TraceModules(p, workers, segments, bug)
    segs: list[SegmentResult] = []
    pending: list[tuple[SegmentResult, Future]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for seg, text in modules:
                segs.append(seg)
                pending.append((seg, pool.submit(run_segment, text, modules.config, seg.steps)))
            for done, (seg, fut) in enumerate(pending, start=1):
                _outcome(seg, fut.result(), from_init=(seg.index == 0))
                if on_segment is not None:
                    on_segment(done, len(pending))
        except BaseException:  # interrupted: the segments not started never start, TLC stops
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all()
            raise
    steps, lines = modules.steps, modules.lines
    model_rejected, digest_mismatch, model_seconds = modules.model_rejected, modules.digest_mismatch, modules.seconds
    rejecting = next((s for s in segs if s.rejected_step is not None), None)
    first_rejected = rejection = None
    if rejecting is not None:
        k = rejecting.rejected_step
        if k == 0:
            first_rejected = {"line": 1, "step": 0, "transition": "Init", "name": "Init"}
        else:
            t = steps[k - 1]
            first_rejected = {"line": lines[k - 1], "step": k, "transition": str(t), "name": t.name}
        rejection = {"reason": rejecting.reason, "variables": rejecting.variables, "segment": rejecting.index}
        matched = max(0, k - 1)
    else:
        matched = len(steps)
    ok = first_rejected is None and model_rejected is None and digest_mismatch is None
    decided = rejecting or (segs[-1] if segs else None)
    return ValidateResult(
        p, len(steps), matched, ok, first_rejected, model_rejected, digest_mismatch,
        decided.tlc if decided else None, rejection, segs, time.perf_counter() - t0, model_seconds,
    )
