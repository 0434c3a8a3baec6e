"""Running a case: its steps through the model with every invariant checked after each,
its directives' outputs from the renderer, and what `kvsm corpus verify` concludes.
Also the conversion of a case into a kvsm log and back.

What a case must do (docs/corpus.md):

- without `bug`: every step is accepted and every invariant holds after every step;
  every `rejects` is refused with exactly the reason written;
- with `bug NAME`: on the config with that defect, every step is accepted, the
  invariants hold until the last step and after it exactly the `violation` lines are
  reported; on the config without it, no invariant is violated (a step the correct
  model refuses ends that run: the defect was needed to take it);
- with `knob NAME`: the same, the config (with the fidelity knob at the reference's
  value) in the role of the defect's and the config with the knob at its fixed value in
  the role of the correct one; TLC's validate accepts the steps (the spec has the knob);
- every expected output equals what the renderer prints.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import CASE_KNOBS, Config, ConfigError, knob_readings
from ..invariants import violations as check_invariants
from ..log import Header, LogWriter, read_log
from ..render import Names, View, build, render, render_diff
from ..render.effects import effect_lines
from ..render.story import Run, read_log_run, run_steps
from ..state import ClusterState, initial_state
from ..steptext import step_text
from ..transitions import Rejected, Transition, apply, arrive_ns
from .format import ORIGIN_DEFAULT, Case, CaseError, Entry, best_base, format_case, parse_case, read_case
from .shrink import shrink


@dataclass
class Failure:
    file: str
    line: int
    why: str
    detail: str = ""  # more for a person (a diff of outputs); not in --json
    output: bool = False  # an expected output differs or is missing (what --rewrite fixes)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "why": self.why}


@dataclass
class Played:
    """One run of a case's script on one config."""

    outputs: dict[int, str] = field(default_factory=dict)  # script index -> what the renderer printed
    states: list[ClusterState] = field(default_factory=list)  # after each applied step (0: initial)
    lines: list[int] = field(default_factory=list)  # the case line of each applied step (index n-1)
    violated: list[tuple[int, str, list[str]]] = field(default_factory=list)  # (line, step, violations)
    rejected: tuple[int, str, str] | None = None  # (line, step, reason): a step the model refused
    complete: bool = True  # every step was applied


def config_with_bug(cfg: Config, bug: str) -> Config:
    """The case's config with the injected defect `bug` (refused while the model does not
    implement it: ConfigError)."""
    return cfg.with_bug(bug, f"config with bug {bug}")


def play(case: Case, cfg: Config) -> Played:
    s = initial_state(cfg)
    names = Names()
    out = Played(states=[s])
    mark: View | None = None  # the view a `diff` compares with

    def view() -> View:
        return build(s, names)

    for i, e in enumerate(case.script):
        if e.kind == "step":
            t = e.step
            if t.name == "Arrive":
                names.add(tuple(t.arg("tokens")), ns=arrive_ns(t))
            if mark is None:
                mark = view()
            try:
                s = apply(s, t)
            except Rejected as err:
                out.rejected = (e.line, step_text(t), str(err))
                out.complete = False
                return out
            except Exception as err:  # noqa: BLE001 - a defect may break a transition: report, go on
                out.rejected = (e.line, step_text(t), f"the transition failed: {type(err).__name__}: {err}")
                out.complete = False
                return out
            out.states.append(s)
            out.lines.append(e.line)
            out.outputs[i] = "\n".join(effect_lines(s.effects, names, cfg.R))
            bad = check_invariants(s)
            if bad:
                out.violated.append((e.line, step_text(t), bad))
        elif e.kind == "show":
            out.outputs[i] = render(view(), e.args or None)
            mark = None
        elif e.kind == "diff":
            now = view()
            out.outputs[i] = render_diff(mark if mark is not None else now, now, e.args or None)
            mark = now
        elif e.kind == "rejects":
            try:
                apply(s, e.step)
            except Rejected as err:
                out.outputs[i] = str(err)
            else:
                out.outputs[i] = f"(not rejected: the model takes {step_text(e.step)})"
    return out


