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

from ..config import Config, ConfigError, load_config

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


def config_or_exit(name: str) -> Config:
    """The config `name` (built-in or a TOML path); a bad one is an error line and exit 2."""
    try:
        return load_config(name)
    except ConfigError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
