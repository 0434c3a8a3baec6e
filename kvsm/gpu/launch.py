"""Start the rank processes of a replay and sum up their reports.

Two ways in, one code path: the standard torch.distributed variables (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) say who a process is. Under torchrun they
are set already and the process runs as that rank. Otherwise this process spawns R
ranks (torch.multiprocessing, spawn) on this host with those variables set, and reads
the summary that rank 0 writes.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import sys
import tempfile
from dataclasses import replace
from typing import Any

from . import NUMPY_WARNING
from .hooks import Hooks, from_env
from .options import Options, ReplayError, check_inputs
from .rank import Report, run_rank


def _once(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A failure of the log itself (a line the model rejects, a line that cannot be read)
    is met alike by every rank: keep it once, with the ranks that met it."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in failures:
        if f.get("kind") in ("log", "rejected"):
            key = (f["kind"], f.get("transition"), f.get("message"))
            if key in seen:
                seen[key]["ranks"].append(f.get("rank"))
                continue
            f = dict(f, ranks=[f.get("rank")])
            seen[key] = f
        out.append(f)
    return out


def summarize(reports: list[Report], ok: bool, opts: Options) -> dict[str, Any]:
    failures = _once(sorted((f for r in reports for f in r.failures), key=lambda f: (f.get("transition", 0), f.get("rank", 0))))
    copied = sum(r.bytes_copied for r in reports)
    busy = union_seconds([iv for r in reports for iv in r.intervals])
    return {
        "ok": ok,
        "ranks": len(reports),
        "transitions": max(r.transitions for r in reports),
        "pages_copied": sum(r.pages_loaded + r.pages_stored for r in reports),
        "bytes_copied": copied,
        "bytes_verified": sum(r.bytes_verified for r in reports),
        "digest_mismatches": sum(1 for f in failures if f["kind"] == "digest"),
        "verify_failures": sum(1 for f in failures if f["kind"] == "verify"),
        "gbps_l1_l2": round(copied / busy / 1e9, 3) if busy > 0 else 0.0,
        "copy_seconds": round(busy, 6),
        "seconds": round(max(r.seconds for r in reports), 3),
        "pages_loaded": sum(r.pages_loaded for r in reports),
        "pages_stored": sum(r.pages_stored for r in reports),
        "pages_filled": sum(r.pages_filled for r in reports),
        "pages_gathered": sum(r.pages_gathered for r in reports),
        "pages_spilled": sum(r.pages_spilled for r in reports),
        "pages_reloaded": sum(r.pages_reloaded for r in reports),
        "bytes_to_disk": sum(r.bytes_to_disk for r in reports),
        "bytes_from_disk": sum(r.bytes_from_disk for r in reports),
        "disk_dir": reports[0].disk_dir if opts.keep and reports[0].disk_dir else None,
        "agreements": reports[0].agreements,
        "device": opts.device,
        "io": reports[0].io,
        "io_note": reports[0].io_note,
        "page_bytes": opts.page_bytes,
        "layers": opts.layers,
        "failures": failures,
        "injected": [x for r in reports for x in r.injected],
    }


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: the time the bus was busy with the
    replay's copies on any rank (one host, one monotonic clock)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _check_device(opts: Options) -> None:
    import torch  # noqa: PLC0415

    if opts.device == "cuda" and not torch.cuda.is_available():
        raise ReplayError("--device cuda: CUDA is not available on this machine")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world: int, opts: Options, addr: str, port: int, out: str) -> None:
    os.environ.update(
        {
            "MASTER_ADDR": addr,
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
        }
    )
    try:
        ok, reports = run_rank(rank, world, opts)
        result = summarize(reports, ok, opts) if reports is not None else None
    except ReplayError as e:  # raised alike on every rank: the parent reports it once
        result = {"error": str(e)}
    if rank == 0:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, out)
    # The rank has reported and left the group; skip the interpreter's teardown of
    # torch (about 2 s a process here), which matters when tests start many runs.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _stop(ctx: Any, slab_dir: str) -> None:
    """The run is abandoned (a rank failed, or SIGINT/SIGTERM reached this process): stop
    the rank processes still running and remove the slab a rank may have made before it
    could unlink it (the ranks' disk stores are in the run's temporary directory)."""
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
        for path in glob.glob(os.path.join(slab_dir, f"kvsm-slab-{p.pid}-*")):
            try:
                os.unlink(path)
            except OSError:
                pass


def replay(opts: Options, ranks: int | None = None) -> dict[str, Any]:
    """Replay `opts.log` on R spawned rank processes of this host; the summary.
    Hooks from `KVSM_GPU_INJECT` are added to `opts.hooks`."""
    import torch.multiprocessing as mp  # noqa: PLC0415 - torch only when a replay runs

    R = check_inputs(opts, ranks)
    _check_device(opts)
    env_hooks = from_env()
    if env_hooks:
        opts = replace(opts, hooks=opts.hooks.merge(env_hooks))
    with tempfile.TemporaryDirectory(prefix="kvsm-gpu-") as d:
        out = os.path.join(d, "summary.json")
        if not opts.keep and not opts.disk_dir:
            # the disk stores go inside this directory, so they are removed even when a
            # rank process dies before it cleans up
            opts = replace(opts, disk_dir=d)
        # Spawned ranks import torch before any kvsm code can filter its numpy warning.
        saved = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved, f"ignore:{NUMPY_WARNING}"]))
        try:
            ctx = mp.start_processes(_child, args=(R, opts, "127.0.0.1", _free_port(), out), nprocs=R, join=False, start_method="spawn")
            try:
                while not ctx.join():
                    pass
            except BaseException:
                _stop(ctx, opts.slab_dir)
                raise
        finally:
            if saved is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = saved
        with open(out) as f:
            result = json.load(f)
    if "error" in result:
        raise ReplayError(result["error"])
    return result


def replay_as_this_rank(opts: Options, ranks: int | None = None) -> tuple[bool, dict[str, Any] | None]:
    """Under torchrun (RANK set): run as that rank. Returns (passed, summary on rank 0)."""
    rank = int(os.environ["RANK"])
    world = int(os.environ.get("WORLD_SIZE", "0"))
    R = check_inputs(opts, ranks)
    if world != R:
        raise ReplayError(f"{opts.log}: the log's config has R={R} but WORLD_SIZE is {world}")
    _check_device(opts)
    env_hooks = from_env()
    if env_hooks:
        opts = replace(opts, hooks=opts.hooks.merge(env_hooks))
    local = os.environ.get("LOCAL_RANK")
    ok, reports = run_rank(rank, world, opts, local_rank=int(local) if local is not None else None)
    return ok, summarize(reports, ok, opts) if reports is not None else None


def under_torchrun() -> bool:
    return "RANK" in os.environ


__all__ = ["Hooks", "Options", "ReplayError", "replay", "replay_as_this_rank", "summarize", "under_torchrun", "union_seconds"]
