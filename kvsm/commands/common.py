"""What every `kvsm` command prints with: the two consoles, the one progress bar style,
JSON output, error lines, and loading a config or exiting with its error. Not a command
module itself (`register_all` skips it)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..config import BUGS, Config, ConfigError, load_config

console = Console()
err = Console(stderr=True)


def progress(label: str = "{task.description}") -> Progress:
    """A progress bar on stderr, only when it is a terminal (never in pipes or CI logs)."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def emit_json(obj: Any) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(obj) + "\n")


def print_error(message: str, label: str = "error") -> None:
    """`label: message` on stderr, the label in red; the message is plain text (brackets
    in paths are not markup) and is never wrapped."""
    err.print(f"[red]{label}:[/red] {escape(message)}", highlight=False, soft_wrap=True)


BUG_HELP = f"inject a defect (docs/defects.md): {', '.join(b for b in BUGS if b != 'none')}"


def bug_option() -> Any:
    """The `--bug NAME` option every command that runs the model takes."""
    return typer.Option(None, "--bug", help=BUG_HELP, metavar="NAME")


def with_bug(cfg: Config, bug: str | None) -> Config:
    """`cfg` with the injected defect `bug` (None: as it is); an unknown or unimplemented
    name is a ConfigError."""
    if bug is None or bug == cfg.bug:
        return cfg
    return Config.from_json({**cfg.to_json(), "bug": bug}, where=f"--bug {bug}")


def bug_or_exit(bug: str | None) -> str | None:
    """`bug` when it names a defect the model has (or is None); else an error line and exit 2."""
    try:
        with_bug(Config(), bug)
    except ConfigError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    return bug


def config_or_exit(name: str, bug: str | None = None) -> Config:
    """The config `name` (built-in or a TOML path), with the injected defect `bug` if one
    is named; a bad one is an error line and exit 2."""
    try:
        return with_bug(load_config(name), bug)
    except ConfigError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
