"""The corpus format: a case as text (docs/corpus.md), read and written without running
anything.

A case is a header, a blank line, and a script:

    case reload-anchor-changed
    shows A reload whose anchor leaves the tree while it is in flight is
      aborted at admit: nothing is inserted and its reservation is freed.
    config l3
      name = "l3-three"
      max_requests = 3

    # [1, 2] is spilled to both disks
    Arrive rid=0 tokens=[1,2] out_pages=0
    Match rid=0
    show tree
    ----
    tree
      #0  root
      ...

The script's lines are steps in the log's transition syntax (`Insert rid=0`,
`WriteDone r=1`, `SpillDone r=0 ok=true`, kvsm.steptext), each followed by its
effects indented by two spaces (what the step asks the world to do, one line per
batch, kvsm.render.effects: `  fill p0(r0)←[1] p1(r1)←[1,2]`), comments (`#`), blank
lines, and the directives `show [SECTION...]`, `diff [SECTION...]` and `rejects
STEP`, each followed by a `----` line and its expected output up to the next blank
line (or the end). A step's effect lines and a directive's output are what the
renderer printed; `kvsm corpus verify --rewrite` writes them.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from ..config import BUGS, CASE_KNOBS, Config, ConfigError, builtin_names, knob_readings, load_config
from ..log import json_error
from ..render import SECTIONS
from ..steptext import StepError, step_text
from ..steptext import parse_step as read_step
from ..transitions import Transition

DIRECTIVES = ("show", "diff", "rejects")
SEPARATOR = "----"
EFFECT_INDENT = "  "  # a step's effect lines, under it
ORIGIN_DEFAULT = {"source": "hand", "seed": None, "extra": {}}


class CaseError(ValueError):
    """A case that cannot be read; `line` is 1-based (0: the file as a whole)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path, self.line, self.reason = path, line, reason


# ---- steps -----------------------------------------------------------------------------------


def parse_step(text: str, path: str = "<step>", line: int = 0) -> Transition:
    """A step line -> Transition; the errors say which argument is wrong and why."""
    try:
        return read_step(text)
    except StepError as e:
        raise CaseError(path, line, str(e)) from None


# ---- configs ----------------------------------------------------------------------------------


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


CONFIG_FIELDS = tuple(f.name for f in fields(Config) if f.name != "bug")


def base_config(base: str | None) -> Config:
    return load_config(base) if base is not None else Config()


def overrides(cfg: Config, base: str | None) -> dict[str, Any]:
    """The fields of `cfg` (as JSON) that differ from the base config, in field order."""
    want, have = cfg.to_json(all_fields=True), base_config(base).to_json(all_fields=True)
    return {k: want[k] for k in CONFIG_FIELDS if want[k] != have[k]}


def best_base(cfg: Config) -> str | None:
    """The built-in config (or None: the defaults) from which `cfg` differs in fewest
    fields; a tie goes to the built-in named like the config."""
    options: list[str | None] = [None, *builtin_names()]
    return min(options, key=lambda b: (len(overrides(cfg, b)), b != cfg.name, b or ""))


def config_lines(cfg: Config, base: str | None) -> list[str]:
    lines = ["config" + (f" {base}" if base is not None else "")]
    for k, v in overrides(cfg, base).items():
        if k == "prompts" and len(v) > 1:
            lines.append("  prompts = [")
            lines += [f"    {_toml(p)}," for p in v]
            lines.append("  ]")
        else:
            lines.append(f"  {k} = {_toml(v)}")
    return lines


def parse_config(base: str | None, toml_text: str, where: str) -> Config:
    """The base config (a built-in name, or the defaults) with the TOML's fields over it."""
    try:
        data = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    if "bug" in data:
        raise ConfigError(f"{where}: a case names its injected defect on a line 'bug NAME', not in its config")
    unknown = [k for k in data if k not in CONFIG_FIELDS]
    if unknown:
        raise ConfigError(f"{where}: unknown field '{unknown[0]}'")
    merged = base_config(base).to_json()
    merged.update(data)
    return Config.from_json(merged, where=where)


# ---- the case ----------------------------------------------------------------------------------


@dataclass
class Entry:
    """A line of the script: `step`, `comment`, `blank`, or a directive (`show`, `diff`,
    `rejects`) with its arguments and expected output (None: no `----` block yet)."""

    kind: str
    line: int
    text: str = ""  # a comment's or blank line's text
    step: Transition | None = None  # a step, or the step a `rejects` names
    args: tuple[str, ...] = ()  # a show or diff's section names
    # a directive's expected output; a step's expected effect lines ("": none)
    expected: str | None = None

    def head(self) -> str:
        """The line as written (without its output)."""
        if self.kind == "step":
            return step_text(self.step)
        if self.kind in ("comment", "blank"):
            return self.text
        if self.kind == "rejects":
            return "rejects " + step_text(self.step)
        return " ".join((self.kind, *self.args))


