"""`kvsm validate`: TLC decides whether a log is a behaviour of the spec.

The Python model replays the log and computes every state. The log is cut into
segments (one when it is short); each becomes a trace module (`kvsm.tla.trace`) that
starts from the model's state before the segment's first step, mapped onto the spec's
variables, and gives each step with what the model's step changed. A TLC process
follows one or more segments (of one log or of many, `validate_many`) one after
another, up to `workers` processes at once: it takes the spec's action
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
from typing import Any, Callable, Iterator, Sequence

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
from .trace import MODULE, SPEC_PARAMS, module_text, module_text_many, step_record, trace_config

__all__ = ["SPEC_PARAMS", "ValidateResult", "TraceModules", "run_segment", "validate", "validate_many", "plan_segments", "MIN_SEGMENT_STEPS"]

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


@dataclass
class Stretch:
    """One segment of one log, replayed and written as the parts of a trace module:
    its first state `init`, its steps `rows`, and the `Tok` sequences they use."""

    log: int  # the log's index in the call
    seg: SegmentResult
    init: dict[str, str]
    rows: list[str]
    used: set[int]
    from_init: bool  # the log's first segment: its first state must be the spec's Init


class TraceModules:
    """A log replayed by the Python model and cut into segments: `stretches()` yields
    each as a `Stretch`, and iterating yields `(SegmentResult, module text)`, a trace
    module of that segment alone, one segment at a time (a segment is replayed and
    written when the iteration reaches it, so that TLC can follow one while the next is
    written). `config` is the trace modules' TLC config. After the iteration: `steps`
    and `lines`, the transitions replayed and their log lines, `model_rejected` and
    `digest_mismatch` as in `ValidateResult`, and `seconds`, the time spent replaying
    and writing. `tokens`, shared by the logs of one call, numbers the token
    sequences of their arrivals (`Tok`)."""

    def __init__(self, path: str, workers: int, segments: int | None, bug: str | None,
                 tokens: Tokens | None = None, index: int = 0) -> None:
        self.path = path
        self.index = index
        header, stream = read_log(path)
        cfg = header.config
        refuse_unmodelled(cfg, f"{path}: the log's config")
        self.state = initial_state(cfg)
        if self.state.digest() != header.initial_digest:
            raise LogError(path, 1, f"initial digest {header.initial_digest} != {self.state.digest()} of the config's initial state", malformed=False)
        self.items = list(stream)
        spec_dir()  # fail early, with the reason, when the spec cannot be found
        self.tok = Tokens() if tokens is None else tokens
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

    def weights(self) -> list[float]:
        """The estimated cost of TLC's work on each planned segment (`STEP_WEIGHT`)."""
        return [sum(STEP_WEIGHT.get(t.name, 1.0) for _, _, t, _ in self.items[a:b]) for a, b in self.plan]

    def stretches(self) -> Iterator[Stretch]:
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
            self.seconds += time.perf_counter() - m0
            yield Stretch(self.index, seg, init, rows, set(tok.used), from_init=(a == 0))
            if self.model_rejected is not None:
                return

    def __iter__(self) -> Iterator[tuple[SegmentResult, str]]:
        for st in self.stretches():
            m0 = time.perf_counter()
            text = module_text(st.init, st.rows, self.tok, from_init=st.from_init)
            self.seconds += time.perf_counter() - m0
            yield st.seg, text


def run_segment(text: str, config: ModelConfig, steps: int, jvm_extra: Sequence[str] = ()) -> TLCResult:
    """TLC follows one trace module of `steps` states after its first (steps, and the
    jumps between its stretches). The serial collector: a module's heap is its Steps
    constant and one state, and parallel collectors would multiply the memory of
    parallel runs. TLC follows it in its simulation mode: one behaviour as long as the
    module's (every state has one successor), with no fingerprint of each state to take
    and keep (a fifth of TLC's time here). `jvm_extra`: more JVM options (a profiler's)."""
    return run_tlc(
        Path(f"{MODULE}.tla"), config, workers=1, deadlock=True, extra_modules={MODULE: text}, view=True,
        jvm=("-XX:+UseSerialGC", *jvm_extra), simulate={"num": 1, "depth": steps + 1, "seed": 0},
    )


