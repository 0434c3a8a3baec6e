"""Workloads by name: the bundled trace, a seeded generator, or a trace file by path
(docs/sim.md, Workloads)."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

from ..bounds import MAX_GENERATED_REQUESTS
from ..config import Config
from .generators import CONFIG_PROMPTS, GENERATORS, config_prompts, generate
from .trace import Workload, WorkloadError, read_trace

BUNDLED = {"synthetic": "synthetic_trace.jsonl"}


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("kvsm.sim").joinpath("data", BUNDLED[name])))


def workload_names() -> str:
    """The workload names, for a message: the bundled traces, the generators, config-prompts."""
    return ", ".join(sorted(BUNDLED) + sorted(GENERATORS) + [CONFIG_PROMPTS])


def workload_file(name_or_path: str) -> Path | None:
    """The file `load_workload(name_or_path)` reads: the bundled trace's, or the path
    itself; None for a generator (and for an empty name)."""
    if name_or_path in BUNDLED:
        return bundled_path(name_or_path)
    if not name_or_path or name_or_path in GENERATORS or name_or_path == CONFIG_PROMPTS:
        return None
    return Path(name_or_path)


def load_workload(
    name_or_path: str,
    requests: int | None = None,
    seed: int = 0,
    device_pages: int = 2048,
    config: Config | None = None,
) -> Workload:
    """A bundled trace by name (`synthetic`), a generator by name (see
    `kvsm.sim.generators.GENERATORS`), `config-prompts` (the prompts of `config`), or a
    trace file by path."""
    if not name_or_path:  # Path("") is ".", the current directory: say what is wrong instead
        raise WorkloadError("workload ''", None, f"is empty; give a trace file, 'synthetic' or a generator name ({workload_names()})")
    if name_or_path in BUNDLED:
        w = read_trace(bundled_path(name_or_path), requests, name=name_or_path)
        # name the package file, not this machine's path, so that logs compare across machines
        return replace(w, source=f"kvsm/sim/data/{BUNDLED[name_or_path]}")
    if name_or_path in GENERATORS or name_or_path == CONFIG_PROMPTS:
        n = requests if requests is not None else 2000
        if n > MAX_GENERATED_REQUESTS:
            # a generator makes every request in memory: its size is what --requests claims
            raise WorkloadError(name_or_path, None, f"--requests {n}: a generator makes at most {MAX_GENERATED_REQUESTS} requests")
        if name_or_path != CONFIG_PROMPTS:
            return generate(name_or_path, n, seed, device_pages)
        if config is None or not config.prompts:
            where = "no config given" if config is None else f"config '{config.name}' has no prompts"
            raise WorkloadError(name_or_path, None, f"the config's own prompts are the workload, and {where}")
        return config_prompts(config.prompts, config.P, n, seed)
    p = Path(name_or_path)
    if not p.exists():
        raise WorkloadError(name_or_path, None, f"no such file, and not a workload name ({workload_names()})")
    return read_trace(p, requests)
