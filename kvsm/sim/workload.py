"""Workloads by name: the bundled trace, a seeded generator, or a trace file by path
(docs/sim.md, Workloads)."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

from ..bounds import MAX_GENERATED_REQUESTS
from .generators import GENERATORS, generate
from .trace import Workload, WorkloadError, read_trace

BUNDLED = {"synthetic": "synthetic_trace.jsonl"}


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("kvsm.sim").joinpath("data", BUNDLED[name])))


def load_workload(
    name_or_path: str,
    requests: int | None = None,
    seed: int = 0,
    device_pages: int = 2048,
) -> Workload:
    """A bundled trace by name (`synthetic`), a generator by name (see
    `kvsm.sim.generators.GENERATORS`), or a trace file by path."""
    if name_or_path in BUNDLED:
        w = read_trace(bundled_path(name_or_path), requests, name=name_or_path)
        # name the package file, not this machine's path, so that logs compare across machines
        return replace(w, source=f"kvsm/sim/data/{BUNDLED[name_or_path]}")
    if name_or_path in GENERATORS:
        n = requests if requests is not None else 2000
        if n > MAX_GENERATED_REQUESTS:
            # a generator makes every request in memory: its size is what --requests claims
            raise WorkloadError(name_or_path, None, f"--requests {n}: a generator makes at most {MAX_GENERATED_REQUESTS} requests")
        return generate(name_or_path, n, seed, device_pages)
    p = Path(name_or_path)
    if not p.exists():
        known = ", ".join(sorted(BUNDLED) + sorted(GENERATORS))
        raise WorkloadError(name_or_path, None, f"no such file, and not a workload name ({known})")
    return read_trace(p, requests)
