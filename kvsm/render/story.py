"""A log (or a corpus case) stepped through: every state, the invariants after each
step, and the story text: each step's transition followed by what it changed.

`tail_story` is what a command prints where a counterexample or a failed run appears:
the last steps before the violation, the state it left, and how to open the whole of
it with `kvsm show`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..config import Config
from ..invariants import Cache, full_violations
from ..invariants import violations as check_invariants
from ..log import read_log
from ..state import ClusterState, initial_state
from ..steptext import step_text
from ..transitions import Rejected, Transition, apply, arrive_ns
from .effects import effect_lines
from .text import render, render_diff
from .view import Names, View, build


@dataclass
class Step:
    n: int  # 1-based
    line: int  # the line of its file (0: none)
    transition: Transition
    state: ClusterState  # after the step


@dataclass
class Run:
    """The states of a log. The invariants of a state are checked when first asked for
    (they cost far more than a step), unless `check` is off: decided by the fast
    whole-state check (`full_violations`, exactly what `violations` says), whose cache
    makes the states of a run asked for in order cheap after the first."""

    config: Config
    initial: ClusterState
    steps: list[Step] = field(default_factory=list)
    names: Names = field(default_factory=Names)
    # why the run stopped before the end of its input: {"line", "step", "transition", "reason"}
    stopped: dict[str, Any] | None = None
    source: str = ""  # what the steps were read from
    about: list[str] = field(default_factory=list)  # facts from the log's header worth a line
    check: bool = True
    _violations: dict[int, list[str]] = field(default_factory=dict)
    _cache: Cache = field(default_factory=Cache, repr=False)
    _checked_all: bool = False

    def state(self, n: int) -> ClusterState:
        return self.initial if n == 0 else self.steps[n - 1].state

    def violations(self, n: int) -> list[str]:
        if not self.check:
            return []
        if n not in self._violations:
            try:
                self._violations[n] = full_violations(self.state(n), self._cache)
            except Exception:  # noqa: BLE001 - a broken state may break the check itself
                self._cache = Cache()  # what it remembered may be half-updated
                try:
                    self._violations[n] = check_invariants(self.state(n))
                except Exception as e:  # noqa: BLE001
                    self._violations[n] = [f"the invariant check failed: {type(e).__name__}: {e}"]
        return self._violations[n]

    def check_all(self) -> None:
        """The invariants of every state, decided together: a `Checker` along the run
        (each transition's writes checked, from scratch at agreement points and every
        few hundred steps: `kvsm replay --check`) says that every state holds; when it
        finds anything, each state is checked from scratch when asked for."""
        if not self.check or self._checked_all:
            return
        self._checked_all = True
        from ..checking import Checker  # noqa: PLC0415

        try:
            checker = Checker(self.initial)
            clean = checker.start() is None
            for st in self.steps:
                if not clean:
                    break
                clean = checker.step(st.transition, st.state, st.n) is None
            clean = clean and checker.finish() is None
        except Exception:  # noqa: BLE001 - a broken state may break the checks: each state on its own
            clean = False
        if clean:  # else each state is checked from scratch when asked for (`violations`)
            for n in range(len(self.steps) + 1):
                self._violations.setdefault(n, [])

    def first_violation(self) -> int | None:
        self.check_all()
        return next((n for n in range(len(self.steps) + 1) if self.violations(n)), None)

    def view(self, n: int) -> View:
        return build(self.state(n), self.names)


def step_line(t: Transition) -> str:
    """A step as the corpus writes it (kvsm.steptext)."""
    return step_text(t)


def run_steps(
    cfg: Config,
    items: Iterable[tuple[int, Transition, str | None]],
    source: str = "",
    initial_digest: str | None = None,
) -> Run:
    """Apply `(line, transition, digest or None)` in order from the config's initial
    state. Replay goes on after a violation (a person wants to see what followed) and
    stops at a step the model refuses, a digest the model does not reproduce, or a
    transition that fails."""
    s0 = initial_state(cfg)
    run = Run(cfg, s0, source=source)
    if initial_digest is not None and initial_digest != s0.digest():
        run.stopped = {"line": 1, "step": 0, "transition": "", "reason": f"initial digest {initial_digest} is not the config's {s0.digest()}"}
        return run
    s = s0
    n = 0
    it = iter(items)
    while True:
        try:
            got = next(it)
        except StopIteration:
            break
        except ValueError as e:  # a malformed line of the input (LogError, CaseError)
            run.stopped = {"line": getattr(e, "line", 0), "step": n + 1, "transition": "", "reason": getattr(e, "reason", str(e)), "malformed": True}
            break
        line, t, digest = got
        if t.name == "Arrive":
            run.names.add(tuple(t.arg("tokens")), ns=arrive_ns(t))
        try:
            nxt = apply(s, t)
        except Rejected as e:
            run.stopped = {"line": line, "step": n + 1, "transition": step_line(t), "reason": f"rejected: {e}"}
            break
        except Exception as e:  # noqa: BLE001 - a broken state may break a transition; show where
            run.stopped = {"line": line, "step": n + 1, "transition": step_line(t), "reason": f"failed: {type(e).__name__}: {e}"}
            break
        if digest is not None and nxt.digest() != digest:
            run.stopped = {
                "line": line, "step": n + 1, "transition": step_line(t),
                "reason": f"digest mismatch: the log has {digest}, the model gives {nxt.digest()}",
            }
            break
        n += 1
        run.steps.append(Step(n, line, t, nxt))
        s = nxt
    return run


def read_log_run(path: str | Path) -> Run:
    """Step through a kvsm log (JSONL). A corpus case is read by kvsm.corpus.run.read_run,
    which reads either."""
    p = str(path)
    header, stream = read_log(p)
    run = run_steps(header.config, ((ln, t, d) for ln, _, t, d in stream), p, header.initial_digest)
    ex = header.extra
    if header.source == "tlc" and "property" in ex:
        about = f"TLC counterexample of {ex['property']} ({ex.get('kind', '?')}) in model {ex.get('model', '?')}"
        if "loops_back_to_step" in ex:
            about += f"; the last step returns to the state after step {ex['loops_back_to_step']}, for ever"
        if ex.get("stutters_forever"):
            about += "; after the last step nothing happens, for ever"
        run.about.append(about)
    elif "case" in ex and isinstance(ex["case"], dict):
        run.about.append(f"case {ex['case'].get('name')}")
    return run


def config_line(cfg: Config) -> str:
    c = cfg
    parts = [f"config {c.name}: R={c.R} P={c.P} L1={c.L1}/lane L2={c.L2}"]
    if c.L3:
        parts.append(f"L3={c.L3}/rank")
    parts.append(f"{c.policy} {c.eviction}")
    if c.bug != "none":
        parts.append(f"bug {c.bug}")
    return " ".join(parts)


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + x if x else x for x in text.split("\n"))


def step_story(run: Run, n: int, before: View | None = None, after: View | None = None) -> str:
    """Step `n`: its transition, what it asked the world to do (its effects, one line per
    batch), what it changed, and any violation after it."""
    st = run.steps[n - 1]
    a = before if before is not None else run.view(n - 1)
    b = after if after is not None else run.view(n)
    lines = [f"step {n}  {step_line(st.transition)}"]
    lines += [f"  {x}" for x in effect_lines(st.state.effects, run.names, run.config.R)]
    lines.append(_indent(render_diff(a, b)))
    lines += [f"  violation {v}" for v in run.violations(n)]
    return "\n".join(lines)


def story(run: Run, first: int = 1, last: int | None = None, with_states: bool = True) -> str:
    """Steps `first`..`last` as a story; with `with_states`, the state before the first
    and after the last in full."""
    last = len(run.steps) if last is None else last
    out = [f"{run.source}: {config_line(run.config)}, {len(run.steps)} steps"] + run.about
    prev = run.view(first - 1)
    if with_states:
        out.append(f"state after step {first - 1}" if first > 1 else "initial state")
        out.append(_indent(render(prev)))
        out += [f"  violation {v}" for v in run.violations(first - 1)]
    for n in range(first, last + 1):
        cur = run.view(n)
        out.append(step_story(run, n, prev, cur))
        prev = cur
    if run.stopped is not None and last == len(run.steps):
        out.append(_stopped_text(run))
    if with_states and last >= first:
        out.append(f"state after step {last}")
        out.append(_indent(render(prev)))
    return "\n".join(out)


def _stopped_text(run: Run) -> str:
    s = run.stopped or {}
    where = f"line {s['line']}" if s.get("line") else "the input"
    what = f"step {s['step']}  {s['transition']}" if s.get("transition") else f"step {s.get('step')}"
    return f"{what}\n  stopped at {where}: {s['reason']}"


LONG = 2000  # steps beyond which tail_story checks only the steps it shows


def tail_story(path: str | Path, last: int = 6, until: int | None = None, html_hint: bool = True) -> str:
    """The story of the last `last` steps of the log at `path` up to step `until` (default:
    its first violation, else where replay stopped, else its end), the state after
    them, and the commands that open the whole of it. What `kvsm sim` prints when a run
    stops, and what `kvsm check` and `kvsm validate` print for a counterexample."""
    run = read_log_run(path)
    end = until
    if end is None:
        # the first violation; a long log (a simulator run) is only checked at its end,
        # where a run that checks its invariants stops
        end = run.first_violation() if len(run.steps) <= LONG else None
        if end is None:
            end = len(run.steps)
    end = max(0, min(end, len(run.steps)))
    first = max(1, end - last + 1)
    out = [f"{run.source}: {config_line(run.config)}, {len(run.steps)} steps"] + run.about
    if end >= first:
        out.append(f"the last {end - first + 1} steps up to step {end}:" if first > 1 else f"steps 1 to {end}:")
        prev = run.view(first - 1)
        for n in range(first, end + 1):
            cur = run.view(n)
            out.append(step_story(run, n, prev, cur))
            prev = cur
    if run.stopped is not None and (until is None or until > len(run.steps)) and end == len(run.steps):
        out.append(_stopped_text(run))
    out.append(f"state after step {end}")
    out.append(_indent(render(run.view(end))))
    violations = run.violations(end)
    out += [f"  violation {v}" for v in violations]
    p = str(path)
    if violations:
        # the failure as a regression case: the fewest steps that fail the same way
        out.append(f"shrink it to a corpus case: kvsm corpus add {p} --name NAME")
    hint = f"the whole story: kvsm show {p} --all"
    if html_hint:
        hint += f"   step through it: kvsm show {p} --html {Path(p).with_suffix('.html').name}"
    out.append(hint)
    return "\n".join(out)
