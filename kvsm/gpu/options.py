"""A replay's options and the checks that need no torch, so that bad input is refused
before any process starts or torch is imported."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..log import LogError, model_config, read_log
from .hooks import Hooks

IO_MODES = ("auto", "direct", "staged")
DEVICES = ("cpu", "cuda")


class ReplayError(RuntimeError):
    """The run could not start (bad input or environment); the message says why."""


@dataclass(frozen=True)
class Options:
    log: str
    device: str = "cpu"
    page_bytes: int = 4096  # per page, layer and payload; a multiple of 8
    layers: int = 4
    io: str = "auto"
    timeout_s: float = 300.0
    slab_dir: str = "/dev/shm"
    # where the run's per-rank disk stores (L3) are made, when the log's config has L3;
    # "" = the system's temporary directory
    disk_dir: str = ""
    keep: bool = False  # leave the disk stores in place at the end (their path is in the summary)
    hooks: Hooks = field(default_factory=Hooks)
    # the injected defect the ranks' model has (docs/defects.md); None: the correct model,
    # whatever defect the log was written with
    bug: str | None = None


def check_inputs(opts: Options, ranks: int | None) -> int:
    """Validate what can be validated before any process starts; returns the log's R."""
    try:
        header, stream = read_log(opts.log)
    except LogError as e:
        raise ReplayError(str(e)) from None
    stream.close()
    try:
        model_config(header, opts.bug, opts.log)
    except LogError as e:
        raise ReplayError(str(e)) from None
    R = header.config.R
    if ranks is not None and ranks != R:
        raise ReplayError(f"{opts.log}: the log's config has R={R} but --ranks is {ranks}")
    if opts.page_bytes <= 0 or opts.page_bytes % 8:
        raise ReplayError(f"--page-bytes must be a positive multiple of 8, got {opts.page_bytes}")
    if opts.layers < 1:
        raise ReplayError(f"--layers must be >= 1, got {opts.layers}")
    if not opts.timeout_s > 0:
        raise ReplayError(f"--timeout must be a positive number of seconds, got {opts.timeout_s}")
    if opts.io not in IO_MODES:
        raise ReplayError(f"--io must be one of {', '.join(IO_MODES)}, got {opts.io!r}")
    if opts.device not in DEVICES:
        raise ReplayError(f"--device must be cuda or cpu, got {opts.device!r}")
    if not os.path.isdir(opts.slab_dir):
        raise ReplayError(f"--slab-dir {opts.slab_dir}: not a directory")
    if opts.disk_dir and not os.path.isdir(opts.disk_dir):
        raise ReplayError(f"--disk-dir {opts.disk_dir}: not a directory")
    return R
