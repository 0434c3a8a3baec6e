"""Running TLC: the one place in kvsm that starts it.

TLC runs on Java 17 as a subprocess in a temporary directory of its own, with its own
`-metadir`, so that concurrent runs never share a states directory and nothing is
written into `spec/`. Where Java, the jar and the spec are is `kvsm.tla.location`'s;
reading what TLC prints is `kvsm.tla.output`'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .errors import TLCError
from .location import find_jar, find_java, spec_dir
from .models import ModelConfig
from .output import Violation, completed, last_progress, parse_output, read_counts


class TLCTimeout(TLCError):
    """TLC ran past its time limit; what it printed so far (its progress lines) and the
    process's CPU seconds and peak resident set come with it."""

    def __init__(self, message: str, output: str, usage: tuple[float, int] | None) -> None:
        super().__init__(message)
        self.output = output
        self.usage = usage

    def progress(self) -> dict[str, int] | None:
        """The last progress TLC reported: depth, states generated, distinct, queued."""
        return last_progress(self.output)


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


def graph_workers() -> int:
    """TLC's worker threads for a run whose result does not depend on their number: a
    complete graph dump (its states and edges are sets) or a run expected to hold (its
    state counts are TLC's distinct states). One per CPU. A run that may report a
    violation keeps one worker unless asked otherwise, so that its counterexample is
    the same on every machine (with several workers, which of two violating states at
    the same depth is reported first depends on the threads' timing), and so does a
    dump under a VIEW (which state of a class TLC keeps is the first it reaches)."""
    return max(1, os.cpu_count() or 1)


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
        cfg_path = _fill_workdir(work, sdir, module, cfg, extra_modules or {})
        options = {"workers": workers, "deadlock": deadlock, "view": view, "dump_dot": dump_dot, "simulate": simulate}
        cmd = _command(java, jar, jvm, work, cfg_path, module, **options)
        returncode, out, usage = _run(cmd, work, timeout)
        if returncode is None:
            raise TLCTimeout(f"TLC on {module.name} ran past its {timeout}s limit", out, usage)
    seconds = time.perf_counter() - t0
    violation, fatal = parse_output(out, view)
    if violation is None and (fatal is not None or not completed(out, simulate is not None)):
        tail = "\n".join(out.strip().splitlines()[-25:])
        raise TLCError(f"TLC could not check {module.name} (exit {returncode}): {fatal or 'no result'}\n{tail}")
    return TLCResult(
        **read_counts(out),
        seconds=seconds,
        exit_code=returncode,
        violation=violation,
        output=out if keep_output else "",
        cpu_seconds=usage[0] if usage else None,
        peak_rss=usage[1] if usage else None,
        # TLC does not say how many behaviours a simulation went through before a violation
        traces=simulate["num"] if simulate is not None and violation is None else None,
    )


def _fill_workdir(work: Path, sdir: Path, module: Path, cfg: Path | ModelConfig, extra_modules: dict[str, str]) -> Path:
    """Copy the spec's modules, `module` and the `extra_modules` (name -> text) into
    `work` and write the model config there; returns the config's path."""
    for f in sdir.glob("*.tla"):
        shutil.copy(f, work / f.name)
    if module.stem not in extra_modules and module.parent.resolve() != sdir.resolve():
        shutil.copy(module, work / module.name)
    for name, text in extra_modules.items():
        (work / f"{name}.tla").write_text(text)
    cfg_path = work / f"{module.stem}.kvsm.cfg"
    cfg_path.write_text(cfg.text() if isinstance(cfg, ModelConfig) else Path(cfg).read_text())
    return cfg_path


def _command(
    java: str,
    jar: Path,
    jvm: Sequence[str],
    work: Path,
    cfg_path: Path,
    module: Path,
    *,
    workers: int,
    deadlock: bool,
    view: bool,
    dump_dot: Path | None,
    simulate: dict[str, int] | None,
) -> list[str]:
    """The command line that runs TLC in `work` (see `run_tlc` for the options)."""
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
    return cmd


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