def _outcome(todo: list[Stretch], res: TLCResult) -> int | None:
    """Where TLC stopped in a module of the stretches `todo` (its traces are printed
    through the VIEW `<<cursor, bad>>`): the index in `todo` of the stretch it rejected,
    with the rejection recorded in its segment, or None when it followed them all."""
    for st in todo:
        st.seg.tlc = res
    v = res.violation
    if v is None:
        return None
    if not v.trace:
        raise RuntimeError(f"TLC reported {v.property} without a trace while validating {len(todo)} stretch(es)")
    last = v.trace[-1].state
    cursor, bad = last["view"] if "view" in last else (last["cursor"], last["bad"])
    # the stretch of the step at the cursor (a deadlock), or of the step just taken
    at = cursor if v.kind == "deadlock" or len(v.trace) == 1 else cursor - 1
    k, start = 0, 1  # todo[k]'s first step is Steps[start]
    while k + 1 < len(todo) and start + len(todo[k].rows) <= at:
        start += len(todo[k].rows)
        k += 1
    st = todo[k]
    seg = st.seg
    if v.kind == "deadlock":
        seg.rejected_step = seg.first_step + cursor - start
        seg.reason = "the spec does not take this step from the model's state before it"
    elif v.kind == "invariant" and v.property == "TraceOk":
        seg.variables = sorted(bad)
        if len(v.trace) == 1:
            seg.rejected_step = 0 if st.from_init else seg.first_step
            seg.reason = "the model's initial state is not the spec's Init" if st.from_init else "the segment's first state is wrong"
        else:
            seg.rejected_step = seg.first_step + cursor - 1 - start
            seg.reason = "the spec's state after this step differs from the model's"
    else:
        raise RuntimeError(f"TLC reported {v.property} while validating; the trace module is wrong")
    return k


def _follow(stretches: list[Stretch], config: ModelConfig, tok: Tokens) -> list[TLCResult]:
    """TLC follows the stretches one after another in one process; after a rejection
    (TLC stops there) the stretches after it in another. The log's first stretches
    (from `Init`) go first: only a module's first stretch is compared with `Init`, and
    they all start from the same state (their logs share the config). When that state
    is not `Init`, each of them is rejected there. The TLC runs, in order."""
    runs: list[TLCResult] = []
    rest = list(stretches)
    while rest:  # stretches from Init that start from different states go to different modules
        head = next((st for st in rest if st.from_init), rest[0])
        todo = [st for st in rest if st.from_init and st.init == head.init] + [st for st in rest if not st.from_init]
        rest = [st for st in rest if st.from_init and st.init != head.init]
        runs += _follow_one(todo, config, tok)
    return runs


def _follow_one(todo: list[Stretch], config: ModelConfig, tok: Tokens) -> list[TLCResult]:
    runs: list[TLCResult] = []
    while todo:
        used = set().union(*(st.used for st in todo))
        text = module_text_many([(st.init, st.rows, st.from_init) for st in todo], tok, used)
        res = run_segment(text, config, sum(len(st.rows) for st in todo) + len(todo))
        runs.append(res)
        k = _outcome(todo, res)
        if k is None:
            break
        first = todo[k]
        rest = todo[k + 1 :]
        if first.seg.rejected_step == 0:  # every stretch from Init starts from this state
            for st in rest:
                if st.from_init:
                    st.seg.rejected_step, st.seg.reason, st.seg.variables = 0, first.seg.reason, first.seg.variables
            rest = [st for st in rest if not st.from_init]
        todo = rest
    return runs


