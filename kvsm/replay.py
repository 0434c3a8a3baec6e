"""Replaying a log against the model: from its header's config, every transition is
applied and its digest compared with the log's, and with `check` every invariant is
checked after every transition (`kvsm.checking`). The log's format, reading and
writing are `kvsm.log`'s."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from .checking import Checker, full_violations
from .config import Config, ConfigError
from .log import Header, LogError, read_log
from .state import ClusterState, Rejected, initial_state
from .transitions import Transition, apply

# The from-scratch check of `replay(check=True)` (`kvsm.checking` also checks each
# transition's writes after it); looked up at each use, so that a test can replace it.
check_invariants = full_violations


@dataclass
class ReplayResult:
    transitions: int
    final_digest: str
    violations: list[dict[str, Any]]
    first_mismatch: dict[str, Any] | None
    final_state: ClusterState | None = None
    malformed: bool = False  # first_mismatch is a defect of the file itself (LogError.malformed)
    format: int | None = None  # the log's format version (None: the header could not be read)
    bug: str = "none"  # the injected defect the log was replayed with
    log_bug: str = "none"  # the one the log's header says it was written with

    @property
    def ok(self) -> bool:
        return self.first_mismatch is None and not self.violations

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "transitions": self.transitions,
            "final_digest": self.final_digest,
            "violations": self.violations,
            "first_mismatch": self.first_mismatch,
            "malformed": self.malformed,
            "format": self.format,
        }
        if self.bug != "none" or self.log_bug != "none":
            d["bug"] = self.bug
            d["log_bug"] = self.log_bug
        return d


def model_config(header: Header, bug: str | None, where: str) -> Config:
    """The config a checker replays a log with: the header's, with the injected defect it
    is asked for (`--bug`; none by default) whatever defect the header names. A log
    written by a model with a defect says so in its header; it is not replayed with
    that defect unless asked, so that the correct model rejects it where it deviates."""
    want = bug or "none"
    if header.config.bug == want:
        return header.config
    try:
        return header.config.with_bug(want, where)
    except ConfigError as e:
        raise LogError(where, 0, str(e)) from None


def _found(f: Any) -> list[dict[str, Any]]:
    """A checker's finding as replay reports it; its label is (line, step index)."""
    line, step = f.at
    return [{"line": line, "step": step, "transition": str(f.transition), "violation": x} for x in f.violations]


@contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector off while the block runs (as it was afterwards). A replay
    holds one state, a tree of immutable values with no reference cycle: refcounting
    frees each state it leaves, and a collection finds nothing (a test replays with the
    collector off and then collects: nothing). Yet every collection of the young
    generations traverses what the transitions allocated, and each object it visits
    reads the header of everything that object points to, most of it old and far
    apart on a large tree: on a tree of 100k nodes the young collections alone cost a
    tenth of the replay, and more per transition the larger the tree. Full collections,
    which traverse the whole heap, cost seconds on a million nodes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def replay(
    path: str | Path,
    check: bool = False,
    on_step: Callable[[int], None] | None = None,
    bug: str | None = None,
    on_state: Callable[[int, Transition, ClusterState], None] | None = None,
) -> ReplayResult:
    """Replay a log from its header's config with the injected defect `bug` (none by
    default, see `model_config`), verifying every digest (and with `check` every
    invariant after every transition, `kvsm.checking`) and its end line. Stops at the
    first mismatch or violation; a mismatch names the step, its transition and why, a
    violation the line of the first state that breaks it. Runs with the cyclic
    collector off (`collector_off`). `on_step(n)` is called after the n-th transition is
    verified, `on_state(n, t, state)` too, with that transition and the state it leads to."""
    with collector_off():
        return _replay(path, check, on_step, bug, on_state)


def _replay(
    path: str | Path, check: bool, on_step: Callable[[int], None] | None, bug: str | None,
    on_state: Callable[[int, Transition, ClusterState], None] | None = None,
) -> ReplayResult:
    p = str(path)
    count = 0
    state: ClusterState | None = None
    fmt: int | None = None
    bugs = {"bug": bug or "none", "log_bug": "none"}
    try:
        header, stream = read_log(p)
        fmt = header.format
        bugs["log_bug"] = header.config.bug
        state = initial_state(model_config(header, bug, p))
        if state.digest() != header.initial_digest:
            raise LogError(p, 1, f"initial digest {header.initial_digest} != {state.digest()} of the config's initial state", malformed=False)
        checker = None
        if check:
            # (the checker's own from-scratch check, with its cache, unless a test replaced it)
            checker = Checker(state) if check_invariants is full_violations else Checker(state, full=check_invariants)
            found = checker.start(1)
            if found is not None:
                return ReplayResult(
                    transitions=0, final_digest=state.digest(), violations=[{"line": 1, "violation": x} for x in found.violations],
                    first_mismatch=None, final_state=state, format=fmt, **bugs,
                )
        for lineno, i, t, digest in stream:
            try:
                nxt = apply(state, t)
            except Rejected as e:
                raise _StepError(p, lineno, f"{t} rejected: {e}", i, t) from None
            got = nxt.digest()
            if got != digest:
                raise _StepError(p, lineno, f"digest mismatch after {t}: log has {digest}, replay gives {got}", i, t)
            state = nxt
            count += 1
            if checker is not None:
                found = checker.step(t, state, (lineno, i))
                if found is not None:
                    return ReplayResult(
                        transitions=count, final_digest=got, violations=_found(found), first_mismatch=None, final_state=state, format=fmt, **bugs
                    )
            if on_step is not None:
                on_step(count)
            if on_state is not None:
                on_state(count, t, state)
        if checker is not None:
            found = checker.finish()
            if found is not None:
                return ReplayResult(
                    transitions=count, final_digest=state.digest(), violations=_found(found), first_mismatch=None, final_state=state, format=fmt, **bugs
                )
    except LogError as e:
        last = state.digest() if state is not None else ""
        where: dict[str, Any] = {"line": e.line}
        if isinstance(e, _StepError):
            where |= {"step": e.step, "transition": str(e.transition)}
        return ReplayResult(
            transitions=count, final_digest=last, violations=[], first_mismatch=where | {"reason": e.reason}, final_state=state,
            malformed=e.malformed, format=fmt, **bugs,
        )
    return ReplayResult(
        transitions=count, final_digest=state.digest(), violations=[], first_mismatch=None, final_state=state, format=fmt, **bugs
    )


class _StepError(LogError):
    """A logged step the model does not take as logged (rejected, or another digest)."""

    def __init__(self, path: str, line: int, reason: str, step: int, t: Transition) -> None:
        super().__init__(path, line, reason, malformed=False)
        self.step, self.transition = step, t
