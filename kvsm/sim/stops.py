"""What stops a run: the error of each detector, and a stop as `kvsm sim --json` prints it."""

from __future__ import annotations

from typing import Any


class SimInvariantError(RuntimeError):
    """`--check` found a violated invariant; the message names the transition."""

    def __init__(self, message: str, transition: int = 0, violations: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.transition, self.violations = transition, violations


class SimDivergence(RuntimeError):
    """Ranks no longer agree; `step` says where (sync point, tick, log index, rank)."""

    def __init__(self, message: str, step: dict[str, Any]) -> None:
        super().__init__(message)
        self.step = step


class SimStuck(RuntimeError):
    """The run ended with work the model never let go of: a request still held or live,
    a backup still pending, L3 work still in flight (every request of the workload has
    had its time; a correct model lets each go)."""

    def __init__(self, message: str, transition: int = 0) -> None:
        super().__init__(message)
        self.transition = transition


# What stops a run, by the detector that stopped it.
STOPS = (SimInvariantError, SimDivergence, SimStuck)


def stop_record(e: BaseException, seed: int) -> dict[str, Any]:
    """A stopped run as `kvsm sim --json` prints it: the detector (`invariant` with
    `--check`, `divergence` of a rank's replica, `stuck`: work the run never let go
    of), the seed, the log transition where it stopped, and the message."""
    if isinstance(e, SimInvariantError):
        return {"detector": "invariant", "seed": seed, "transition": e.transition, "violations": list(e.violations), "message": str(e)}
    if isinstance(e, SimDivergence):
        return {"detector": "divergence", "seed": seed, "transition": e.step.get("transition"), "rank": e.step.get("rank"), "message": str(e)}
    if isinstance(e, SimStuck):
        return {"detector": "stuck", "seed": seed, "transition": e.transition, "message": str(e)}
    raise TypeError(f"not a run's stop: {type(e).__name__}")
