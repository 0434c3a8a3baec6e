"""Reading what TLC prints: the verdict, a counterexample's trace (its states parsed
as TLA+ values), the counts at the end of a run, and the progress lines of a run that
has not finished."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from .values import parse_state, parse_value


@dataclass
class TraceStep:
    action: str  # the action's name; "Init" for the initial state
    state: dict[str, Any]  # variable -> value
    text: str = ""  # the state as TLC printed it


@dataclass
class Violation:
    kind: str  # "invariant", "property" (temporal), "deadlock" or "action"
    property: str  # the violated invariant or property, "deadlock", or "temporal properties"
    trace: list[TraceStep]
    loop_to: int | None = None  # a liveness counterexample loops back to this state (1-based)
    stutters: bool = False  # or ends stuttering forever


_PROGRESS = re.compile(
    r"^Progress\((\d+)\) at [^:]+:\d+:\d+: ([\d,]+) states generated.*?, ([\d,]+) distinct states found.*?, ([\d,]+) states left on queue",
    re.M,
)
_GENERATED = re.compile(r"^(\d+) states generated, (\d+) distinct states found, (\d+) states left on queue\.", re.M)
# a simulation's count of states: "Progress: N states checked." at its end (and "The
# number of states generated: N" after a violation)
_SIM_STATES = re.compile(r"^(?:Progress: (\d+) states checked\.|The number of states generated: (\d+))", re.M)
_DEPTH = re.compile(r"^The depth of the complete state graph search is (\d+)\.", re.M)
_FINISHED = re.compile(r"^Finished in (?:(\d+)h ?)?(?:(\d+)min ?)?(\d+)s", re.M)
_STATE_HEAD = re.compile(r"^(\d+): ?<(.*)>\s*$|^State (\d+): ?<(.*)>\s*$")
# "Back to state 9: <Rollback line ...>": the action that closes a liveness lasso
_BACK = re.compile(r"^(?:(?:State )?\d+: )?Back to state:? (\d+)(?:: ?<(.*)>)?")


def last_progress(output: str) -> dict[str, int] | None:
    """The last progress TLC reported in `output`: depth, states generated, distinct,
    queued (None before its first report)."""
    found = _PROGRESS.findall(output)
    if not found:
        return None
    d, g, s, q = (int(x.replace(",", "")) for x in found[-1])
    return {"depth": d, "states_generated": g, "distinct_states": s, "left_on_queue": q}


def completed(output: str, simulation: bool) -> bool:
    """Whether TLC finished its check: an exhaustive one says "Model checking completed",
    a simulation ends without it, with its count of states."""
    return "Model checking completed" in output or (simulation and _SIM_STATES.search(output) is not None)


def read_counts(output: str) -> dict[str, int | None]:
    """The counts TLC printed at the end of a run (None for those it did not print):
    states generated (a simulation's states checked), distinct states, the depth, and
    TLC's own "Finished in ..." in whole seconds."""
    gen = _GENERATED.findall(output)
    dep = _DEPTH.findall(output)
    fin = _FINISHED.findall(output)
    sim = _SIM_STATES.findall(output)
    return {
        "states_generated": int(gen[-1][0]) if gen else (int(sim[-1][0] or sim[-1][1]) if sim else None),
        "distinct_states": int(gen[-1][1]) if gen else None,
        "depth": int(dep[-1]) if dep else None,
        "tlc_seconds": (int(fin[-1][0] or 0) * 3600 + int(fin[-1][1] or 0) * 60 + int(fin[-1][2])) if fin else None,
    }


def _action_name(label: str) -> str:
    if label.startswith("Initial predicate"):
        return "Init"
    return label.split(" line ", 1)[0].split("(", 1)[0].strip()


def parse_trace(lines: Sequence[str], view: bool = False) -> tuple[list[TraceStep], int | None, bool]:
    """The states of a printed behaviour; with `view`, TLC printed each state through
    the cfg's VIEW, and the value is kept under the key "view"."""
    steps: list[TraceStep] = []
    loop_to: int | None = None
    stutters = False
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _STATE_HEAD.match(line)
        if m is None:
            b = _BACK.match(line)
            if b is not None:
                loop_to = int(b.group(1))
                if b.group(2) is not None and 0 < loop_to <= len(steps):
                    # the step that closes the loop leads back to that state
                    back = steps[loop_to - 1]
                    steps.append(TraceStep(action=_action_name(b.group(2)), state=back.state, text=back.text))
            elif re.match(r"^(?:State )?\d+: Stuttering", line):
                stutters = True
            i += 1
            continue
        label = m.group(2) if m.group(2) is not None else m.group(4)
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() and not _STATE_HEAD.match(lines[i]) and not _BACK.match(lines[i]):
            body.append(lines[i])
            i += 1
        text = "\n".join(body)
        # through a VIEW TLC prints the view's value, except in some traces (a
        # deadlock's) where it prints the variables the view reads
        state = {"view": parse_value(text)} if view and not text.lstrip().startswith("/\\") else parse_state(text)
        steps.append(TraceStep(action=_action_name(label), state=state, text=text))
    return steps, loop_to, stutters


def parse_output(text: str, view: bool = False) -> tuple[Violation | None, str | None]:
    """The violation TLC reports (with its trace), and the first line of an error that
    kept TLC from checking the model (None when it checked it)."""
    lines = text.splitlines()
    kind = prop = None
    fatal: str | None = None
    start = None
    for i, line in enumerate(lines):
        m = re.match(r"^Error: Invariant (\S+) is violated", line)
        if m:
            kind, prop = "invariant", m.group(1)
        elif line.startswith("Error: Temporal properties were violated"):
            kind, prop = "property", "temporal properties"
        elif line.startswith("Error: Deadlock reached"):
            kind, prop = "deadlock", "deadlock"
        elif (m := re.match(r"^Error: Action property (\S+) is violated", line)):
            kind, prop = "action", m.group(1)
        elif line.startswith(("Error: The behavior up to this point is", "Error: The following behavior constitutes")):
            start = i + 1
            break
        elif line.startswith("Error:") and kind is None and fatal is None:
            fatal = " ".join(x.strip() for x in lines[i : i + 6] if x.strip())
    if kind is None:
        return None, fatal
    trace: list[TraceStep] = []
    loop_to, stutters = None, False
    if start is not None:
        end = start
        while end < len(lines) and not _GENERATED.match(lines[end]) and not lines[end].startswith(("Finished in", "Error:")):
            end += 1
        trace, loop_to, stutters = parse_trace(lines[start:end], view)
    return Violation(kind=kind, property=prop, trace=trace, loop_to=loop_to, stutters=stutters), None