@dataclass
class Case:
    path: str
    name: str
    shows: str
    config: Config  # without the bug
    config_base: str | None
    bug: str | None = None
    # a fidelity knob at its reference value in `config` whose behaviour the violation is
    # (docs/findings.md); at its fixed value the steps violate nothing
    knob: str | None = None
    violations: tuple[str, ...] = ()
    origin: dict[str, Any] = field(default_factory=lambda: dict(ORIGIN_DEFAULT))
    groups: tuple[str, ...] = ()  # the kinds of bug it belongs to (`group use-after-free`), for finding cases by kind
    script: list[Entry] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # header field -> its line

    @property
    def steps(self) -> list[Transition]:
        return [e.step for e in self.script if e.kind == "step"]


def _header_lines(case: Case) -> list[str]:
    out = [f"case {case.name}"]
    if case.groups:
        out.append("group " + ", ".join(case.groups))
    shows = case.shows.split("\n")
    out.append(f"shows {shows[0]}")
    out += [f"  {x}" for x in shows[1:]]
    out += config_lines(case.config, case.config_base)
    if case.bug is not None:
        out.append(f"bug {case.bug}")
    if case.knob is not None:
        out.append(f"knob {case.knob}")
    out += [f"violation {v}" for v in case.violations]
    if case.origin != ORIGIN_DEFAULT:
        out.append("origin " + json.dumps(case.origin, separators=(", ", ": ")))
    return out


def format_case(case: Case, outputs: dict[int, str] | None = None) -> str:
    """The case as text. `outputs` (script index -> output) replaces expected outputs,
    which is how `--rewrite` writes what the renderer printed."""
    lines = _header_lines(case) + [""]
    n = len(case.script)
    for i, e in enumerate(case.script):
        lines.append(e.head())
        if e.kind == "step":
            out = outputs.get(i, e.expected) if outputs is not None else e.expected
            if out:
                lines += [EFFECT_INDENT + x for x in out.split("\n")]
        elif e.kind in DIRECTIVES:
            out = outputs.get(i, e.expected) if outputs is not None else e.expected
            if out is not None:
                lines.append(SEPARATOR)
                if out:
                    lines += out.split("\n")
                if i + 1 < n:
                    lines.append("")  # ends the output block
    return "\n".join(lines) + "\n"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_GROUP = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# What `kvsm corpus verify` reports the cases without a `group` line under.
UNGROUPED = "ungrouped"


def _json_header(first: str) -> str | None:
    """What a file whose first line is JSON is instead of a case: a kvsm transition log
    (its header has `kvsm_log`) or some other JSON; None when the line is not JSON."""
    if not first.lstrip().startswith("{"):
        return None
    try:
        d = json.loads(first)
    except json.JSONDecodeError:
        return None
    if isinstance(d, dict) and "kvsm_log" in d:
        return "a kvsm transition log, not a corpus case (kvsm corpus add LOG --name NAME makes a case of it)"
    return "JSON, not a corpus case (a case is text: docs/corpus.md)"


