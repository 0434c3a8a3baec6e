"""Shrinking a failing run to a local minimum that fails the same way.

First the workload: the run's requests are written as a Mooncake trace and the run is
repeated on subsets of it (same seed, config, tiers, faults and capacities), removing
chunks of requests, halves first, then smaller, until no single request can be removed
and the run still fail with the same signature. Then the transition log of that
smallest failing run: for failures that are properties of the transitions alone
(`invariant`, `held`), transitions are removed (large chunks, then a whole request's or
node's transitions, then smaller chunks), each candidate replayed by the model with its
references re-resolved (`kvsm.resolve`) and every invariant checked, until no single
transition can be removed and the replay still fail with the same signature.
Divergences, replay mismatches and crashes depend on the simulator (the ranks' order of
steps, its own code), so their logs are the failing run's, up to the failure. A walk run
(`--schedule walk`) shrinks its log only: on fewer requests it would be another walk.

Shrinking stops at `Budget.shrink_seconds`; the case then says it is not a local
minimum. `case_files` are the case's files as texts (`kvsm.campaign.cases` writes them).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from ..checking import Checker
from ..log import Header, dumps, end_line, transition_line
from ..resolve import references, replay_kept
from ..sim.options import prepare
from ..sim.trace import NAMESPACE_FIELD, TraceRequest
from ..state import ClusterState, Rejected, initial_state
from ..transitions import Transition, apply
from .run import Budget, Outcome, _Held, _track_held, execute, signature
from .scratch import scratch_dir
from .spec import RunSpec, command

T = TypeVar("T")
LOG_DETECTORS = ("invariant", "held")


def ddmin(
    items: Sequence[T],
    fails: Callable[[list[T]], bool | list[T] | None],
    deadline: float,
    groups: Callable[[list[T]], list[list[int]]] | None = None,
) -> tuple[list[T], bool]:
    """A 1-minimal failing sub-sequence of `items` (which must fail): remove chunks of
    halving size, keeping every removal that still fails, until no single item can go.
    With `groups` (of indices into the items), chunks of 16 items and more are tried
    first, then the groups, then the smaller chunks. `fails(candidate)` may return the
    part of the candidate the failure needed (a list, None when it does not fail), which
    replaces it. Returns the items and whether it got to that local minimum before
    `deadline`."""
    cur = list(items)

    def attempt(cand: list[T]) -> bool:
        nonlocal cur
        if len(cand) == len(cur):
            return False
        got = fails(cand)
        if got is None or got is False:
            return False
        cur = got if isinstance(got, list) else cand
        return True

    def chunks(n: int, smallest: int) -> bool:
        """Sweeps removing chunks of n items, halving n down to `smallest`; whether the
        last sweep (of chunks of `smallest`) removed none."""
        while time.perf_counter() < deadline:
            removed = False
            i = 0
            while i < len(cur) and time.perf_counter() < deadline:
                if not attempt(cur[:i] + cur[i + n :]):
                    i += n  # after a removal, the next chunk starts at i
                else:
                    removed = True
            if n <= smallest and not removed:
                return True
            if not removed:
                n = max(smallest, n // 2)
        return False

    if groups is not None:
        if len(cur) >= 32:
            chunks(len(cur) // 2, 16)
        # passes over the groups of the items at the pass's start, each group tried
        # without the ones this pass removed already, until a pass removes none
        changed = True
        while changed and time.perf_counter() < deadline:
            changed = False
            base, gone = cur, set()
            for g in groups(base):
                if time.perf_counter() >= deadline:
                    break
                idx = set(g) - gone
                if idx and attempt([x for i, x in enumerate(base) if i not in gone and i not in idx]):
                    changed = True
                    if len(cur) != len(base) - len(gone) - len(idx):
                        break  # fails() returned fewer items: the pass's groups are stale
                    gone |= idx
    done = chunks(max(1, len(cur) // 2), 1)
    return cur, done


# ---- the workload ------------------------------------------------------------------------------------


def trace_text(requests: Sequence[TraceRequest]) -> str:
    """Requests as a Mooncake trace (`kvsm sim --workload FILE` reads it back), each with
    its namespace where it has one (a run with tenants: the file carries the spread)."""
    return "".join(
        json.dumps({"timestamp": r.timestamp, "input_length": r.input_length, "output_length": r.output_length, "hash_ids": list(r.hash_ids),
                    **({NAMESPACE_FIELD: r.ns} if r.ns else {})}) + "\n"
        for r in requests
    )


# ---- the log ---------------------------------------------------------------------------------------


def log_signature(s0: ClusterState, transitions: Sequence[Transition], detector: str) -> tuple[str, int] | None:
    """Replay `transitions` from `s0` with every invariant checked: the signature of the
    first failure of kind `detector` (`invariant` or `held`) and the number of
    transitions up to it, or None (a transition rejected, or nothing found)."""
    return _first_signature(s0, _replayed(s0, transitions), detector)


def _replayed(s: ClusterState, transitions: Sequence[Transition]) -> Iterator[tuple[Transition, ClusterState | Rejected]]:
    """Each transition and the state after it, or the `Rejected` that ends the replay."""
    for t in transitions:
        try:
            s = apply(s, t)
        except Rejected as e:
            yield t, e
            return
        yield t, s


def _first_signature(s0: ClusterState, steps: Iterable[tuple[Transition, ClusterState | Rejected]], detector: str) -> tuple[str, int] | None:
    """`log_signature` over steps already applied (each transition and the state after
    it)."""
    ck = Checker(s0)
    held: dict[int, int] = {}
    f = ck.start(0)
    if f is not None:
        return (_inv_sig(f), 0) if detector == "invariant" else None
    s, t, i = s0, None, 0
    for i, (t, nxt) in enumerate(steps, start=1):
        if isinstance(nxt, Rejected):
            return None
        f = ck.step(t, nxt, i)
        if f is not None:
            return (_inv_sig(f), f.at) if detector == "invariant" else None
        if nxt.reloads or held:
            try:
                _track_held(held, t, nxt)
            except _Held as e:
                return (signature("held", "HeldReleased", e.transition), i) if detector == "held" else None
        s = nxt
    f = ck.finish()
    if f is not None:
        return (_inv_sig(f), f.at) if detector == "invariant" else None
    if detector == "held" and any(op.waiters for op in s.reloads):
        return signature("held", "HeldReleased", t.name if t is not None else "-"), i
    return None


def _inv_sig(f: Any) -> str:
    first = f.violations[0]
    return signature("invariant", first.split(":")[0], f.transition.name if f.transition else "-")


def _request_groups(ts: list[Transition]) -> list[list[int]]:
    """Indices of each request's transitions (every transition naming it), then of each
    node's (Reserve, Rollback, Split of one node), then of each commit round (its
    `CommitCall`s and its `Commit`: one without the others is rejected)."""
    by: dict[tuple[str, int], list[int]] = {}
    rounds: list[list[int]] = []
    open_round: list[int] = []
    for i, t in enumerate(ts):
        for k, v in t.args:
            if k in ("rid", "node") and isinstance(v, int):
                by.setdefault((k, v), []).append(i)
        if t.name == "CommitCall":
            open_round.append(i)
        elif t.name == "Commit" and open_round:
            rounds.append(open_round + [i])
            open_round = []
    return [v for _, v in sorted(by.items())] + rounds


def _shrink_log(
    s0: ClusterState, cfg: Any, transitions: list[Transition], sig: str, detector: str, deadline: float, steps: dict[str, int]
) -> tuple[list[Transition], bool]:
    """The failing `transitions` shrunk (`ddmin`, a request's or a node's steps first),
    each candidate replayed with its references re-resolved (`kvsm.resolve`: a removed
    request or node renumbers the ones after it) and every invariant checked; the steps
    as taken up to the failure, and whether that is a local minimum."""
    refs = references(cfg, transitions)
    best = list(transitions)

    def fails(keep: list[int]) -> list[int] | None:
        """The indices of the steps taken up to the failure, when it fails as the run."""
        steps["log_replays"] += 1
        taken: list[tuple[int, Transition]] = []  # (index, step as taken), as replayed

        def replayed() -> Iterator[tuple[Transition, ClusterState | Rejected]]:
            for i, t, after in replay_kept(s0, transitions, refs, keep):
                taken.append((i, t))
                yield t, after

        got = _first_signature(s0, replayed(), detector)
        if got is None or got[0] != sig:
            return None
        best[:] = [t for _, t in taken[: got[1]]]
        return [i for i, _ in taken[: got[1]]]

    def groups(keep: list[int]) -> list[list[int]]:
        return _request_groups([transitions[i] for i in keep])

    _, local_min = ddmin(list(range(len(transitions))), fails, deadline, groups=groups)
    return best, local_min


def log_text(cfg: Any, seed: int, transitions: Sequence[Transition], extra: dict[str, Any]) -> tuple[str, int]:
    """A whole kvsm log (its end line too) of `transitions` applied from the initial state
    (up to the first one the model rejects), with the digests the model gives; and how
    many it holds."""
    s = initial_state(cfg)
    lines = [dumps(Header(config=cfg, seed=seed, source="sim", initial_digest=s.digest(), extra=extra).to_json())]
    n = 0
    for t in transitions:
        try:
            s = apply(s, t)
        except Rejected:
            break
        n += 1
        lines.append(transition_line(n, t, s.digest()))
    lines.append(end_line(n, s.digest()))
    return "\n".join(lines) + "\n", n


# ---- the whole case -----------------------------------------------------------------------------------


def shrink(spec: RunSpec, budget: Budget, first: Outcome) -> dict[str, Any]:
    """The case of a failing run: its shrunk workload and log, and a sidecar saying what
    it is and how to reproduce it."""
    target = first.failure
    assert target is not None
    t0 = time.perf_counter()
    deadline = t0 + budget.shrink_seconds
    run_budget = Budget(budget.seconds, budget.transitions, 0)
    requests = list(prepare(spec.options()).workload.requests)
    steps = {"workload_runs": 0, "log_replays": 0}
    best = first
    local_min_w = False
    with tempfile.TemporaryDirectory(prefix="kvsm-shrink-", dir=scratch_dir()) as d:
        trace = Path(d) / "workload.jsonl"

        def run_on(reqs: list[TraceRequest]) -> Outcome:
            trace.write_text(trace_text(reqs))
            steps["workload_runs"] += 1
            return execute(spec, run_budget, workload=str(trace), collect=False, replay_log=target.detector == "replay")

        def fails(reqs: list[TraceRequest]) -> bool:
            nonlocal best
            if not reqs:
                return False
            out = run_on(reqs)
            if out.failure is not None and out.failure.signature == target.signature:
                best = out
                return True
            return False

        if spec.schedule == "walk":
            # a walk on fewer requests is another walk (every step draws from one stream),
            # so its workload is not shrunk: its log is, every line a step of the model
            reproduced = True
        # the same requests from a trace file first: the trace reproduces the run
        elif fails(requests):
            # `best` is always the run on the current requests (it changes only on success)
            requests, local_min_w = ddmin(requests, fails, deadline)
            reproduced = True
        else:
            reproduced = False
    transitions = best.transitions if reproduced else first.transitions
    cfg = best.config if reproduced and best.config is not None else first.config
    local_min_l = False
    if cfg is None:
        cfg = prepare(spec.options()).cfg
    if target.detector in LOG_DETECTORS and reproduced and transitions:
        s0 = initial_state(cfg)
        found = log_signature(s0, transitions, target.detector)
        if first.config is not None and (found is None or target.at < found[1]):
            # the run on fewer requests took another order (the random schedule draws
            # from the workload too) and failed later: shrink the original run's log
            mine = log_signature(initial_state(first.config), first.transitions, target.detector)
            if mine is not None and mine[0] == target.signature and (found is None or mine[1] < found[1]):
                cfg, s0, transitions, found = first.config, initial_state(first.config), first.transitions, mine
        if found is not None and found[0] == target.signature:
            transitions, local_min_l = _shrink_log(s0, cfg, transitions[: found[1]], target.signature, target.detector, deadline, steps)
    elif target.detector != "replay":
        at = (best.failure if reproduced and best.failure is not None else target).at
        transitions = transitions[: max(at, 1)]
    extra = {"campaign": {"seed": spec.seed, "signature": target.signature, "shrunk": True}}
    text, n = log_text(cfg, spec.seed, transitions, extra)
    workload_text = trace_text(requests)
    sidecar = {
        "signature": target.signature,
        "detector": target.detector,
        "what": target.what,
        "transition": target.transition,
        "message": target.message,
        "seed": spec.seed,
        "spec": spec.to_json(),
        "command": command(spec) if spec.schedule == "walk" else command(spec, workload="workload.jsonl"),
        "replay": (f"kvsm replay --check{'' if spec.bug == 'none' else ' --bug ' + spec.bug} case.jsonl"
                   if target.detector in LOG_DETECTORS else None),
        "cwd": "the case's directory",
        "original": {"command": command(spec), "requests": spec.requests, "transitions": len(first.transitions)},
        "shrunk": {
            "requests": len(requests),
            "transitions": n,
            "workload_reproduced": reproduced,
            "workload_local_minimum": reproduced and local_min_w,
            "workload_shrunk": spec.schedule != "walk",
            "log_shrunk": target.detector in LOG_DETECTORS and reproduced,
            "log_local_minimum": local_min_l,
            "runs": steps["workload_runs"],
            "replays": steps["log_replays"],
            "seconds": round(time.perf_counter() - t0, 3),
        },
    }
    return {"case.jsonl": text, "workload.jsonl": workload_text, "case.json": json.dumps(sidecar, indent=2) + "\n"}