def _compare(case: Case, played: Played) -> list[Failure]:
    fails = []
    for i, e in enumerate(case.script):
        if i not in played.outputs:
            continue
        got = played.outputs[i]
        if e.kind == "step":
            fails += _compare_effects(case, e, got)
            continue
        if e.expected is None:
            fails.append(Failure(case.path, e.line, f"{e.head()} has no expected output yet (kvsm corpus verify --rewrite writes it)", output=True))
            continue
        if got == e.expected:
            continue
        want_lines, got_lines = e.expected.split("\n"), got.split("\n")
        k = next((j for j in range(min(len(want_lines), len(got_lines))) if want_lines[j] != got_lines[j]), min(len(want_lines), len(got_lines)))
        want = want_lines[k] if k < len(want_lines) else "(end of output)"
        have = got_lines[k] if k < len(got_lines) else "(end of output)"
        detail = "\n".join(difflib.unified_diff(want_lines, got_lines, "expected", "renderer", lineterm="", n=2))
        fails.append(Failure(case.path, e.line + 2 + k, f"{e.head()}: expected '{want.strip()}', the renderer prints '{have.strip()}'", detail, True))
    return fails


def _compare_effects(case: Case, e: Entry, got: str) -> list[Failure]:
    """A step's effect lines against what its step asked for ("": nothing)."""
    want = e.expected or ""
    if got == want:
        return []
    want_lines, got_lines = want.split("\n") if want else [], got.split("\n") if got else []
    k = next((j for j in range(min(len(want_lines), len(got_lines))) if want_lines[j] != got_lines[j]), min(len(want_lines), len(got_lines)))
    listed = f"'{want_lines[k]}'" if k < len(want_lines) else "no more effects"
    asked = f"'{got_lines[k]}'" if k < len(got_lines) else "no more"
    detail = "\n".join(difflib.unified_diff(want_lines, got_lines, "expected", "the step's effects", lineterm="", n=2))
    return [Failure(case.path, e.line + 1 + k, f"{e.head()}: the case lists {listed}, the step asks {asked}", detail, True)]


def verify_case(case: Case, tlc: bool = False) -> tuple[list[Failure], dict[int, str] | None]:
    """The failures of one case, and the outputs `--rewrite` would write (None when the
    run that the outputs belong to could not be made)."""
    fails: list[Failure] = []
    path = case.path
    stem = Path(path).stem
    if Path(path).suffix == ".txt" and stem != case.name:
        fails.append(Failure(path, case.lines.get("case", 1), f"case '{case.name}' is in a file named '{stem}.txt' (a case's file is its name)"))
    outputs = None
    if case.bug is None and case.knob is None:
        if case.violations:
            fails.append(Failure(path, case.lines["violation"], "a case without a bug must hold every invariant; name the injected defect that produces this violation on a 'bug' line"))
        played = play(case, case.config)
        outputs = played.outputs
        for line, step, bad in played.violated:
            fails.append(Failure(path, line, f"invariant violated after {step}: " + "; ".join(bad)))
        if played.rejected is not None:
            line, step, reason = played.rejected
            fails.append(Failure(path, line, f"{step} is not taken: {reason}"))
        if played.complete:
            fails += _compare(case, played)
            if tlc and not played.violated:
                fails += _tlc(case, played)
        return fails, outputs
    if case.bug is not None:
        what, head_line = f"with bug {case.bug}", case.lines.get("bug", 1)
        try:
            cfg_bad: Config | None = config_with_bug(case.config, case.bug)
        except ConfigError as e:
            fails.append(Failure(path, head_line, f"bug {case.bug} cannot be run: {e}"))
            cfg_bad = None
        cfg_clean, without = case.config, f"without bug {case.bug}"
    else:
        assert case.knob is not None
        fixed = CASE_KNOBS[case.knob][1]
        what, head_line = f"with {case.knob} = {getattr(case.config, case.knob)!r}", case.lines.get("knob", 1)
        cfg_bad, cfg_clean = case.config, replace(case.config, **{case.knob: fixed})
        without = f"with {case.knob} = {fixed!r}"
    if cfg_bad is not None:
        played = play(case, cfg_bad)
        outputs = played.outputs
        if played.rejected is not None:
            line, step, reason = played.rejected
            fails.append(Failure(path, line, f"{what}, {step} is not taken: {reason}"))
        else:
            last = played.lines[-1] if played.lines else head_line
            early = [(ln, st, bad) for ln, st, bad in played.violated if ln != last]
            for ln, st, bad in early:
                fails.append(Failure(path, ln, f"{what}, an invariant is violated before the last step, after {st}: " + "; ".join(bad)))
            final = next((bad for ln, _, bad in played.violated if ln == last), [])
            if tuple(final) != case.violations:
                fails.append(Failure(
                    path, case.lines.get("violation", head_line),
                    f"{what}, the last step must violate {list(case.violations)}; it violates {final or 'nothing'}",
                ))
            fails += _compare(case, played)
            if tlc and case.knob is not None:
                # the spec has the knob: TLC must accept the steps as a behaviour of it
                fails += _tlc(case, played)
    # the same steps on the correct model: the defect (or the reference's behaviour) is what breaks an invariant
    clean = play(case, cfg_clean)
    for line, step, bad in clean.violated:
        fails.append(Failure(path, line, f"{without} the model still violates an invariant after {step}: " + "; ".join(bad)))
    return fails, outputs


