"""A replay's options and the checks that need no torch, so that bad input is refused
before any process starts or torch is imported."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..bounds import available_memory
from ..config import Config
from ..log import LogError, read_log
from ..replay import model_config
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


# Bounds on the options (README, "Bounds"); the memory they add up to is checked too.
MAX_PAGE_BYTES = 1 << 26
MAX_LAYERS = 1024
MAX_TIMEOUT_S = 86400


def check_inputs(opts: Options, ranks: int | None) -> int:
    """Validate what can be validated before any process starts; returns the log's R.
    The whole log is read and checked here, once (every line's form, the indices, the end
    line), so that a broken log is one error before any rank starts, not one per rank
    after the ranks have replayed up to the break."""
    try:
        header, stream = read_log(opts.log)
        for _ in stream:
            pass
    except LogError as e:
        raise ReplayError(str(e)) from None
    try:
        model_config(header, opts.bug, opts.log)
    except LogError as e:
        raise ReplayError(str(e)) from None
    R = header.config.R
    if ranks is not None and ranks != R:
        raise ReplayError(f"{opts.log}: the log's config has R={R} but --ranks is {ranks}")
    if opts.page_bytes <= 0 or opts.page_bytes % 8 or opts.page_bytes > MAX_PAGE_BYTES:
        raise ReplayError(f"--page-bytes must be a positive multiple of 8 of at most {MAX_PAGE_BYTES}, got {opts.page_bytes}")
    if not 1 <= opts.layers <= MAX_LAYERS:
        raise ReplayError(f"--layers must be between 1 and {MAX_LAYERS}, got {opts.layers}")
    if not 0 < opts.timeout_s <= MAX_TIMEOUT_S:
        raise ReplayError(f"--timeout must be a positive number of seconds up to {MAX_TIMEOUT_S} (a day), got {opts.timeout_s}")
    if opts.io not in IO_MODES:
        raise ReplayError(f"--io must be one of {', '.join(IO_MODES)}, got {opts.io!r}")
    if opts.device not in DEVICES:
        raise ReplayError(f"--device must be cuda or cpu, got {opts.device!r}")
    for option, d in (("--slab-dir", opts.slab_dir), ("--disk-dir", opts.disk_dir or None)):  # --disk-dir "": the default
        if d is not None and not os.path.isdir(d):
            raise ReplayError(f"{option} {d}: {'not a directory' if os.path.exists(d) else 'does not exist'}")
    check_memory(opts, header.config)
    return R


def _on_tmpfs(path: str) -> bool:
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real = os.path.realpath(path)
    best = max((m for m in mounts if len(m) > 2 and (real == m[1] or real.startswith(m[1].rstrip("/") + "/"))), key=lambda m: len(m[1]), default=None)
    return best is not None and best[2] in ("tmpfs", "ramfs")


def check_memory(opts: Options, cfg: Config) -> None:
    """Refuse a replay whose memory this machine does not have: on the CPU, every rank's
    device pool (the log's L1 pages of its lane) plus the host slab when it lives in RAM
    (a tmpfs such as /dev/shm). A CUDA pool that does not fit is torch's clean error."""
    page = len(cfg.payloads) * opts.layers * opts.page_bytes
    slab = cfg.L2 * page if _on_tmpfs(opts.slab_dir) else 0
    pools = cfg.R * cfg.L1 * page if opts.device == "cpu" else 0
    need = slab + pools
    avail = available_memory()
    if avail is not None and need > 0.8 * avail:
        parts = ([f"{cfg.R} device pools of {cfg.L1} pages"] if pools else []) + ([f"a host slab of {cfg.L2} pages in {opts.slab_dir}"] if slab else [])
        raise ReplayError(
            f"{opts.log}: the replay needs {need / 2**30:.2f} GiB of memory ({' and '.join(parts)}, "
            f"{page} bytes a page = payloads x --layers {opts.layers} x --page-bytes {opts.page_bytes}) "
            f"but this machine has {avail / 2**30:.2f} GiB available: use smaller --page-bytes or --layers"
        )
