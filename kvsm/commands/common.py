"""What every `kvsm` command shares: the two consoles, the one error style and exit-code
convention, progress (a bar on a terminal, a line every few seconds elsewhere), JSON
output, loading a config or exiting with its error, and the command group that turns
usage errors, SIGINT, SIGTERM and running out of memory into one error line and a
documented exit code (README, "Errors and exit codes"). Not a command module itself
(it has no `register`; `kvsm/cli.py` registers the others).

A command adopts all of it by printing through `console`/`err`, reporting with
`print_error`/`fail`, and showing progress with `progress()`; the group (`KvsmGroup`,
the `kvsm` app's class) does the rest for every command registered on the app.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Iterator, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from ..config import BUGS, Config, ConfigError, load_config

try:  # typer 0.2x carries its own click
    from typer._click import exceptions as _cx
    from typer._click.core import Context as _Context
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import Context as _Context  # type: ignore[assignment]
    from click import exceptions as _cx  # type: ignore[no-redef]

_UsageError = _cx.UsageError
_ClickException = _cx.ClickException
_NoArgsIsHelp: type = getattr(_cx, "NoArgsIsHelpError", type("_Never", (Exception,), {}))

# ---- exit codes ---------------------------------------------------------------------------------
# One meaning per code, for every command (README, "Errors and exit codes").
EXIT_OK = 0  # done, and what was checked holds
EXIT_FAILED = 1  # the command ran and its verdict is no: a mismatch, a violation, a failed check
EXIT_INPUT = 2  # an input or option cannot be used (usage, file, format, bound); nothing was run or kept
EXIT_ENVIRONMENT = 3  # the machine could not do it: a missing tool, out of memory, a crashed process
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


def _console(stderr: bool) -> Console:
    """A console that never wraps lines when its stream is not a terminal: a one-line error
    stays one line in a log file or a pipe, and a table keeps its rows on one line; and
    none that reads `:x:` in a message (a path, an option value) as an emoji code."""
    c = Console(stderr=stderr, emoji=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=100_000, soft_wrap=True, emoji=False)
    return c


console = _console(stderr=False)
err = _console(stderr=True)


def emit_json(obj: Any) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def print_error(message: str, label: str = "error") -> None:
    """`label: message` on one line of stderr, the label in red; the message is plain text
    (brackets in paths are not markup) and is never wrapped. The message names the input,
    the place and the reason: `PATH:LINE: reason`, `--option VALUE: reason`."""
    err.print(f"[red]{label}:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    """`warning: message` on one line of stderr (the run goes on)."""
    err.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_INPUT, label: str = "error") -> typer.Exit:
    """Print the error line and return the exit to raise: `raise fail("...")`."""
    print_error(message, label)
    return typer.Exit(code)


EMPTY_PATH = "is empty, which would be the current directory; give a path"


def output_path(text: Any) -> Path:
    """The parser of every option that names an output (a file or a directory): `''`
    is refused (a usage error, exit 2), since `Path('')` is `.`, the current directory,
    which `kvsm sweep -o ''` would then fill. A default (already a Path) passes."""
    if isinstance(text, Path):
        return text
    if not str(text):
        raise typer.BadParameter(EMPTY_PATH)
    return Path(text)


def output_option(default: Any, *names: str, help: str, hidden: bool = False) -> Any:
    """An option that names an output file or directory: a path, never empty (`output_path`)."""
    return typer.Option(default, *names, help=help, parser=output_path, metavar="PATH", hidden=hidden)


def alias_value(new: str, value: Any, default: Any, old: str, old_value: Any) -> Any:
    """The value of an option that may be given under its old name `old` (a hidden option,
    still accepted without a word): `old_value` when given, else `value`. Both given (the
    new one away from its default) is a usage error naming both."""
    if old_value is None:
        return value
    if value != default:
        raise fail(f"give {new} or {old} (its old name), not both")
    return old_value


BUG_HELP = f"inject a defect (docs/defects.md): {', '.join(b for b in BUGS if b != 'none')}"


def bug_option() -> Any:
    """The `--bug NAME` option every command that runs the model takes."""
    return typer.Option(None, "--bug", help=BUG_HELP, metavar="NAME")


def with_bug(cfg: Config, bug: str | None) -> Config:
    """`cfg` with the injected defect `bug` (None: as it is); an unknown or unimplemented
    name is a ConfigError."""
    return cfg if bug is None else cfg.with_bug(bug, f"--bug {bug}")


def bug_or_exit(bug: str | None) -> str | None:
    """`bug` when it names a defect the model has (or is None); else an error line and exit 2."""
    try:
        with_bug(Config(), bug)
    except ConfigError as e:
        raise fail(str(e)) from None
    return bug


def config_or_exit(name: str, bug: str | None = None) -> Config:
    """The config `name` (built-in or a TOML path), with the injected defect `bug` if one
    is named; a bad one is an error line and exit 2."""
    try:
        return with_bug(load_config(name), bug)
    except ConfigError as e:
        raise fail(str(e)) from None


def warn_old_log(path: Any) -> None:
    """Warn when the log at `path` is of an older format (read, but without its end line a
    cut at a line boundary goes unnoticed). Nothing when it cannot be read: the reader
    that follows reports why."""
    from ..log import old_format_note, peek_header  # noqa: PLC0415

    header = peek_header(path)
    note = old_format_note(path, header) if header is not None else None
    if note:
        warn(note)


# ---- progress -----------------------------------------------------------------------------------


PROGRESS_SECONDS = "KVSM_PROGRESS_SECONDS"
PROGRESS_SECONDS_DEFAULT = 5.0


class EnvironmentValueError(ValueError):
    """An environment variable kvsm reads holds a value it cannot use; the message names
    the variable, the value and the reason."""


def progress_interval() -> float:
    """Seconds between two progress lines when stderr is not a terminal
    ($KVSM_PROGRESS_SECONDS, default 5; unset or empty: the default); a value that is
    not a finite number >= 0 is an `EnvironmentValueError`."""
    text = os.environ.get(PROGRESS_SECONDS, "")
    if not text.strip():
        return PROGRESS_SECONDS_DEFAULT
    place = f"environment variable {PROGRESS_SECONDS}={text!r}"
    want = "give the seconds between two progress lines, a number >= 0 such as 5 or 0.5"
    try:
        value = float(text)
    except ValueError:
        raise EnvironmentValueError(f"{place}: not a number; {want}") from None
    if not math.isfinite(value):
        raise EnvironmentValueError(f"{place}: not a finite number; {want}")
    if value < 0:
        raise EnvironmentValueError(f"{place}: negative; {want}")
    return value


def check_environment() -> None:
    """Every environment variable kvsm reads itself, checked before a command runs (an
    `EnvironmentValueError` for the first bad one)."""
    progress_interval()


class LineProgress:
    """Progress for a stderr that is not a terminal (a CI log, a pipe): one plain line,
    `kvsm: <task> <done>/<total> (<pct>%), <elapsed>s`, at most every `interval` seconds,
    none for a run shorter than that. The subset of rich's `Progress` the commands use."""

    def __init__(self, interval: float | None = None, stream: Any = None) -> None:
        self.interval = progress_interval() if interval is None else interval
        self.stream = stream
        self._tasks: dict[int, dict[str, Any]] = {}
        self._t0 = time.monotonic()
        self._last = self._t0

    def __enter__(self) -> "LineProgress":
        self._t0 = self._last = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        tid = len(self._tasks)
        self._tasks[tid] = {"description": description, "total": total, "completed": 0}
        return tid

    def update(self, task: int, completed: float | None = None, total: float | None = None, description: str | None = None, advance: float | None = None, **_: Any) -> None:
        t = self._tasks[task]
        if total is not None:
            t["total"] = total
        if description is not None:
            t["description"] = description
        if completed is not None:
            t["completed"] = completed
        if advance is not None:
            t["completed"] += advance
        self._maybe_print(t)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def _maybe_print(self, t: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        done, total = int(t["completed"]), t["total"]
        count = f"{done}/{int(total)} ({100 * done / total:.0f}%)" if total else f"{done}"
        line = f"kvsm: {t['description']} {count}, {now - self._t0:.0f}s"
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(line + "\n")
        stream.flush()


def progress(label: str = "{task.description}") -> Progress | LineProgress:
    """A progress bar on stderr when it is a terminal; otherwise a progress line on stderr
    at most every few seconds (`LineProgress`), so long runs in CI logs are not silent."""
    if not err.is_terminal:
        return LineProgress()
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )


