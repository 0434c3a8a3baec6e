"""Command plug-ins: every module here but `common` (what they all print with) defines
`register(app)` and adds its commands to the `kvsm` typer app, so that each feature
(TLC, simulator, GPU backend) owns its commands beside its code."""

from __future__ import annotations

import importlib
import pkgutil

import typer


def register_all(app: typer.Typer) -> None:
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "common"):
        importlib.import_module(f"{__name__}.{mod}").register(app)