def _shown(text: str, limit: int = 40) -> str:
    """`text` cut to `limit` characters for a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_case(text: str, path: str = "<case>") -> Case:
    lines = text.split("\n")
    what = _json_header(lines[0])
    if what is not None:
        raise CaseError(path, 0, what)
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    hdr: dict[str, Any] = {}
    at: dict[str, int] = {}
    violations: list[str] = []

    def need(cond: bool, line: int, reason: str) -> None:
        _need(path, cond, line, reason)

    def block(start: int) -> tuple[list[str], int]:
        """The indented lines after line `start` (0-based), dedented by two spaces."""
        out, j = [], start + 1
        while j < len(lines) and lines[j].startswith("  "):
            out.append(lines[j][2:])
            j += 1
        return out, j

    while i < len(lines) and lines[i].strip():
        raw = lines[i]
        ln = i + 1
        key, _, rest = raw.partition(" ")
        rest = rest.strip()
        need(not raw.startswith(" "), ln, "an indented line here continues nothing (the header's fields start in column 1)")
        need(key not in hdr or key == "violation", ln, f"header field '{key}' is given twice")
        if key == "case":
            need(bool(_NAME.fullmatch(rest)), ln, f"a case name is letters, digits, '-', '_' and '.', got '{rest}'")
            hdr["case"], at["case"] = rest, ln
            i += 1
        elif key == "group":
            names = [g.strip() for g in rest.split(",")]
            need(all(_GROUP.fullmatch(g) for g in names), ln, f"a group is lower-case words joined by '-' (use-after-free), names separated by ', '; got '{rest}'")
            need(len(set(names)) == len(names), ln, f"a group is named twice in '{rest}'")
            hdr["group"], at["group"] = tuple(names), ln
            i += 1
        elif key == "shows":
            more, i = block(i)
            hdr["shows"], at["shows"] = "\n".join([rest, *more]), ln
            need(bool(rest), ln, "'shows' needs a sentence saying what the case shows")
        elif key == "config":
            body, i = block(i)
            base = rest or None
            need(base is None or base in builtin_names(), ln, f"'{base}' is not a built-in config ({', '.join(builtin_names())}); write the fields indented below 'config'")
            try:
                hdr["config"] = parse_config(base, "\n".join(body), f"{path}:{ln}")
            except ConfigError as e:
                raise CaseError(path, ln, str(e).removeprefix(f"{path}:{ln}: ")) from None
            hdr["config_base"], at["config"] = base, ln
        elif key == "bug":
            need(rest in BUGS and rest != "none", ln, f"'{rest}' is not an injected defect ({', '.join(b for b in BUGS if b != 'none')})")
            hdr["bug"], at["bug"] = rest, ln
            i += 1
        elif key == "knob":
            need(rest in CASE_KNOBS, ln, f"'{rest}' is not a fidelity knob ({', '.join(CASE_KNOBS)})")
            need("bug" not in hdr, ln, "a case names an injected defect or a knob, not both")
            hdr["knob"], at["knob"] = rest, ln
            i += 1
        elif key == "violation":
            need(bool(rest), ln, "'violation' needs the invariant's message")
            violations.append(rest)
            at.setdefault("violation", ln)
            i += 1
        elif key == "origin":
            try:
                origin = json.loads(rest)
            except json.JSONDecodeError as e:
                raise CaseError(path, ln, f"origin is not valid JSON: {json_error(e)}") from None
            need(isinstance(origin, dict) and set(origin) == set(ORIGIN_DEFAULT), ln, "origin is {\"source\": ..., \"seed\": ..., \"extra\": {...}}")
            hdr["origin"], at["origin"] = origin, ln
            i += 1
        else:
            raise CaseError(path, ln, f"unknown header field '{_shown(key)}' (case, group, shows, config, bug, knob, violation, origin)")
    for k in ("case", "shows", "config"):
        need(k in hdr, 1, f"the header has no '{k}' line")
    need("bug" not in hdr or "knob" not in hdr, at.get("bug", 1), "a case names an injected defect or a knob, not both")
    if "knob" in hdr:
        ref = CASE_KNOBS[hdr["knob"]][0]
        got = getattr(hdr["config"], hdr["knob"])
        readings = knob_readings(hdr["knob"])
        other = f" or another reading of it ({', '.join(map(repr, readings[1:]))})" if len(readings) > 1 else ""
        need(got in readings, at["knob"], f"knob {hdr['knob']}: the config must set it to the reference's value {ref!r}{other}, it has {got!r}")
    case = Case(
        path=path,
        name=hdr["case"],
        shows=hdr["shows"],
        config=hdr["config"],
        config_base=hdr["config_base"],
        bug=hdr.get("bug"),
        knob=hdr.get("knob"),
        violations=tuple(violations),
        origin=hdr.get("origin", dict(ORIGIN_DEFAULT)),
        groups=hdr.get("group", ()),
        lines=at,
    )
    case.script = _script(lines, i + 1, path)  # after the blank line that ends the header
    return case


def _need(path: str, cond: bool, line: int, reason: str) -> None:
    if not cond:
        raise CaseError(path, line, reason)


def _script(lines: list[str], i: int, path: str) -> list[Entry]:
    """The script from line index `i` on: its steps (each with its effect lines), comments,
    blank lines and directives (each with its output)."""
    script: list[Entry] = []
    while i < len(lines):
        raw = lines[i]
        ln = i + 1
        s = raw.strip()
        if not s:
            script.append(Entry("blank", ln, text=""))
            i += 1
            continue
        if s.startswith("#"):
            script.append(Entry("comment", ln, text=raw))
            i += 1
            continue
        _need(path, not raw.startswith(EFFECT_INDENT), ln, "an indented line here is under no step (a step's effect lines follow it directly)")
        _need(path, s != SEPARATOR, ln, "a ---- line must follow a show, diff or rejects directive")
        word, _, rest = s.partition(" ")
        if word in DIRECTIVES:
            if word == "rejects":
                _need(path, bool(rest), ln, "rejects needs the step it expects the model to refuse")
                e = Entry("rejects", ln, step=parse_step(rest, path, ln))
            else:
                args = tuple(rest.split())
                bad = [a for a in args if a not in SECTIONS]
                _need(path, not bad, ln, f"{word}: unknown section '{bad[0] if bad else ''}' (sections: {', '.join(SECTIONS)})")
                e = Entry(word, ln, args=args)
            i += 1
            if i < len(lines) and lines[i] == SEPARATOR:
                out: list[str] = []
                i += 1
                while i < len(lines) and lines[i] != "":
                    out.append(lines[i])
                    i += 1
                if i < len(lines):
                    i += 1  # the blank line that ends the output
                e.expected = "\n".join(out)
            script.append(e)
            continue
        e = Entry("step", ln, step=parse_step(s, path, ln))
        i += 1
        effects: list[str] = []
        while i < len(lines) and lines[i].startswith(EFFECT_INDENT) and lines[i].strip():
            effects.append(lines[i][len(EFFECT_INDENT):])
            i += 1
        e.expected = "\n".join(effects)
        script.append(e)
    return script


def read_case(path: str) -> Case:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CaseError(path, 0, f"cannot open: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CaseError(path, 0, f"not UTF-8 text (byte {e.start + 1})") from None
    return parse_case(text, path)