def _runs(mods: list[TraceModules], workers: int, segments: int | None) -> list[list[tuple[int, int]]]:
    """The TLC processes of a call: lists of `(log, segment)`, each list of one config
    (the constants of a trace module are its config's), of consecutive segments of
    about equal cost. Forced `segments`: each segment a process of its own; else up to
    `workers` processes per config, each with at least MIN_SEGMENT_STEPS steps."""
    groups: dict[str, list[tuple[int, int, float, int]]] = {}
    for i, m in enumerate(mods):
        key = m.config.text()
        for j, ((a, b), w) in enumerate(zip(m.plan, m.weights())):
            groups.setdefault(key, []).append((i, j, w, b - a))
    out: list[list[tuple[int, int]]] = []
    for segs in groups.values():
        if segments is not None:
            out += [[(i, j)] for i, j, _, _ in segs]
            continue
        n = max(1, min(workers, len(segs), sum(s for *_, s in segs) // MIN_SEGMENT_STEPS))
        total = sum(w for _, _, w, _ in segs)
        run: list[tuple[int, int]] = []
        acc, k = 0.0, 1
        for idx, (i, j, w, _) in enumerate(segs):
            run.append((i, j))
            acc += w
            left = len(segs) - idx - 1  # segments after this one, for the n - k runs after this one
            if k < n and left >= n - k and (acc >= total * k / n or left == n - k):
                out.append(run)
                run, k = [], k + 1
        if run:
            out.append(run)
    return out


def _result(m: TraceModules, segs: list[SegmentResult], seconds: float) -> ValidateResult:
    steps, lines = m.steps, m.lines
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
    ok = first_rejected is None and m.model_rejected is None and m.digest_mismatch is None
    decided = rejecting or (segs[-1] if segs else None)
    return ValidateResult(
        m.path, len(steps), matched, ok, first_rejected, m.model_rejected, m.digest_mismatch,
        decided.tlc if decided else None, rejection, segs, seconds, m.seconds,
    )


def validate_many(logs: Sequence[str | Path], workers: int | None = None, segments: int | None = None, bug: str | None = None,
                  on_run: Callable[[int, int], None] | None = None) -> list[ValidateResult]:
    """Decide with TLC, for each log of `logs` (paths), whether it is a behaviour of the
    spec: a `ValidateResult` per log, in their order, each as `validate` gives it.

    One TLC process follows many logs (and segments of long logs) one after another,
    so that a TLC start (the JVM, parsing the spec) is shared: logs of one config (the
    spec's constants) are cut into up to `workers` processes at once (default: one per
    CPU) of about equal cost, each of at least MIN_SEGMENT_STEPS steps; logs of
    different configs never share a process (their trace modules bind different
    constants). A rejected log does not stop the others: TLC stops at the rejected
    step, and the stretches after it are followed by a new process. `segments` cuts
    every log into that many stretches, each followed by a process of its own.
    `on_run(done, total)` is called as each process's verdicts are in.

    Every log is read, and its config checked, before TLC starts: a log that cannot be
    read raises `LogError` naming it, a config the spec does not model `TLCError`.
    `bug`: as for `validate`. Each result's `seconds` is the wall time from the call's
    start until its last segment was decided, its `model_seconds` the time spent
    replaying it and writing its stretches."""
    t0 = time.perf_counter()
    workers = max(1, workers or os.cpu_count() or 1)
    tok = Tokens()
    mods = [TraceModules(str(p), workers, segments, bug, tok, index=i) for i, p in enumerate(logs)]
    runs = _runs(mods, workers, segments)
    where = {ij: r for r, run in enumerate(runs) for ij in run}
    got: list[dict[tuple[int, int], Stretch]] = [{} for _ in runs]
    segs: list[list[SegmentResult]] = [[] for _ in mods]
    finished = [0.0] * len(mods)
    pending: list[tuple[int, Future]] = []

    def follow(r: int, config: ModelConfig) -> float:
        _follow([got[r][ij] for ij in runs[r]], config, tok)
        return time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for i, m in enumerate(mods):
                for st in m.stretches():
                    segs[i].append(st.seg)
                    r = where[(i, st.seg.index)]
                    got[r][(i, st.seg.index)] = st
                    if len(got[r]) == len(runs[r]):
                        pending.append((r, pool.submit(follow, r, m.config)))
                # the model stopped replaying the log (it rejects a step): its later segments are empty
                for j in range(len(segs[i]), len(m.plan)):
                    r = where[(i, j)]
                    runs[r].remove((i, j))
                    if got[r] and len(got[r]) == len(runs[r]):
                        pending.append((r, pool.submit(follow, r, m.config)))
            for done, (r, fut) in enumerate(pending, start=1):
                at = fut.result()
                for i, _ in runs[r]:
                    finished[i] = max(finished[i], at)
                if on_run is not None:
                    on_run(done, len(pending))
        except BaseException:  # interrupted: the processes not started never start, TLC stops
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all()
            raise
    return [_result(m, segs[i], finished[i] or time.perf_counter() - t0) for i, m in enumerate(mods)]


def validate(path: str | Path, workers: int | None = None, segments: int | None = None, bug: str | None = None,
             on_segment: Callable[[int, int], None] | None = None) -> ValidateResult:
    """Decide with TLC whether the log at `path` is a behaviour of the spec, in up to
    `workers` TLC processes at once (default: one per CPU) over `segments` stretches
    of the log (default: see `plan_segments`). A log that cannot be read (malformed
    line, unknown transition) raises `LogError`; a config the spec does not model
    raises `TLCError`. The spec has the injected defect `bug` (the correct spec by
    default, whatever defect the log was written with); the Python model replays the
    log as it was written (with the defect its header names) to compute its states.
    `on_segment(done, total)` is called as each TLC process's segments are decided."""
    t0 = time.perf_counter()
    res = validate_many([path], workers, segments, bug, on_segment)[0]
    res.seconds = time.perf_counter() - t0
    return res