def _validate_fn():
    """TLC's trace validation, wherever the TLC layer keeps it."""
    try:
        from ..tla.validate import validate  # type: ignore[import-not-found]  # kvsm/tla/ as a package
    except ImportError:
        from ..validate import validate
    return validate


def _tlc(case: Case, played: Played) -> list[Failure]:
    """TLC's validate must accept the case's steps as a behaviour of the spec."""
    import tempfile

    path = case.path
    with tempfile.TemporaryDirectory(prefix="kvsm-corpus-") as d:
        log = Path(d) / f"{case.name}.jsonl"
        case_to_log(case, log, with_bug=False)
        try:
            res = _validate_fn()(log)
        except Exception as e:  # noqa: BLE001 - TLC missing or failing is a finding about this case, not a crash
            return [Failure(path, case.lines.get("case", 1), f"TLC could not validate the case: {type(e).__name__}: {e}")]
    if res.ok:
        return []
    if res.first_rejected:
        n = res.first_rejected["step"]
        line = played.lines[n - 1] if 0 < n <= len(played.lines) else 1
        return [Failure(path, line, f"TLC: the spec does not allow step {n}, {res.first_rejected['transition']} (after {res.matched} matched steps)")]
    return [Failure(path, 1, f"TLC did not accept the case: {json.dumps(res.to_json())}")]


def rewritten(case: Case, outputs: dict[int, str]) -> str:
    return format_case(case, outputs)


# ---- cases and logs ------------------------------------------------------------------------------


def case_info(case: Case) -> dict[str, Any]:
    """What a log's header keeps of a case beyond its config and steps (the log's
    `extra.case`): enough to write the case back exactly."""
    info = {
        "name": case.name,
        "shows": case.shows,
        "config_base": case.config_base,
        "bug": case.bug,
        "knob": case.knob,
        "violations": list(case.violations),
        # the script without its steps (null) and without outputs (the renderer rewrites them)
        "script": [None if e.kind == "step" else e.head() for e in case.script],
    }
    if case.groups:  # left out when there are none, so that an ungrouped case's log keeps its bytes
        info["groups"] = list(case.groups)
    return info


def case_to_log(case: Case, path: str | Path, with_bug: bool = True) -> Path:
    """The case as a kvsm log (source and seed from its origin, `hand` by default). With
    `with_bug` and a case that names a bug, the log is the run with the defect."""
    cfg = case.config
    if with_bug and case.bug is not None:
        cfg = config_with_bug(cfg, case.bug)
    s = initial_state(cfg)
    origin = case.origin
    extra = dict(origin.get("extra") or {})
    extra["case"] = case_info(case)
    header = Header(config=cfg, seed=origin.get("seed"), source=origin.get("source", "hand"), initial_digest=s.digest(), extra=extra)
    with LogWriter(path, header) as w:
        for e in case.script:
            if e.kind != "step":
                continue
            try:
                s = apply(s, e.step)
            except Rejected as err:
                raise CaseError(case.path, e.line, f"{step_text(e.step)} is rejected: {err}") from None
            w.write(e.step, s)
    return Path(path)


def _entry(text: str, line: int, path: str) -> Entry:
    # one script line read the way parse_case reads it (a one-line script after a minimal header)
    probe = parse_case(f"case x\nshows x\nconfig\n\n{text}\n", path)
    e = probe.script[0]
    e.line = line
    return e