@contextmanager
def busy(description: str) -> Iterator[None]:
    """A step with no count of its own (TLC running, rank processes starting, a viewer
    being built), so that it is never silent: a spinner with the elapsed time on a
    terminal, otherwise a line `kvsm: <description>, <elapsed>s` every few seconds
    ($KVSM_PROGRESS_SECONDS; none for a step shorter than that, as `progress`)."""
    if err.is_terminal:
        with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True) as bar:
            bar.add_task(description, total=None)
            yield
        return
    done = threading.Event()
    interval, t0 = progress_interval(), time.monotonic()

    def tick() -> None:
        while interval > 0 and not done.wait(interval):
            sys.stderr.write(f"kvsm: {description}, {time.monotonic() - t0:.0f}s\n")
            sys.stderr.flush()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


# ---- interruption -------------------------------------------------------------------------------


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, so that no `except Exception` swallows
    it: every `with` block and `finally` on the way out runs, and the atomic writers
    (`LogWriter`, the report's files) remove what they had not finished."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


class _Handlers:
    """SIGINT and SIGTERM raise `Interrupted` while a command runs (the main thread only;
    restored afterwards, so a test process that calls the app keeps its own handlers)."""

    def __enter__(self) -> "_Handlers":
        self.saved: dict[int, Any] = {}
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                self.saved[s] = signal.signal(s, _raise_interrupted)
            except ValueError:  # not the main thread: leave the defaults
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.saved.items():
            signal.signal(s, h)


# ---- the command group --------------------------------------------------------------------------


def _usage_message(e: Any) -> str:
    ctx = e.ctx
    msg = " ".join(e.format_message().split())
    if ctx is None:
        return msg
    return f"{ctx.command_path}: {msg} (see '{ctx.command_path} --help')"


class KvsmGroup(TyperGroup):
    """The `kvsm` app's group: every command runs inside it, so each gets the same
    treatment of what goes wrong around it: a usage error (a bad option value, a missing
    argument) is one error line and exit 2; SIGINT and SIGTERM unwind the command (its
    unfinished outputs are removed on the way) and exit 130 and 143; running out of
    memory is one error line and exit 3."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        code: Any
        _flags_without_type(self)
        try:
            check_environment()  # before anything is parsed or runs: a bad value is refused, not taken
            with _Handlers():
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except EnvironmentValueError as e:
            print_error(str(e))
            code = EXIT_INPUT
        except _NoArgsIsHelp as e:
            # the help is printed; no args is the usage error it always was
            code = getattr(e, "exit_code", EXIT_INPUT)
        except _UsageError as e:
            print_error(_usage_message(e))
            code = EXIT_INPUT
        except _ClickException as e:
            print_error(" ".join(e.format_message().split()))
            code = e.exit_code
        except Interrupted as e:
            print_error(f"stopped by {e}; unfinished outputs were removed", "interrupted")
            code = EXIT_SIGINT if e.signum == signal.SIGINT else EXIT_SIGTERM
        except typer.Abort:
            print_error("aborted", "interrupted")
            code = EXIT_SIGINT
        except MemoryError:
            print_error(
                "out of memory: the run needs more memory than this machine gave it; "
                "make it smaller (fewer requests, ranks or pages) or give it more memory"
            )
            code = EXIT_ENVIRONMENT
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


def _flags_without_type(cmd: Any) -> None:
    """A flag (`--json`, `--check`, `--help`) takes no value: its help shows no
    `<bool>` type beside it (typer's rich help would), for `cmd` and every command
    under it."""
    for sub in [cmd, *getattr(cmd, "commands", {}).values()]:
        helper = sub.get_help_option(_Context(sub)) if hasattr(sub, "get_help_option") else None
        for p in [*sub.params, *([helper] if helper is not None else [])]:
            if getattr(p, "is_flag", False) and not getattr(p, "count", False) and p.metavar is None:
                p.metavar = ""
        if sub is not cmd and getattr(sub, "commands", None):
            _flags_without_type(sub)


# ---- help texts ---------------------------------------------------------------------------------


def _unwrap(text: str | None) -> str | None:
    """Join the lines of each paragraph: typer's rich help keeps a docstring's line
    breaks, which break sentences in the middle."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def unwrap_help(app: typer.Typer) -> None:
    """Unwrap the help of every command and group registered on `app` (and its sub-apps),
    whoever registered them."""
    for ci in app.registered_commands:
        ci.help = _unwrap(ci.help or (inspect.getdoc(ci.callback) if ci.callback else None))
    for gi in app.registered_groups:
        if gi.help:
            gi.help = _unwrap(gi.help)
        if gi.typer_instance is not None:
            info = gi.typer_instance.info
            if isinstance(info.help, str):
                info.help = _unwrap(info.help)
            unwrap_help(gi.typer_instance)

