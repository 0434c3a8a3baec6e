"""What a Dask worker runs for one campaign run: execute it, shrink it if it failed, and
return the result record (docs/campaign.md), with the run's log when `--validate`
selects it (the campaign has TLC follow it: `kvsm.campaign.validation`)."""

from __future__ import annotations

import os
import time
from typing import Any

from .run import Budget, execute
from .shrink import shrink
from .spec import RunSpec, command, resolve
from .successors import prepared_states
from .validation import log_uses, run_log, selected, successors_wanted


def run_task(spec_json: dict[str, Any], budget_json: dict[str, Any]) -> dict[str, Any]:
    """Run one spec on this worker; the result record (see docs/campaign.md)."""
    t0 = time.perf_counter()
    spec = resolve(RunSpec.from_json(spec_json))
    budget = Budget(**budget_json)
    out = execute(spec, budget, keep_log=selected(budget.validate, spec.seed, False) or successors_wanted(budget.validate, spec))
    rec: dict[str, Any] = {
        "seed": spec.seed,
        "status": out.status,
        "spec": spec.to_json(),
        "command": command(spec),
        "transitions": len(out.transitions),
        "worker": _worker_name(),
    }
    if out.budget:
        rec["budget"] = out.budget
    if out.failure is not None:
        rec["failure"] = out.failure.to_json()
        rec["case_files"] = shrink(spec, budget, out)
    rec["coverage"] = out.coverage
    uses = log_uses(out, spec, budget.validate)
    log = run_log(out, spec.seed, budget.validate, uses)
    if log is not None:  # for the campaign to validate (kvsm.campaign.validation)
        rec["log"], rec["log_for"] = log, uses
        if "successors" in uses:
            rec["local_states"] = prepared_states(log)
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"
