"""`kvsm realimpl install sglang`: what the SGLang adapter needs, pinned, installed into the
environment kvsm runs in with that environment's own pip (docs/realimpl.md)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

SGLANG_VERSION = "0.5.20"
REQUIREMENTS = "sglang_requirements.txt"


class InstallError(RuntimeError):
    """pip failed: the message names the step and pip's exit status."""


def requirements_file() -> Path:
    return Path(str(resources.files("kvsm.realimpl").joinpath(REQUIREMENTS)))


def pins() -> list[str]:
    """The pinned requirements (`name==version`), in file order, without comments."""
    out = []
    for line in requirements_file().read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def commands(python: str = sys.executable) -> list[list[str]]:
    """The pip commands the install runs, in order: the pinned requirements with their
    dependencies, then SGLang itself without its own (CUDA-only) requirement list."""
    return [
        [python, "-m", "pip", "install", "-r", str(requirements_file())],
        [python, "-m", "pip", "install", "--no-deps", f"sglang=={SGLANG_VERSION}"],
    ]


def installed() -> str | None:
    """The installed SGLang version, or None."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def run(dry_run: bool = False, quiet: bool = False) -> list[list[str]]:
    """Run the install commands (or only return them with `dry_run`)."""
    cmds = commands()
    if dry_run:
        return cmds
    for cmd in cmds:
        full = cmd + (["-q"] if quiet else [])
        rc = subprocess.call(full)
        if rc != 0:
            raise InstallError(f"'{' '.join(full)}' exited with status {rc}")
    return cmds
