"""A campaign from start to end: the runs not yet in the results, executed, each result
stored as it arrives (its shrunk case written first), and the summary of them all. A
run whose log `--validate` selects is stored once TLC has decided on its batch; one
TLC rejected, once a worker has shrunk it (`kvsm.campaign.validation`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from .cases import write_case
from .execute import Session, run_all
from .run import Budget
from .spec import Space, derive
from .store import Results
from .summary import summarize
from .validation import ShrinkJob, Validator, shrink_task


def plan(space: Space, seeds: Iterable[int], store: Results) -> list:
    """The runs of `seeds` that have no result yet."""
    done = store.done()
    return [derive(space, s) for s in seeds if s not in done]


def execute_plan(
    session: Session,
    todo: list,
    budget: Budget,
    store: Results,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    validate_workers: int = 1,
) -> None:
    """Run `todo` on `session`, storing each result as it comes; the logs that
    `budget.validate` selects are validated by up to `validate_workers` TLC processes."""
    validator = Validator(validate_workers) if budget.validate != "none" else None
    jobs: dict[str, ShrinkJob] = {}

    def keep(rec: dict[str, Any]) -> None:
        files = rec.pop("case_files", None)
        if files is not None:
            rec["case"] = str(write_case(store.dir, rec["failure"]["signature"], rec["seed"], files))
            side = json.loads(files["case.json"])["shrunk"]
            rec["case_size"] = {"requests": side["requests"], "transitions": side["transitions"]}
        store.append(rec)
        if on_progress is not None:
            on_progress(rec)

    def settle(recs: list[dict[str, Any]]) -> None:
        for rec in recs:
            log = rec.pop("log", None)
            if log is None:
                keep(rec)
            else:  # rejected by TLC: shrunk on a worker once the runs are done
                job = ShrinkJob(rec, log)
                jobs[job.to_json()["job"]] = job

    left = len(todo)  # runs without a result yet

    def on_result(rec: dict[str, Any]) -> None:
        nonlocal left
        left -= 1
        if "log" in rec and validator is not None and rec.get("status") in ("ok", "failed"):
            settle(validator.add(rec, left))
        else:
            rec.pop("log", None)
            rec.pop("log_for", None)
            rec.pop("local_states", None)
            keep(rec)

    def on_shrunk(out: dict[str, Any]) -> None:
        job = jobs[out["job"]]
        rec = out.get("record") or dict(job.record, shrink_error=out.get("error", "?"))
        rec["attempts"] = job.record.get("attempts", 1)  # the run's, not the shrink's
        keep(rec)

    run_all(session, todo, budget, on_result)
    if validator is not None:
        settle(validator.flush())
        if jobs:
            run_all(session, list(jobs.values()), budget, on_shrunk, run=shrink_task, key="job")


def run_campaign(
    space: Space,
    seeds: Iterable[int],
    budget: Budget,
    outdir: Path,
    session: Session,
    resume: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    validation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole campaign on an open session; returns the summary (`summary.summarize`;
    `validation`: its mode and why TLC cannot run, if it cannot)."""
    t0 = time.perf_counter()
    store = Results(outdir)
    store.open({"space": space.to_json(), "budget": budget.to_json()}, resume)
    try:
        todo = plan(space, seeds, store)
        if todo:
            execute_plan(session, todo, budget, store, on_progress, max(1, len(session.seen_workers)))
    finally:
        store.close()
    return summarize(store.read(), len(session.seen_workers), time.perf_counter() - t0, session.lost_workers, validation)