def log_to_case(
    path: str | Path,
    name: str | None = None,
    shows: str | None = None,
    steps: list[Transition] | None = None,
) -> Case:
    """A log as a case (its expected outputs not yet filled in). A log made from a case
    gives that case back; any other log gives its steps, each followed by `diff`, and a
    final `show`. `steps` replaces the log's transitions (a shrunk run)."""
    p = str(path)
    header, stream = read_log(p)
    transitions = steps if steps is not None else [t for _, _, t, _ in stream]
    cfg = header.config
    bug = None if cfg.bug == "none" else cfg.bug
    if bug is not None:
        cfg = replace(cfg, bug="none")
    extra = dict(header.extra)
    info = extra.pop("case", None)
    origin = {"source": header.source, "seed": header.seed, "extra": extra}
    if origin == ORIGIN_DEFAULT:
        origin = dict(ORIGIN_DEFAULT)
    if isinstance(info, dict) and steps is None:
        script: list[Entry] = []
        todo = iter(transitions)
        for k, text in enumerate(info.get("script", [])):
            if text is None:
                t = next(todo, None)
                if t is None:
                    raise CaseError(p, 0, "the log has fewer transitions than its case's script has steps")
                script.append(Entry("step", 0, step=t))
            else:
                script.append(_entry(text, 0, p))
        if next(todo, None) is not None:
            raise CaseError(p, 0, "the log has more transitions than its case's script has steps")
        return Case(
            path=p, name=name or info["name"], shows=shows or info["shows"], config=cfg,
            config_base=info.get("config_base"), bug=info.get("bug") or bug, knob=info.get("knob"),
            violations=tuple(info.get("violations", ())), origin=origin, script=script,
            groups=tuple(info.get("groups", ())),
        )
    script = []
    for t in transitions:
        script.append(Entry("step", 0, step=t))
        script.append(Entry("diff", 0))
    script.append(Entry("show", 0))
    return Case(
        path=p, name=name or Path(p).stem, shows=shows or f"the {len(transitions)} steps of {Path(p).name}",
        config=cfg, config_base=best_base(cfg), bug=bug, origin=origin, script=script,
    )


def case_from_log(
    log: str | Path,
    name: str,
    dest: str | Path,
    bug: str | None = None,
    shows: str | None = None,
    seconds: float = 120.0,
    knob: str | None = None,
) -> tuple[str, list[str]]:
    """`kvsm corpus add`: the text of the case a log becomes, and notes for a person. A
    failing log is shrunk first (kvsm.corpus.shrink); its steps are each followed by a
    `diff`, a refused last step becomes a `rejects`, and a final `show` ends it. A log
    whose digests the model does not reproduce is refused (CaseError): a case keeps
    steps, not digests, so that divergence would be lost."""
    p = str(log)
    header, stream = read_log(p)
    transitions = [t for _, _, t, _ in stream]
    case = log_to_case(p, name=name, shows=shows)
    case.path = str(dest)
    if bug is not None:
        case.bug = bug
    if knob is not None:
        if knob not in CASE_KNOBS or getattr(case.config, knob) not in knob_readings(knob):
            raise CaseError(p, 0, f"--knob {knob}: the log's config must have that fidelity knob at the reference's value (or another reading of it)")
        case.knob = knob
    cfg = case.config if case.bug is None else config_with_bug(case.config, case.bug)
    replayed = run_steps(cfg, ((ln, t, d) for ln, _, t, d in read_log(p)[1]), p, header.initial_digest)
    stop = replayed.stopped
    if stop is not None and not stop["reason"].startswith("rejected:"):
        raise CaseError(p, stop["line"], f"{stop['reason']}; a case holds steps, not digests, so replaying it would give the model's digests and lose this divergence")
    notes: list[str] = []
    shrunk = shrink(cfg, transitions, seconds=seconds)
    if shrunk is not None:
        f = shrunk.failure
        steps = shrunk.steps
        kept = steps[:-1] if f.kind == "rejected" else steps
        case.script = [e for t in kept for e in (Entry("step", 0, step=t), Entry("diff", 0))]
        if f.kind == "rejected":
            case.script.append(Entry("rejects", 0, step=steps[-1]))
        case.script.append(Entry("show", 0))
        if shows is None:
            case.shows = f"{len(kept)} steps (shrunk from {shrunk.original} of {Path(p).name}) after which {f.describe()}"
        notes.append(f"shrunk {shrunk.original} steps to {len(steps)}" + ("" if shrunk.minimal else f" (the {seconds:.0f} s budget ran out: not minimal)"))
        if f.kind == "violation":
            if case.bug is not None or case.knob is not None:
                case.violations = f.messages
            else:
                notes.append(
                    "the model itself violates an invariant here: the case says it must not, so "
                    "`kvsm corpus verify` fails on it until the model is fixed"
                )
    return rewritten(case, play(case, cfg).outputs), notes


# ---- a log or a case stepped through -------------------------------------------------------------


def read_run(path: str | Path) -> Run:
    """Step through a log (JSONL) or a corpus case (`.txt`: its steps; a `rejects`
    directive applies nothing)."""
    p = str(path)
    if not _is_case(p):
        return read_log_run(p)
    case = read_case(p)
    run = run_steps(case.config, ((e.line, e.step, None) for e in case.script if e.kind == "step"), p)
    run.about.append(f"case {case.name}: {' '.join(case.shows.split())}")
    return run


def _is_case(path: str) -> bool:
    if path.endswith(".jsonl"):
        return False
    if path.endswith(".txt"):
        return True
    try:
        with open(path, "rb") as f:
            return not f.read(1).startswith(b"{")
    except OSError:
        return False
