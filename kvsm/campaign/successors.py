"""Local conform in a campaign: the spec's and the model's successors of the states a
walk run passes through (`kvsm.tla.local`).

Following a log (`kvsm.campaign.validation`) checks the steps the run took; it cannot
see a step the model wrongly refuses (the run just does not take it) nor a next state
no run reached. A walk run (`--schedule walk` on one of the campaign's small TLC
models) may take every enabled transition at every step, so the successors of its
states are the model's transition relation where the run went: TLC computes the
spec's successors of up to `SAMPLE` of its states (`log_states`: every one of a short
log, a sample drawn from the run's seed otherwise), and an edge `(action, next state)`
that only one side has fails the run as `spec:successors@ACTION`, `at` the step after
which the log is in that state. The runs of one model share one TLC process, each
run's states under its own knobs (`kvsm.tla.local.group_key`, `variant_modules`).
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from .run import Failure
from .scratch import scratch_dir


def verdict_error(e: BaseException) -> dict[str, Any]:
    return {"ok": False, "states": 0, "seconds": 0.0, "error": f"{type(e).__name__}: {e}"[:2000]}


def _compare(jobs: list[tuple[int, Any]]) -> dict[int, dict[str, Any]]:
    """One TLC process for the sampled states of `jobs` (`(seed, LogStates)` of one
    config); each seed's verdict: its states, and its earliest difference."""
    from ..tla.local import local_conform

    t0 = time.perf_counter()
    states, arrivals, owner = [], [], []
    for seed, ls in jobs:
        for step, st in zip(ls.steps, ls.states):
            states.append(st)
            owner.append((seed, step))
        arrivals += ls.arrivals
    res = local_conform(jobs[0][1].config, states, list(dict.fromkeys(arrivals)))
    seconds = round(time.perf_counter() - t0, 3)
    out = {seed: {"ok": True, "states": len(ls.states), "seconds": seconds} for seed, ls in jobs}
    for d in res.differences:
        seed, step = owner[d.index]
        v = out[seed]
        if v["ok"] or step < v["difference"]["step"]:
            v["ok"] = False
            v["difference"] = {"step": step, **d.to_json()}
            v["difference"].pop("index")
    return out


def prepared_states(text: str) -> Any:
    """The states local conform compares for a log's text (`log_states` with the default
    sample), replayed where the run ran: a campaign's worker sends them with the run's
    record, so that the campaign's process, which runs TLC for every walk, does not
    replay them one log after another. None when the log cannot be replayed (the
    campaign replays it again and says why)."""
    from ..tla.local import SAMPLE, log_states

    with tempfile.TemporaryDirectory(prefix="kvsm-states-", dir=scratch_dir()) as d:
        p = Path(d) / "run.jsonl"
        p.write_text(text)
        try:
            return log_states(p, SAMPLE)
        except Exception:  # noqa: BLE001 - decided again, with its reason, by successors_runs
            return None


def successors_runs(logs: Sequence[tuple[int, str]], workers: int = 1, limit: int | None = None,
                    last: bool = False, prepared: dict[int, Any] | None = None) -> dict[int, dict[str, Any]]:
    """Local conform's verdict on each `(seed, log text)`: `ok`, the `states` compared,
    `seconds` (of its TLC process, shared with the logs of the same model) and the
    earliest `difference` (`step`, `side`: the side that has the edge, `action`, `to`:
    what the edge changes, `other_side_to`). Logs of one model share a TLC process, up
    to `workers` at once. A group that fails as a whole is decided log by
    log, so that an error is the verdict of the log that caused it. `last`: compare
    each log's last state only. `prepared`: a log's states already replayed
    (`prepared_states`, by seed; the default sample)."""
    from ..log import read_log
    from ..tla.local import SAMPLE, compared_config, group_key, log_states
    from ..tla.runner import stop_all

    out: dict[int, dict[str, Any]] = {}
    groups: dict[str, list[tuple[int, Path]]] = {}
    ready = {} if prepared is None or last or (limit or SAMPLE) != SAMPLE else {k: v for k, v in prepared.items() if v is not None}

    def decide(jobs: list[tuple[int, Path]]) -> dict[int, dict[str, Any]]:
        # a group's logs are replayed here, in the pool: one group's replay goes on
        # while another's TLC process runs
        got: dict[int, dict[str, Any]] = {}
        states = []
        for seed, p in jobs:
            try:
                ls = ready.get(seed)
                states.append((seed, ls if ls is not None else log_states(p, limit or SAMPLE, last=last)))
            except Exception as e:  # noqa: BLE001 - said as the run's verdict; the campaign goes on
                got[seed] = verdict_error(e)
        if not states:
            return got
        try:
            return {**got, **_compare(states)}
        except Exception as e:  # noqa: BLE001 - a group's error: decided log by log below
            if len(states) == 1:
                return {**got, states[0][0]: verdict_error(e)}
        for job in states:
            try:
                got.update(_compare([job]))
            except Exception as e:  # noqa: BLE001
                got[job[0]] = verdict_error(e)
        return got

    with tempfile.TemporaryDirectory(prefix="kvsm-successors-", dir=scratch_dir()) as d:
        for seed, text in logs:
            p = Path(d) / f"run-{seed}.jsonl"
            ls = ready.get(seed)
            if ls is None:  # (a log whose states came replayed is not read again)
                p.write_text(text)
            try:
                key = group_key(ls.config if ls is not None else compared_config(read_log(p)[0]))
            except Exception as e:  # noqa: BLE001 - said as the run's verdict; the campaign goes on
                out[seed] = verdict_error(e)
                continue
            groups.setdefault(key, []).append((seed, p))
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            try:
                for got in pool.map(decide, groups.values()):
                    out.update(got)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                stop_all()
                raise
    return out


def successors_failure(v: dict[str, Any], command: str = "") -> Failure | None:
    """The failure a local conform verdict makes of an ok run (None when it agrees)."""
    if v.get("error"):
        return Failure("spec", "error", "-", v["error"], 0)
    d = v.get("difference")
    if d is None:
        return None
    only = "the model" if d["side"] == "model" else "the spec"
    other = "the spec" if d["side"] == "model" else "the model"
    theirs = f"{other}'s {d['action']} steps from it: {d['other_side_to']}" if d["other_side_to"] else f"{other} takes no {d['action']} from it"
    again = f"; again: {command} -o run.jsonl, then kvsm validate --successors run.jsonl" if command else ""
    return Failure("spec", "successors", d["action"],
                   f"local conform: from the state after step {d['step']}, only {only} steps by {d['action']} "
                   f"(changing {d['to']}); {theirs}{again}", d["step"])
