"""A campaign from start to end: the runs not yet in the results, executed, each result
stored as it arrives (its shrunk case written first), and the summary of them all."""

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
) -> None:
    """Run `todo` on `session`, storing each result as it comes."""

    def on_result(rec: dict[str, Any]) -> None:
        files = rec.pop("case_files", None)
        if files is not None:
            rec["case"] = str(write_case(store.dir, rec["failure"]["signature"], rec["seed"], files))
            side = json.loads(files["case.json"])["shrunk"]
            rec["case_size"] = {"requests": side["requests"], "transitions": side["transitions"]}
        store.append(rec)
        if on_progress is not None:
            on_progress(rec)

    run_all(session, todo, budget, on_result)


def run_campaign(
    space: Space,
    seeds: Iterable[int],
    budget: Budget,
    outdir: Path,
    session: Session,
    resume: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The whole campaign on an open session; returns the summary (`summary.summarize`)."""
    t0 = time.perf_counter()
    store = Results(outdir)
    store.open({"space": space.to_json(), "budget": budget.to_json()}, resume)
    try:
        todo = plan(space, seeds, store)
        if todo:
            execute_plan(session, todo, budget, store, on_progress)
    finally:
        store.close()
    return summarize(store.read(), len(session.seen_workers), time.perf_counter() - t0, session.lost_workers)
